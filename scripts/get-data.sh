#!/usr/bin/env bash
# get-data.sh — fetch GPT-2's BPE files and Tiny Shakespeare for llmkit.
#
#   scripts/get-data.sh [-q] [DIR]
#
# DIR (default: $LLMKIT_DATA, or ./data when LLMKIT_DATA is unset) receives
#   DIR/gpt2/encoder.json  DIR/gpt2/vocab.bpe  DIR/tinyshakespeare/input.txt
# Files already in DIR are checked and kept.  A missing file is copied from $LLMKIT_DATA
# when that is another folder holding it, else downloaded (curl or wget) from its public
# location.  Every file is written to a temporary name, checked, then renamed, so an
# interrupted run leaves no partial file.  llm-tokenize finds the vocabulary in
# $LLMKIT_DATA/gpt2 (or ./data/gpt2) by default.
#
# Exit status: 0 all files present, 64 bad usage, 65 a file failed its check,
# 69 a download failed (offline?), 73 DIR cannot be written.
set -u

URL_ENCODER=https://openaipublic.blob.core.windows.net/gpt-2/models/124M/encoder.json
URL_VOCAB=https://openaipublic.blob.core.windows.net/gpt-2/models/124M/vocab.bpe
URL_SHAKESPEARE=https://raw.githubusercontent.com/karpathy/char-rnn/master/data/tinyshakespeare/input.txt
SHA_SHAKESPEARE=86c4e6aa9db7c042ec79f339dcb96d42b0075e16b8fc2e86bf0ca57e2dc565ed

quiet=0
usage() { sed -n '2,16s/^# \{0,1\}//p' "$0"; }
while [ $# -gt 0 ]; do
  case "$1" in
    -h|--help) usage; exit 0 ;;
    -q|--quiet) quiet=1; shift ;;
    --) shift; break ;;
    -*) echo "get-data.sh: unknown option '$1' (try 'scripts/get-data.sh --help')" >&2; exit 64 ;;
    *) break ;;
  esac
done
[ $# -le 1 ] || { echo "get-data.sh: at most one folder (try --help)" >&2; exit 64; }
DIR=${1:-${LLMKIT_DATA:-./data}}
SRC=${LLMKIT_DATA:-}

say() { [ "$quiet" = 1 ] || echo "get-data.sh: $*" >&2; }
err() { echo "get-data.sh: $*" >&2; }

# check REL FILE: does FILE look like the real REL?
check() {
  local rel=$1 f=$2
  [ -s "$f" ] || return 1
  case "$rel" in
    gpt2/encoder.json)
      head -c 1 "$f" | grep -q '{' && grep -q '"<|endoftext|>": *50256' "$f" ;;
    gpt2/vocab.bpe)
      head -n 1 "$f" | grep -q '^#version' && [ "$(wc -l <"$f")" -ge 50000 ] ;;
    tinyshakespeare/input.txt)
      if command -v sha256sum >/dev/null; then
        [ "$(sha256sum <"$f" | cut -d' ' -f1)" = "$SHA_SHAKESPEARE" ]
      else
        [ "$(wc -c <"$f")" -eq 1115394 ]
      fi ;;
  esac
}

download() { # URL OUT: curl or wget, with a timeout; the tool's own message on failure
  if command -v curl >/dev/null; then
    curl -fsSL --connect-timeout 15 --retry 1 -o "$2" "$1" 2>"$2.log"
  elif command -v wget >/dev/null; then
    wget -q -T 15 -t 1 -O "$2" "$1" 2>"$2.log"
  else
    echo "neither curl nor wget is installed" >"$2.log"; return 1
  fi
}

status=0 unwritable=
fetch() { # REL URL
  local rel=$1 url=$2 out="$DIR/$1"
  if [ -e "$out" ]; then
    if check "$rel" "$out"; then say "$out: present"; return 0; fi
    err "$out exists but does not look like $rel (remove it to fetch it again)"
    status=65; return 1
  fi
  local dir; dir=$(dirname "$out")
  mkdir -p "$dir" 2>/dev/null && [ -w "$dir" ] || {
    case " $unwritable " in *" $dir "*) ;; *) err "cannot create or write the folder '$dir'";; esac
    unwritable="$unwritable $dir"; status=73; return 1; }
  local tmp="$out.part.$$"
  trap "rm -f '$tmp' '$tmp.log'" EXIT
  if [ -n "$SRC" ] && [ -s "$SRC/$rel" ] &&
     [ "$(cd "$SRC" 2>/dev/null && pwd -P)" != "$(cd "$DIR" && pwd -P)" ]; then
    cp "$SRC/$rel" "$tmp" && chmod 644 "$tmp" || { err "cannot copy '$SRC/$rel'"; rm -f "$tmp"; status=73; return 1; }
    how="copied from $SRC"
  else
    say "downloading $url"
    if ! download "$url" "$tmp"; then
      err "cannot download $rel from $url: $(tail -n 1 "$tmp.log" | head -c 300)"
      rm -f "$tmp" "$tmp.log"
      rmdir "$dir" "$DIR" 2>/dev/null   # the folders it made for nothing, if empty
      [ "$status" = 0 ] && status=69
      return 1
    fi
    rm -f "$tmp.log"
    how="downloaded"
  fi
  if ! check "$rel" "$tmp"; then
    err "$rel ($how) failed its check; not kept"
    rm -f "$tmp"; status=65; return 1
  fi
  mv -f "$tmp" "$out" || { err "cannot rename into '$out'"; rm -f "$tmp"; status=73; return 1; }
  trap - EXIT
  say "$out: $how"
}

fetch gpt2/encoder.json "$URL_ENCODER"
fetch gpt2/vocab.bpe "$URL_VOCAB"
fetch tinyshakespeare/input.txt "$URL_SHAKESPEARE"

if [ "$status" = 69 ]; then
  err "some downloads failed: this machine seems to be offline (or the sites are unreachable)."
  err "Either run this script where there is network and copy '$DIR' here, or point"
  err "LLMKIT_DATA at a folder that already holds gpt2/encoder.json, gpt2/vocab.bpe and"
  err "tinyshakespeare/input.txt (e.g. LLMKIT_DATA=/path/to/data scripts/get-data.sh ./data)."
fi
[ "$status" = 0 ] && say "all data in $DIR (use LLMKIT_DATA=$DIR, or --vocab-dir $DIR/gpt2)"
exit "$status"
