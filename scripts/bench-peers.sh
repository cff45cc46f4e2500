#!/usr/bin/env bash
# bench-peers.sh — one GPT-2 training step (forward + backward + AdamW) in llmkit,
# llm.c's CPU trainer (train_gpt2.c) and PyTorch on the CPU, back to back, same shapes
# and threads, repeated; prints each run and the ratios (the machine is shared and
# noisy: compare runs of the same round).
#
#   scripts/bench-peers.sh [-r ROUNDS] [-t THREADS] [-s STEPS] [-m "124m small"] [-o FILE]
#
# Needs: build/bench/bench_step (make bench CUDA=0); an llm.c source tree in $LLMC_SRC
# (default /tmp/llmc-src: a checkout of karpathy/llm.c — the script never downloads; it
# is built in $WORK, never committed); numpy and torch in $TORCH_PY (default
# /usr/bin/python3).  llm.c reads its own checkpoint format: a random fp32 one is written
# for each shape (the real weights are not needed for timing).
#
# Models: 124m = 12 layers, 12 heads, 768 wide, vocab 50257 (padded 50304), B=4, T=64;
#         small = 4 layers, 4 heads, 256 wide, same vocab, B=8, T=128.  maxT 1024.
# Every tool: median of STEPS timed steps after 2 warm-up steps; peak RSS of its process.
# PyTorch gets its best setting: torch.set_num_threads(THREADS), OMP_WAIT_POLICY=PASSIVE,
# foreach AdamW.  llmkit and PyTorch clip the gradient norm to 1 (llm.c does not clip).
set -euo pipefail
ROUNDS=2 THREADS=2 STEPS=10 MODELS="124m small" OUT=
while getopts r:t:s:m:o:h o; do
  case $o in
    r) ROUNDS=$OPTARG ;; t) THREADS=$OPTARG ;; s) STEPS=$OPTARG ;; m) MODELS=$OPTARG ;;
    o) OUT=$OPTARG ;; *) sed -n '2,20p' "$0"; exit 64 ;;
  esac
done
ROOT=$(cd "$(dirname "$0")/.." && pwd)
LLMC_SRC=${LLMC_SRC:-/tmp/llmc-src}
WORK=${WORK:-/tmp/llmkit-peers}
TORCH_PY=${TORCH_PY:-/usr/bin/python3}
BENCH=$ROOT/build/bench/bench_step
[ -x "$BENCH" ] || { echo "bench-peers: build $BENCH first (make bench CUDA=0)" >&2; exit 66; }
[ -f "$LLMC_SRC/train_gpt2.c" ] || { echo "bench-peers: no llm.c source in $LLMC_SRC" >&2; exit 66; }
mkdir -p "$WORK"

# ---- llm.c: a timing driver that includes train_gpt2.c (TESTING skips its main) ----
cat >"$WORK/llmc_step.c" <<'C'
#define TESTING
#include "train_gpt2.c"
#include <sys/resource.h>
static double now_s(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + t.tv_nsec * 1e-9; }
static int cmpd(const void *a, const void *b) { double x = *(const double *)a, y = *(const double *)b; return x < y ? -1 : x > y; }
int main(int argc, char **argv) {
    if (argc < 6) { fprintf(stderr, "usage: llmc_step CKPT B T STEPS NAME\n"); return 64; }
    int B = atoi(argv[2]), T = atoi(argv[3]), steps = atoi(argv[4]), warm = 2;
    GPT2 model;
    gpt2_build_from_checkpoint(&model, argv[1]);
    int *in = malloc(sizeof(int) * B * T), *tg = malloc(sizeof(int) * B * T);
    unsigned long long s = 42;
    for (int i = 0; i < B * T; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull; in[i] = (int)((s >> 33) % model.config.vocab_size);
        s = s * 6364136223846793005ull + 1442695040888963407ull; tg[i] = (int)((s >> 33) % model.config.vocab_size);
    }
    double *t = malloc(sizeof(double) * steps);
    for (int i = 0; i < warm + steps; i++) {
        double t0 = now_s();
        gpt2_forward(&model, in, tg, B, T);
        gpt2_zero_grad(&model);
        gpt2_backward(&model);
        gpt2_update(&model, 3e-4f, 0.9f, 0.95f, 1e-8f, 0.1f, i + 1);
        if (i >= warm) t[i - warm] = now_s() - t0;
    }
    qsort(t, steps, sizeof(double), cmpd);
    double med = steps % 2 ? t[steps / 2] : 0.5 * (t[steps / 2 - 1] + t[steps / 2]);
    struct rusage ru; getrusage(RUSAGE_SELF, &ru);
    printf("{\"tool\":\"llm.c\",\"model\":\"%s\",\"ms_per_step\":%.2f,\"tokens_per_s\":%.1f,"
           "\"gflops\":%.2f,\"peak_rss_mb\":%.1f,\"loss\":%.4f}\n", argv[5], med * 1e3, B * T / med,
           6.0 * model.num_parameters * B * T / med * 1e-9, ru.ru_maxrss / 1024.0, model.mean_loss);
    return 0;
}
C
if [ ! -x "$WORK/llmc_step" ] || [ "$WORK/llmc_step.c" -nt "$WORK/llmc_step" ]; then
  # llm.c's own flags (its Makefile): -Ofast -march=native -fopenmp -DOMP
  cc -Ofast -march=native -fopenmp -DOMP -Wno-unused-result -I"$LLMC_SRC" \
     "$WORK/llmc_step.c" -lm -o "$WORK/llmc_step"
fi

# ---- PyTorch ----
cat >"$WORK/torch_step.py" <<'PY'
import json, math, resource, sys, time
import torch, torch.nn.functional as F
name, L, NH, C, B, T, steps, threads = sys.argv[1], *map(int, sys.argv[2:])
torch.set_num_threads(threads)
V, Vp, maxT = 50257, 50304, 1024
g = torch.Generator().manual_seed(0)
def P(*shape, std=0.02):
    return (torch.randn(*shape, generator=g) * std).requires_grad_(True)
def Z(*shape, val=0.0):
    return torch.full(shape, val).requires_grad_(True)
wte, wpe = P(Vp, C), P(maxT, C)
layers = [dict(l1w=Z(C, val=1.0), l1b=Z(C), qw=P(3 * C, C), qb=Z(3 * C), pw=P(C, C, std=0.02 / math.sqrt(2 * L)),
               pb=Z(C), l2w=Z(C, val=1.0), l2b=Z(C), fw=P(4 * C, C), fb=Z(4 * C),
               fpw=P(C, 4 * C, std=0.02 / math.sqrt(2 * L)), fpb=Z(C)) for _ in range(L)]
lfw, lfb = Z(C, val=1.0), Z(C)
params = [wte, wpe, lfw, lfb] + [p for d in layers for p in d.values()]
decay = [p for p in params if p.dim() >= 2]
nodecay = [p for p in params if p.dim() < 2]
opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": nodecay, "weight_decay": 0.0}],
                        lr=3e-4, betas=(0.9, 0.95), eps=1e-8, foreach=True)
mask = torch.ones(T, T, dtype=torch.bool).tril()
hs = C // NH
def forward(idx, tgt):
    x = wte[idx] + wpe[:T]
    for d in layers:
        h = F.layer_norm(x, (C,), d["l1w"], d["l1b"])
        q, k, v = F.linear(h, d["qw"], d["qb"]).split(C, dim=-1)
        q, k, v = (t.view(B, T, NH, hs).transpose(1, 2) for t in (q, k, v))
        a = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hs))
        a = torch.softmax(a.masked_fill(~mask, float("-inf")), dim=-1)
        y = (a @ v).transpose(1, 2).reshape(B, T, C)
        x = x + F.linear(y, d["pw"], d["pb"])
        h = F.layer_norm(x, (C,), d["l2w"], d["l2b"])
        x = x + F.linear(F.gelu(F.linear(h, d["fw"], d["fb"]), approximate="tanh"), d["fpw"], d["fpb"])
    x = F.layer_norm(x, (C,), lfw, lfb)
    logits = x @ wte.t()
    return F.cross_entropy(logits[..., :V].reshape(-1, V), tgt.reshape(-1))
idx = torch.randint(0, V, (B, T), generator=g)
tgt = torch.randint(0, V, (B, T), generator=g)
times = []
for i in range(steps + 2):
    t0 = time.perf_counter()
    opt.zero_grad(set_to_none=True)
    loss = forward(idx, tgt)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(params, 1.0)
    opt.step()
    if i >= 2:
        times.append(time.perf_counter() - t0)
times.sort()
med = times[len(times) // 2] if len(times) % 2 else 0.5 * (times[len(times) // 2 - 1] + times[len(times) // 2])
n = sum(p.numel() for p in params)
print(json.dumps({"tool": "pytorch", "model": name, "ms_per_step": round(med * 1e3, 2),
                  "tokens_per_s": round(B * T / med, 1), "gflops": round(6 * n * B * T / med * 1e-9, 2),
                  "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
                  "loss": round(float(loss), 4), "torch": torch.__version__}))
PY

# ---- random llm.c checkpoints (fp32, version 3) ----
shape() { case $1 in 124m) echo "12 12 768 4 64" ;; small) echo "4 4 256 8 128" ;; *) echo "bench-peers: unknown model $1" >&2; exit 64 ;; esac; }
for m in $MODELS; do
  read -r L NH C B T <<<"$(shape "$m")"
  ck=$WORK/gpt2_$m.bin
  [ -f "$ck" ] || "$TORCH_PY" - "$ck" "$L" "$NH" "$C" <<'PY'
import sys, numpy as np
path, L, NH, C = sys.argv[1], *map(int, sys.argv[2:])
V, Vp, maxT = 50257, 50304, 1024
h = np.zeros(256, "<i4"); h[:8] = [20240326, 3, maxT, V, L, NH, C, Vp]
n = Vp * C + maxT * C + L * (12 * C * C + 13 * C) + 2 * C
a = np.random.default_rng(0).normal(0, 0.02, n).astype("<f4")
a[V * C:Vp * C] = 0
with open(path, "wb") as f:
    f.write(h.tobytes()); f.write(a.tobytes())
PY
done

res=$WORK/results.jsonl
: >"$res"
echo "# $(date -u +%FT%TZ) threads=$THREADS steps=$STEPS rounds=$ROUNDS load: $(cut -d' ' -f1-3 /proc/loadavg)" >&2
for r in $(seq 1 "$ROUNDS"); do
  for m in $MODELS; do
    read -r L NH C B T <<<"$(shape "$m")"
    { "$BENCH" "$m" --threads "$THREADS" --steps "$STEPS" --json | sed "s/^{/{\"tool\":\"llmkit\",\"round\":$r,/"
      OMP_NUM_THREADS=$THREADS "$WORK/llmc_step" "$WORK/gpt2_$m.bin" "$B" "$T" "$STEPS" "$m" | tail -1 | sed "s/^{/{\"round\":$r,/"
      OMP_NUM_THREADS=$THREADS OMP_WAIT_POLICY=PASSIVE "$TORCH_PY" "$WORK/torch_step.py" "$m" "$L" "$NH" "$C" "$B" "$T" "$STEPS" "$THREADS" | sed "s/^{/{\"round\":$r,/"
    } | tee -a "$res" >&2
  done
done

python3 - "$res" <<'PY' | tee ${OUT:+"$OUT"}
import json, sys, collections
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
by = collections.defaultdict(dict)
for r in rows:
    by[(r["round"], r["model"])][r["tool"]] = r
print("| round | model | llmkit ms | llm.c ms | PyTorch ms | llm.c/llmkit | PyTorch/llmkit | llmkit GFLOP/s | sgemm GFLOP/s | llmkit/sgemm | RSS llmkit / llm.c / torch MB |")
print("|---|---|---|---|---|---|---|---|---|---|---|")
for (rd, m), t in sorted(by.items()):
    k, c, p = t.get("llmkit"), t.get("llm.c"), t.get("pytorch")
    if not k:
        continue
    f = lambda x: "%.1f" % x["ms_per_step"] if x else "-"
    q = lambda x: "%.2fx" % (x["ms_per_step"] / k["ms_per_step"]) if x else "-"
    rss = " / ".join("%.0f" % x["peak_rss_mb"] if x else "-" for x in (k, c, p))
    print("| %d | %s | %s | %s | %s | %s | %s | %.1f | %.1f | %.0f%% | %s |" % (
        rd, m, f(k), f(c), f(p), q(c), q(p), k["gflops"], k["sgemm_gflops"],
        100 * k["fraction_of_sgemm"], rss))
PY
