# Sourced by tests/cli/*.sh.  Prints TAP lines; tests/run.sh counts them.
# Programs come from $BIN (on PATH); shared data from $LLM_DATA (default ../shared/data).
set -u
ROOT=${LLM_ROOT:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)}
BIN=${BIN:-$ROOT/bin}
export PATH="$BIN:$PATH"
DATA=${LLM_DATA:-$ROOT/../shared/data}
TMP=$(mktemp -d /tmp/llmkit-cli.XXXXXX)
trap 'rm -rf "$TMP"' EXIT
_n=0
ok()    { _n=$((_n+1)); echo "ok $_n - $*"; }
notok() { _n=$((_n+1)); echo "not ok $_n - $*"; }
# check NAME CMD...: passes when CMD exits 0
check() { local name=$1; shift; if "$@"; then ok "$name"; else notok "$name"; fi; }
# expect_exit NAME CODE CMD...: passes when CMD exits CODE; stderr kept in $TMP/err
expect_exit() {
  local name=$1 want=$2; shift 2
  "$@" >"$TMP/out" 2>"$TMP/err"; local got=$?
  if [ "$got" = "$want" ]; then ok "$name"; else notok "$name (exit $got, want $want: $(head -c 300 "$TMP/err"))"; fi
}
# skip NAME REASON
skip()  { _n=$((_n+1)); echo "ok $_n - $1 # SKIP $2"; }
have_data() { [ -f "$DATA/$1" ]; }
