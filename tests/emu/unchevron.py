#!/usr/bin/env python3
"""unchevron.py IN OUT — a CUDA source as the host C++ compiler can take it for tests/emu:
every launch `kern<...><<<grid, block[, smem[, stream]]>>>(args)` becomes
`emu_call("kern<...>", [&](auto... a) { kern<...>(a...); }, grid, block...)(args)` (a
generic lambda, so that template arguments are still deduced from args), and the kernel
of cudaFuncSetAttribute is named the same way (cuda_runtime.h of tests/emu); NULL becomes
nullptr.
Line breaks are kept, so compiler messages point at the original lines."""
import re
import sys

FUNCATTR = re.compile(r'cudaFuncSetAttribute\(\s*([A-Za-z_]\w*(?:\s*<[^<>;{}]*>)?)\s*,')
LAUNCH = re.compile(r'([A-Za-z_]\w*(?:\s*<[^<>;{}]*>)?)\s*<<<(.*?)>>>', re.S)


DEFINE = re.compile(r'\s*#\s*define\s+\w+\(([^)]*)\)')


def macro_params(src, pos):
    """The parameters of the #define whose body holds offset pos (none: not in one)."""
    lines = src[:pos].split('\n')
    i = len(lines) - 1
    while i > 0 and lines[i - 1].endswith('\\'):
        i -= 1
    m = DEFINE.match(lines[i])
    return [p.strip() for p in m.group(1).split(',')] if m else []


def name_expr(src, m):
    """The launch's kernel name as a C string expression: a literal, or, where the kernel
    is a macro parameter (`kern<LO><<<...>>>` in a #define), its argument stringified
    and the rest appended, so the emulator knows the kernel launched."""
    name = re.sub(r'\s+', ' ', m.group(1))
    base, rest = re.match(r'(\w+)(.*)', name).groups()
    if base in macro_params(src, m.start()):
        return '#%s "%s"' % (base, rest)
    return '"%s"' % name


def main():
    src = open(sys.argv[1], encoding='utf-8').read()
    out = LAUNCH.sub(lambda m: 'emu_call(%s, [&](auto... emu_a) { %s(emu_a...); }, %s)'
                     % (name_expr(src, m), m.group(1), m.group(2)), src)
    out = FUNCATTR.sub(lambda m: 'cudaFuncSetAttribute(emu_named{"%s"},'
                       % re.sub(r'\s+', ' ', m.group(1)), out)
    # a literal NULL argument would reach the kernel through the lambda as a long
    out = re.sub(r'\bNULL\b', 'nullptr', out)
    if '<<<' in out or '>>>' in out:
        sys.exit('unchevron: %s: a launch it cannot rewrite' % sys.argv[1])
    with open(sys.argv[2], 'w', encoding='utf-8') as f:
        f.write(out)


if __name__ == '__main__':
    main()
