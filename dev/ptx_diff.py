"""Compares the PTX of every kernel instantiation the policy can emit, compiled by NVRTC from a
base commit's kernels and from the working tree's: a refactoring of kernels/ that must not change
the generated code passes when every instantiation's PTX is identical (identical PTX gives
identical SASS).

    python dev/ptx_diff.py                     # base 9d65b28, sm_90 and sm_80, every dtype
    python dev/ptx_diff.py --arch 90 --dtype float32 --file softmax_online.cu
    python dev/ptx_diff.py --ptxas             # registers and spills of the entries that differ

The base side takes the base commit's sources (its kernels named softmax_<family>, options
-std=c++17); the working tree's kernels are named <family> with the operation types first
(csm::<family><csm::Plain, csm::Softmax, ...>) and compiled with planning.cuda_defines() as -D options. Each
(file, dtype, arch) is one NVRTC program with all its name expressions; its PTX is cut per entry,
each entry taken with the module-level declarations it refers to, and the names that depend on
the kernel's name or on its place in the module (mangled symbols, labels, local depots) are
replaced by placeholders before the comparison. The base side's PTX is cached under --cache.

Runs without a GPU: NVRTC needs none (CUDA headers from cuda-pathfinder, as tests/test_compile.py).
"""

from __future__ import annotations

import argparse
import difflib
import hashlib
import re
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from cusoftmax import _kernels, planning  # noqa: E402

BASE = "9d65b28"
C_TYPES = _kernels.C_TYPES
ITEMSIZE = {"float16": 2, "bfloat16": 2, "float32": 4, "float64": 8}
FILES = _kernels.FILES
OPS = tuple(f"csm::{op}" for op in planning.OPS)  # the operation of the working tree's names


def base_reader(commit):
    def read(name):
        return subprocess.run(["git", "show", f"{commit}:kernels/{name}"], cwd=ROOT, check=True,
                              capture_output=True, text=True).stdout
    return read


def tree_reader(name):
    return (ROOT / "kernels" / name).read_text()


def instantiations(dtype, arch):
    """(family, template arguments) of every kernel the policy can emit for dtype on sm_arch."""
    yield from planning.templates(ITEMSIZE[dtype], clusters=arch >= 90)


def expression(family, dtype, template, new):
    args = [C_TYPES[dtype], *map(str, template)]
    if new:
        return f"csm::{family}<{', '.join([*OPS, *args])}>"
    return f"csm::softmax_{family}<{', '.join(args)}>"


def include_dir():
    from cuda import pathfinder

    found = pathfinder.find_nvidia_header_directory("cudart")
    if found is None:
        sys.exit("CUDA runtime headers not found (cuda-pathfinder)")
    return found


def compile_ptx(text, name, exprs, options):
    """PTX of one program and the lowered (mangled) name of each expression."""
    from cupy.cuda import nvrtc

    prog = nvrtc.createProgram(text, name, (), ())
    try:
        for e in exprs:
            nvrtc.addNameExpression(prog, e)
        try:
            nvrtc.compileProgram(prog, options)
        except nvrtc.NVRTCError:
            sys.exit(f"{name}: NVRTC failed\n{nvrtc.getProgramLog(prog)}")
        log = nvrtc.getProgramLog(prog).strip()
        if "warning" in log.lower():
            print(f"{name}: {log}", file=sys.stderr)
        ptx = nvrtc.getPTX(prog)
        ptx = ptx.decode() if isinstance(ptx, bytes) else ptx
        return ptx.rstrip("\0"), {e: nvrtc.getLoweredName(prog, e) for e in exprs}
    finally:
        nvrtc.destroyProgram(prog)


TOP = re.compile(r"^(?:\.visible\s+|\.weak\s+|\.extern\s+)*\.(entry|func|global|shared|const)\b"
                 r"(?:\s*\([^)]*\))?[^=;(\[]*?([$\w]+)\s*(?:\(|\[|=|;|$)")
MODULE_COMMENT = re.compile(r"\s*// \.(globl|weak)\b")
SYMBOL = re.compile(r"[_$A-Za-z][$\w]*")


def module_parts(ptx):
    """{symbol: its text} of the module's top-level entries, functions and variables. A part runs
    to the next top-level directive; the module's comments (the header at column 0, the
    `// .globl` / `// .weak` line that announces each symbol) are left out."""
    parts, current = {}, None
    for line in ptx.splitlines():
        if line.startswith("//") or MODULE_COMMENT.match(line):
            continue
        m = TOP.match(line)
        if m:
            current = m.group(2)
            parts[current] = [line]
        elif current:
            parts[current].append(line)
    return {name: "\n".join(lines).rstrip() for name, lines in parts.items()}


def entry_text(parts, entry):
    """The entry with what it refers to at module level, names normalised."""
    order, todo = [], [entry]
    while todo:
        name = todo.pop(0)
        if name in order or name not in parts:
            continue
        order.append(name)
        todo += [s for s in SYMBOL.findall(parts[name]) if s in parts and s not in order]
    text = "\n".join(parts[n] for n in order)
    names = {}
    text = re.sub(r"_Z[$\w]+", lambda m: names.setdefault(m.group(0), f"SYM{len(names)}"), text)
    text = re.sub(r"\$L__BB\d+_", "$L__BB_", text)
    return re.sub(r"__local_depot\d+", "__local_depot", text)


def ptx_of(read, filename, dtype, arch, new, cache):
    """{(family, template): normalised entry text} and the whole PTX of one program."""
    items = [(f, t) for f, t in instantiations(dtype, arch) if FILES[f] == filename]
    exprs = [expression(f, dtype, t, new) for f, t in items]
    text = _kernels.paste_includes(read, filename)
    options = ["-std=c++17", f"-arch=sm_{arch}", f"-I{include_dir()}", "--device-as-default-execution-space"]
    if new:
        options += list(planning.cuda_defines())
    key = hashlib.sha256("\0".join([text, *options, *exprs]).encode()).hexdigest()[:24]
    path = cache / f"{filename}.{dtype}.sm{arch}.{key}.ptx"
    lowered_path = path.with_suffix(".names")
    if cache and path.is_file():
        ptx = path.read_text()
        lowered = dict(zip(exprs, lowered_path.read_text().split("\n")))
    else:
        ptx, lowered = compile_ptx(text, filename, exprs, options)
        if cache:
            cache.mkdir(parents=True, exist_ok=True)
            path.write_text(ptx)
            lowered_path.write_text("\n".join(lowered[e] for e in exprs))
    parts = module_parts(ptx)
    return {item: entry_text(parts, lowered[e]) for item, e in zip(items, exprs)}, ptx, lowered


def ptxas_usage(ptx, entry, arch):
    """ptxas -v's line of registers, stack and spills for one entry of a module."""
    with tempfile.NamedTemporaryFile("w", suffix=".ptx") as f:
        f.write(ptx)
        f.flush()
        out = subprocess.run(["/usr/local/cuda-13.0/bin/ptxas", f"-arch=sm_{arch}", "-v", "-e", entry,
                              f.name, "-o", "/dev/null"], capture_output=True, text=True)
    return " | ".join(l.split("info    : ")[-1] for l in out.stderr.splitlines()
                      if "registers" in l or "spill" in l)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--base", default=BASE, help="commit whose kernels are the reference")
    ap.add_argument("--arch", type=int, action="append", choices=(80, 90))
    ap.add_argument("--dtype", action="append", choices=tuple(C_TYPES))
    ap.add_argument("--file", action="append", choices=sorted(set(FILES.values())))
    ap.add_argument("--cache", type=Path, default=ROOT / "build" / "ptx_diff",
                    help="folder for the base side's PTX")
    ap.add_argument("--ptxas", action="store_true", help="ptxas -v of the entries that differ")
    ap.add_argument("--show", type=int, default=0, help="diff lines to print per differing entry")
    args = ap.parse_args(argv)
    compared = same = 0
    at_base = {f for f in set(FILES.values())
               if subprocess.run(["git", "cat-file", "-e", f"{args.base}:kernels/{f}"], cwd=ROOT,
                                 capture_output=True).returncode == 0}
    for arch in args.arch or (90, 80):
        for filename in args.file or sorted(at_base):
            for dtype in args.dtype or tuple(C_TYPES):
                old, old_ptx, old_names = ptx_of(base_reader(args.base), filename, dtype, arch, False, args.cache)
                new, new_ptx, new_names = ptx_of(tree_reader, filename, dtype, arch, True, args.cache)
                differ = [item for item in old if old[item] != new[item]]
                compared += len(old)
                same += len(old) - len(differ)
                print(f"sm_{arch} {filename} {dtype}: {len(old)} compared, {len(differ)} differ", flush=True)
                for family, template in differ:
                    print(f"  differs: {expression(family, dtype, template, True)}")
                    if args.show:
                        diff = difflib.unified_diff(old[family, template].splitlines(),
                                                    new[family, template].splitlines(), lineterm="", n=1)
                        print("\n".join(list(diff)[: args.show]))
                    if args.ptxas:
                        o = old_names[expression(family, dtype, template, False)]
                        n = new_names[expression(family, dtype, template, True)]
                        print(f"    base: {ptxas_usage(old_ptx, o, arch)}\n    tree: {ptxas_usage(new_ptx, n, arch)}")
    print(f"{compared} instantiations compared, {same} identical, {compared - same} differ")
    return 0 if same == compared else 1


if __name__ == "__main__":
    sys.exit(main())
