#!/bin/sh
# plot-roofline.sh PROFILE.json OUT.png — a roofline from llm-profile --json: the
# machine's compute roof (peaks.gflops) and bandwidth slope (peaks.gbs), and each
# profiled op (site) as a point at (FLOP/byte, achieved GFLOP/s).  Needs python3, gnuplot.
set -eu
[ $# -eq 2 ] || { echo "usage: $0 PROFILE.json OUT.png" >&2; exit 64; }
in=$1 out=$2
[ -r "$in" ] || { echo "$0: cannot read '$in'" >&2; exit 66; }
command -v gnuplot >/dev/null || { echo "$0: gnuplot not found (apt-get install gnuplot-nox)" >&2; exit 69; }
tmp=$(mktemp -d /tmp/llmkit-plot.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
python3 - "$in" "$tmp/ops.dat" "$tmp/peaks" <<'P'
import json, sys
d = json.load(open(sys.argv[1]))
pk = d.get("peaks", {})
g, b = pk.get("gflops") or 0, pk.get("gbs") or 0
if not (g > 0 and b > 0):
    sys.exit("the profile has no peaks (run llm-profile with measured or given peaks)")
with open(sys.argv[2], "w") as f:
    for o in d["ops"]:
        if o["gflop"] <= 0 or o["gb"] <= 0 or o["gflops"] <= 0:
            continue
        label = o["op"].replace("_forward", ".f").replace("_backward", ".b")
        if o["site"] and o["site"] not in ("optimizer",):
            label += ":" + o["site"]
        # label the ops that matter (>= 2% of the time); the rest stay unlabelled dots
        f.write('%g %g "%s" %g\n' % (o["intensity"], o["gflops"], label if o["pct"] >= 2 else "", o["pct"]))
open(sys.argv[3], "w").write("%g %g %s %s\n" % (g, b, d.get("mode", "?"), d.get("device", "?")))
P
read -r G B MODE DEV <"$tmp/peaks"
gnuplot <<G
set terminal pngcairo size 1000,650 noenhanced font ',10'
set output '$out'
set title sprintf('Roofline: llm-profile %s on %s (peaks %.0f GFLOP/s, %.1f GB/s; point size ~ share of time)', '$MODE', '$DEV', $G, $B)
set xlabel 'arithmetic intensity (FLOP/byte)'
set ylabel 'GFLOP/s'
set logscale xy
set grid
set key bottom right
set xrange [0.05:1000]
roof(x) = (x * $B < $G) ? x * $B : $G
plot roof(x) with lines lw 3 lc rgb '#444444' title 'roofline', \
     '$tmp/ops.dat' using 1:2:(1 + sqrt(\$4)) with points pt 7 ps variable lc rgb '#c03030' title 'ops', \
     '$tmp/ops.dat' using 1:2:3 with labels offset 1,0.6 left font ',8' notitle
G
echo "$out"
