#!/usr/bin/env bash
# Runs every test that needs no GPU and prints one final line "N passed, N failed".
#   unit tests: $UNITDIR/test_* (cmocka, TAP output)
#   CLI tests:  tests/cli/*.sh (TAP lines via tests/cli/lib.sh), with $BIN on PATH
# Environment: BIN, UNITDIR (set by make), TESTS=pattern to run a subset,
#              LLM_SAN=1 under sanitizers, TEST_TIMEOUT seconds per file (default 900; a
#              script's "# test-timeout: N" line among its first five raises it for it).
set -u
cd "$(dirname "$0")/.." || exit 2
: "${BIN:=$PWD/bin}" "${UNITDIR:=$PWD/build/tests}" "${TEST_TIMEOUT:=900}"
export BIN UNITDIR LLM_ROOT=$PWD
export PATH="$BIN:$PATH"
export CMOCKA_MESSAGE_OUTPUT=TAP
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=0:exitcode=99}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1:exitcode=98}
pass=0; fail=0; skipped=0; failed=()
log=$(mktemp -d /tmp/llmkit-tests.XXXXXX)

run_one() { # name cmd...
  local name=$1; shift
  case "$name" in *${TESTS:-}*) ;; *) return;; esac
  local out="$log/$(basename "$name").out" t0=$SECONDS tmo=$TEST_TIMEOUT
  # a script may ask for longer than TEST_TIMEOUT in a "# test-timeout: N" line (never less)
  local own=$([ "$1" = bash ] && sed -n '2,5s/^# test-timeout: \([0-9]\{1,5\}\)$/\1/p' "$2" | head -1)
  [ -n "$own" ] && [ "$own" -gt "$tmo" ] && tmo=$own
  timeout "$tmo" "$@" >"$out" 2>&1; local rc=$?
  local p f s
  # TAP: "ok N - name", "not ok N - name"; a "# SKIP" directive on either is a skip
  # (cmocka writes skipped tests as "not ok N # SKIP").
  s=$(grep -cE '^(not )?ok( |$).*# *SKIP' "$out")
  p=$(grep -E '^ok( |$)' "$out" | grep -cvE '# *SKIP')
  f=$(grep -E '^not ok( |$)' "$out" | grep -cvE '# *SKIP')
  if [ "$rc" != 0 ] && [ "$f" = 0 ]; then
    f=1; echo "not ok - $name exited $rc without reporting a failure" >>"$out"
  fi
  if [ "$p" = 0 ] && [ "$f" = 0 ] && [ "$s" = 0 ]; then
    f=1; echo "not ok - $name ran no test" >>"$out"
  fi
  pass=$((pass + p)); fail=$((fail + f)); skipped=$((skipped + s))
  printf '%-40s %4d passed %3d failed %3d skipped %4ds\n' "$name" "$p" "$f" "$s" $((SECONDS - t0))
  if [ "$f" != 0 ]; then
    failed+=("$name")
    grep -vE '# *SKIP' "$out" | grep -E -B2 -A12 '^not ok' | head -60 | sed 's/^/    /'
  fi
}

for t in "$UNITDIR"/test_*; do
  [ -x "$t" ] || continue
  run_one "unit/$(basename "$t")" "$t"
done
for t in tests/cli/*.sh; do
  [ -f "$t" ] || continue
  [ "$(basename "$t")" = lib.sh ] && continue
  run_one "cli/$(basename "$t" .sh)" bash "$t"
done

[ ${#failed[@]} = 0 ] || echo "failed: ${failed[*]} (logs in $log)"
[ ${#failed[@]} = 0 ] && rm -rf "$log"
echo "tests: $pass passed, $fail failed, $skipped skipped"
[ "$fail" = 0 ]
