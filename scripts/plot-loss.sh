#!/bin/sh
# plot-loss.sh METRICS.jsonl OUT.png — the loss curve of an llm-train run from its
# metrics (JSON lines: step lines with "loss", eval lines with "val_loss").
# Needs python3 and gnuplot.
set -eu
[ $# -eq 2 ] || { echo "usage: $0 METRICS.jsonl OUT.png" >&2; exit 64; }
in=$1 out=$2
[ -r "$in" ] || { echo "$0: cannot read '$in'" >&2; exit 66; }
command -v gnuplot >/dev/null || { echo "$0: gnuplot not found (apt-get install gnuplot-nox)" >&2; exit 69; }
tmp=$(mktemp -d /tmp/llmkit-plot.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
python3 - "$in" "$tmp" <<'P'
import json, os, sys
tr, va = [], []
for line in open(sys.argv[1]):
    line = line.strip()
    if not line.startswith("{"):
        continue
    try:
        d = json.loads(line)
    except ValueError:
        continue
    if "loss" in d and d["loss"] is not None:
        tr.append((d["step"], d["loss"]))
    if "val_loss" in d and d["val_loss"] is not None:
        va.append((d["step"], d["val_loss"]))
if not tr:
    sys.exit("no step lines with a loss")
with open(os.path.join(sys.argv[2], "train.dat"), "w") as f:
    f.writelines("%d %g\n" % p for p in tr)
with open(os.path.join(sys.argv[2], "val.dat"), "w") as f:
    f.writelines("%d %g\n" % p for p in va)
P
val=""
[ -s "$tmp/val.dat" ] && val=", '$tmp/val.dat' using 1:2 with linespoints lw 2 pt 7 title 'val loss'"
gnuplot <<G
set terminal pngcairo size 900,560 noenhanced font ',11'
set output '$out'
set title 'llm-train loss'
set xlabel 'step'
set ylabel 'loss (nats/token)'
set grid
plot '$tmp/train.dat' using 1:2 with lines lw 2 title 'train loss'$val
G
echo "$out"
