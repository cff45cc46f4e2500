#!/usr/bin/env bash
# Man pages: every page passes `mandoc -Tlint -Werror`; every bin/llm-* program has a
# page in man/man1, and the long options its --help prints (and those of each subcommand,
# for programs whose --help has a "commands:" list) are exactly the options the page
# documents as list items (lines of the rendered page that start with "-"), and the
# environment variables its --help lists are those the page's ENVIRONMENT section names.
# --help and --version are implicit in every program: a page may document them or not.
. "$(dirname "$0")/lib.sh"

if ! command -v mandoc >/dev/null; then
  skip "man pages" "mandoc not installed"; echo "1..$_n"; exit 0
fi

for page in "$ROOT"/man/man*/*.[1-9]; do
  [ -f "$page" ] || continue
  if mandoc -Tlint -Werror "$page" >"$TMP/lint" 2>&1; then ok "lint ${page#$ROOT/}"
  else notok "lint ${page#$ROOT/}: $(head -3 "$TMP/lint" | tr '\n' ' ')"; fi
done

# long options on option lines (first non-blank character '-') of a --help text
help_opts() { grep -E '^[[:space:]]+-' | grep -oE -- '--[a-z0-9][a-z0-9-]*' ; }
# long options in the tags of a rendered page: the part of a line before the text column
man_opts() {
  mandoc -Tascii "$1" | col -bx | grep -E '^[[:space:]]+-' | sed -E 's/([^ ])(  +|$).*/\1/' |
    grep -oE -- '--[a-z0-9][a-z0-9-]*'
}

progs=0
for p in "$BIN"/llm-*; do
  [ -x "$p" ] && [ -f "$p" ] || continue
  progs=$((progs + 1))
  prog=$(basename "$p")
  page=$ROOT/man/man1/$prog.1
  if [ ! -f "$page" ]; then notok "$prog: no man page man/man1/$prog.1"; continue; fi
  if ! "$p" --help >"$TMP/help" 2>&1; then notok "$prog: --help failed"; continue; fi
  help_opts <"$TMP/help" >"$TMP/h"
  # subcommands: the lines after "commands:" up to the next blank line
  subs=$(awk '/^commands:/{on=1; next} on && /^[[:space:]]*$/{on=0} on && /^  [a-z]/{print $1}' "$TMP/help")
  fail=""
  for s in $subs; do
    if "$p" "$s" --help >"$TMP/shelp" 2>&1; then help_opts <"$TMP/shelp" >>"$TMP/h"
    else fail="$fail; '$prog $s --help' failed"; fi
  done
  sort -u "$TMP/h" | grep -vxE -- '--(help|version)' >"$TMP/hs"
  man_opts "$page" | sort -u | grep -vxE -- '--(help|version)' >"$TMP/ms"
  undoc=$(comm -23 "$TMP/hs" "$TMP/ms" | tr '\n' ' ')
  extra=$(comm -13 "$TMP/hs" "$TMP/ms" | tr '\n' ' ')
  [ -n "$undoc" ] && fail="$fail; in --help but not in the page: $undoc"
  [ -n "$extra" ] && fail="$fail; in the page but not in --help: $extra"
  # the environment variables: --help's "environment" lines and the page's ENVIRONMENT
  # section tags (.It Ev NAME [, NAME]) name the same ones
  awk '/^environment/{on=1; next} on && /^  [A-Z]/{print $1}' "$TMP/help" | sort -u >"$TMP/he"
  awk '/^\.Sh ENVIRONMENT/{on=1; next} /^\.Sh/{on=0} on && /^\.It Ev /{for (i = 3; i <= NF; i++) if ($i ~ /^[A-Z][A-Z0-9_]+$/) print $i}' \
    "$page" | sort -u >"$TMP/me"
  undoc=$(comm -23 "$TMP/he" "$TMP/me" | tr '\n' ' ')
  extra=$(comm -13 "$TMP/he" "$TMP/me" | tr '\n' ' ')
  [ -n "$undoc" ] && fail="$fail; environment in --help but not in the page: $undoc"
  [ -n "$extra" ] && fail="$fail; environment in the page but not in --help: $extra"
  n=$(wc -l <"$TMP/hs") ne=$(wc -l <"$TMP/he")
  if [ -z "$fail" ]; then ok "$prog: --help and man page agree ($n options, $ne environment variables${subs:+, subcommands: $(echo $subs)})"
  else notok "$prog:${fail#;}"; fi
done
[ $progs -gt 0 ] || notok "no programs in $BIN"
echo "1..$_n"
