#!/bin/sh
# plot-throughput.sh IN.json OUT.png — tokens/s against batch size from llm-bench train
# or infer output (--format json or jsonl): one line per benchmark/op (train step,
# infer prefill, infer decode).  Needs python3 and gnuplot.
set -eu
[ $# -eq 2 ] || { echo "usage: $0 IN.json OUT.png" >&2; exit 64; }
in=$1 out=$2
[ -r "$in" ] || { echo "$0: cannot read '$in'" >&2; exit 66; }
command -v gnuplot >/dev/null || { echo "$0: gnuplot not found (apt-get install gnuplot-nox)" >&2; exit 69; }
tmp=$(mktemp -d /tmp/llmkit-plot.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
python3 - "$in" "$tmp" <<'P'
import json, os, sys
txt = open(sys.argv[1]).read().strip()
try:
    d = json.loads(txt)
    rows = d["results"] if isinstance(d, dict) else d
except ValueError:
    rows = [json.loads(l) for l in txt.splitlines() if l.strip()]
series = {}
for r in rows:
    if r.get("unit") != "tokens/s" or "batch" not in r:
        continue
    key = "%s %s (%s)" % (r["benchmark"], r["op"], r["device"])
    series.setdefault(key, []).append((r["batch"], r["rate"]))
if not series:
    sys.exit("no tokens/s rows with a batch field (llm-bench train or infer output)")
names = []
for i, (k, pts) in enumerate(sorted(series.items())):
    with open(os.path.join(sys.argv[2], "s%d.dat" % i), "w") as f:
        for b, r in sorted(pts):
            f.write("%g %g\n" % (b, r))
    names.append(k)
open(os.path.join(sys.argv[2], "names"), "w").write("\n".join(names) + "\n")
P
n=$(wc -l <"$tmp/names")
plot=""
i=0
while [ $i -lt "$n" ]; do
  title=$(sed -n "$((i + 1))p" "$tmp/names")
  plot="$plot${plot:+, }'$tmp/s$i.dat' using 1:2 with linespoints lw 2 pt 7 title '$title'"
  i=$((i + 1))
done
gnuplot <<G
set terminal pngcairo size 900,560 noenhanced font ',11'
set output '$out'
set title 'Throughput against batch size'
set xlabel 'batch size'
set ylabel 'tokens/s'
set logscale x 2
set grid
set key top left
plot $plot
G
echo "$out"
