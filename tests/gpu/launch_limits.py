#!/usr/bin/env python3
"""launch_limits.py [--all-launched SRCDIR] RESDIR LOG [LOG...] — the emulator's kernel
launches held to the limits of the hardware that only the real compiler knows.

tests/emu runs every launch through the checks it can make by itself (threads per block,
grid, dynamic shared memory against 48 KiB or the opt-in).  What it cannot know is what
ptxas made of each kernel: a kernel of 72 registers launched with 1024 threads fails on a
GPU ("too many resources requested for launch") and runs fine in the emulator.  This joins
the two:
  RESDIR  `make CUDA=1 cuda-res`: per .cu, ptxas -v (registers, static shared memory,
          spills, per sm_80/sm_90 kernel) and the PTX's .maxntid (__launch_bounds__);
  LOG     files written by emulated runs with LLM_EMU_LAUNCH_LOG set (tests/emu
          cuda_rt.cpp): per kernel the most threads per block and dynamic shared memory
          it was launched with, and its shared-memory opt-in.
Kernels are joined by name without template arguments (the emulator knows them as written
at the launch, `k<LO, HS>`), taking the most demanding instantiation: conservative.
For every launched kernel and architecture it checks
  - threads <= __launch_bounds__ when there is one;
  - registers: (registers per thread, allocated per warp in units of 256) x warps <= 64K;
  - shared memory (sm_90, the emulator's device): static + dynamic <= 48 KiB unless the
    kernel opted in to at least the dynamic size, and static + opt-in <= 227 KiB (an
    opt-in that a GPU refuses);
and prints a table: registers, spills, shared memory and resident blocks per SM on sm_90.
Kernels compiled but never launched by the logs are listed; with --all-launched SRCDIR
(e.g. kernels/cuda) one compiled from a source under SRCDIR that never ran is a failure:
a kernel the emulated tests never reach is a kernel nothing has checked.  Exit 1 when a
limit is broken or nothing was joined, 0 otherwise."""
import argparse
import glob
import os
import re
import subprocess
import sys

REGS_PER_BLOCK = 65536
SMEM_DEFAULT = 48 * 1024
SMEM_OPTIN = {'sm_80': 163 * 1024, 'sm_90': 227 * 1024}
SMEM_PER_SM = {'sm_80': 164 * 1024, 'sm_90': 228 * 1024}
BLOCK_RESERVED = 1024   # shared memory the system keeps per resident block (sm_80+)
THREADS_PER_SM = 2048
BLOCKS_PER_SM = 32


def base_name(name):
    """'void k<2, 64>(float*, int)' or 'k<LO,_HS>' -> 'k'"""
    name = re.sub(r'^void\s+', '', name.strip())
    name = re.split(r'[<(]', name, 1)[0]
    return name.split('::')[-1]


def demangle(names):
    out = subprocess.run(['c++filt'], input='\n'.join(names), capture_output=True, text=True,
                         check=True).stdout.split('\n')
    return dict(zip(names, out))


def read_res(resdir):
    """{base: {arch: [regs, static smem, spill bytes]}}, {base: min maxntid}, the number of
    files, {base: the sources (relative to resdir, .txt for .cu) it was compiled from}"""
    ents, bounds, srcs = [], [], {}
    files = glob.glob(os.path.join(resdir, '**', '*.txt'), recursive=True)
    for path in files:
        cur = None
        rel = os.path.relpath(path, resdir)
        for line in open(path, encoding='utf-8', errors='replace'):
            m = re.search(r"Compiling entry function '(\S+)' for '(sm_\d+)'", line)
            if m:
                cur = [m.group(1), m.group(2), 0, 0, 0]
                srcs.setdefault(m.group(1), set()).add(rel)
                continue
            m = re.search(r'(\d+) bytes spill stores, (\d+) bytes spill loads', line)
            if m and cur:
                cur[4] = int(m.group(1)) + int(m.group(2))
            m = re.search(r'Used (\d+) registers', line)
            if m and cur:
                cur[2] = int(m.group(1))
                s = re.search(r'(\d+) bytes smem', line)
                cur[3] = int(s.group(1)) if s else 0
                ents.append(cur)
                cur = None
            m = re.match(r'maxntid (\S+) (\d+)', line)
            if m:
                bounds.append((m.group(1), int(m.group(2))))
    dem = demangle(sorted({e[0] for e in ents} | {b[0] for b in bounds}))
    res, maxntid = {}, {}
    for mangled, arch, regs, smem, spill in ents:
        r = res.setdefault(base_name(dem[mangled]), {}).setdefault(arch, [0, 0, 0])
        r[0], r[1], r[2] = max(r[0], regs), max(r[1], smem), max(r[2], spill)
    for mangled, n in bounds:
        b = base_name(dem[mangled])
        maxntid[b] = min(maxntid.get(b, n), n)
    where = {}
    for mangled, rels in srcs.items():
        where.setdefault(base_name(dem[mangled]), set()).update(rels)
    return res, maxntid, len(files), where


def read_logs(paths):
    launch, optin = {}, {}
    for path in paths:
        for line in open(path, encoding='utf-8', errors='replace'):
            f = line.split()
            if len(f) == 4 and f[0] == 'launch':
                b = base_name(f[1])
                t, s = launch.get(b, (0, 0))
                launch[b] = (max(t, int(f[2])), max(s, int(f[3])))
            elif len(f) == 3 and f[0] == 'optin':
                b = base_name(f[1])
                optin[b] = max(optin.get(b, 0), int(f[2]))
    return launch, optin


def regs_needed(regs, threads):
    per_warp = (regs * 32 + 255) // 256 * 256
    return per_warp * ((threads + 31) // 32)


def blocks_per_sm(arch, regs, threads, smem):
    by_regs = REGS_PER_BLOCK // max(1, regs_needed(regs, threads))
    by_smem = SMEM_PER_SM[arch] // (smem + BLOCK_RESERVED)
    by_threads = THREADS_PER_SM // max(1, threads)
    return min(by_regs, by_smem, by_threads, BLOCKS_PER_SM)


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument('--all-launched', metavar='SRCDIR',
                    help='fail on kernels compiled from SRCDIR that no run launched')
    ap.add_argument('resdir', help='make cuda-res output (build/cuda-res)')
    ap.add_argument('logs', nargs='+', metavar='LOG', help='LLM_EMU_LAUNCH_LOG files')
    a = ap.parse_args(argv[1:])
    need = os.path.normpath(a.all_launched) if a.all_launched else None
    res, maxntid, nfiles, where = read_res(a.resdir)
    launch, optin = read_logs(a.logs)
    fails = []
    rows = []
    for k in sorted(launch):
        threads, dyn = launch[k]
        if k not in res:
            fails.append('%s: launched by the emulator, not in ptxas output (%d files)' % (k, nfiles))
            continue
        if k in maxntid and threads > maxntid[k]:
            fails.append('%s: %d threads per block, __launch_bounds__ %d' % (k, threads, maxntid[k]))
        for arch in sorted(res[k]):
            regs, static, spill = res[k][arch]
            if regs_needed(regs, threads) > REGS_PER_BLOCK:
                fails.append('%s (%s): %d registers x %d threads need %d registers, a block has %d'
                             % (k, arch, regs, threads, regs_needed(regs, threads), REGS_PER_BLOCK))
        regs, static, spill = res[k].get('sm_90', [0, 0, 0])
        o = optin.get(k, 0)
        if static + dyn > SMEM_DEFAULT and o < dyn:
            fails.append('%s: %d B static + %d B dynamic shared memory without an opt-in to %d'
                         % (k, static, dyn, dyn))
        if o and static + o > SMEM_OPTIN['sm_90']:
            fails.append('%s: opt-in to %d B of dynamic shared memory with %d B static: over %d'
                         % (k, o, static, SMEM_OPTIN['sm_90']))
        r80 = res[k].get('sm_80', [0, 0, 0])
        rows.append('%-32s %7d %8d %6d %5d %5d %6d %6d %7d' % (
            k, threads, dyn, static, r80[0], regs, spill, max(r80[2], spill),
            blocks_per_sm('sm_90', regs, threads, static + dyn)))
    print('%-32s %7s %8s %6s %5s %5s %6s %6s %7s' % (
        'kernel (launched, emulated)', 'threads', 'dyn smem', 'static', 'regs80', 'regs90',
        'spill90', 'spillmx', 'blk/SM90'))
    for r in rows:
        print(r)
    unused = sorted(set(res) - set(launch))
    print('compiled, never launched by these runs (%d): %s' % (len(unused), ' '.join(unused) or '-'))
    if need:
        for k in unused:
            mine = sorted(r for r in where.get(k, ()) if os.path.dirname(r) == need)
            if mine:
                fails.append('%s (%s): compiled, never launched by these runs'
                             % (k, ', '.join(m[:-4] + '.cu' for m in mine)))
    for f in fails:
        print('FAIL ' + f)
    if not rows:
        print('FAIL no launch joined with ptxas output (%d launch records, %d ptxas files)'
              % (len(launch), nfiles))
        return 1
    print('launch limits: %d kernels, %d failed' % (len(rows), len(fails)))
    return 1 if fails else 0


if __name__ == '__main__':
    sys.exit(main(sys.argv))
