"""Where the grid and the slab kernels spend their time: `python3 dev/probes/phase_probe.py
grid|slab` on a GPU (PYTHONPATH=.) prints, per case, the cycles between marks that thread 0 of
every block reads with clock64, summed over the blocks of one call and divided by the steps
(grid) or lines (slab) the blocks took, and the SM clock under load (block 0's clock64 against
the global timer).

The kernels' source is patched in memory at exact lines (MARKS below); where a line has changed,
the probe stops and names it, so the marks follow the kernels. A phase's count is what thread 0
saw: a block reduction also holds the wait for the block's slowest warp. The slab's marks add a
barrier after the copy wait, so that waiting for the copies and the max walk separate. The counts
are for weighing phases against each other, not for timing (the marked slab calls ran 40% to 80%
slower, runs s12-5 and s12-14). Runs s12-1, s12-2, s12-5 and s12-14 in
docs/history/benchmarks-log.md came from this script (the first three from its draft).
"""

import sys

import numpy as np

PHASES = 16  # marks per kernel, at most
HEAD = ('extern "C" __device__ unsigned long long csm_phase[PHASES + 4];\n'
        "#define PM(k) do { if (threadIdx.x == 0) { const long long t_ = clock64(); "
        "phase_[k] += t_ - last_; last_ = t_; } } while (0)\n").replace("PHASES", str(PHASES))
START = ("long long phase_[PHASES] = {0}, last_ = clock64(), steps_ = 0, clock0_ = last_; "
         'unsigned long long ns0_; asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(ns0_));'
         ).replace("PHASES", str(PHASES))
END = ("if (threadIdx.x == 0) { for (int k_ = 0; k_ < PHASES; ++k_) "
       "atomicAdd(&csm_phase[k_], (unsigned long long)phase_[k_]); "
       "atomicAdd(&csm_phase[PHASES], (unsigned long long)steps_); "
       "atomicAdd(&csm_phase[PHASES + 1], 1ull); if (blockIdx.x == 0) { unsigned long long ns1_; "
       'asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(ns1_)); '
       "csm_phase[PHASES + 2] = clock64() - clock0_; csm_phase[PHASES + 3] = ns1_ - ns0_; } }"
       ).replace("PHASES", str(PHASES))

# Per kernel file: (a line of the source, code put before it, code put after it); then the
# phases' names by mark: mark k counts the cycles since the mark before it.
MARKS = {
    "softmax_fused.cu": [
        ("    for (int i = 0; i < ahead; ++i) load(i);\n", "", START),
        ("        copy_wait_pending(ahead - 1);  // this thread's copies of ticket i (it reads only those)\n",
         "PM(9); ++steps_;", "PM(0);"),
        ("            const C m = block_reduce(it.st.max(), cscratch, MaxOp());\n", "", "PM(1);"),
        ("            publish_chunk(ws.part + 2 * (it.row * chunks + it.begin / chunk), MD<C>{m, d}, ws.count + it.row);\n",
         "PM(2);", "PM(3);"),
        ("            wait_count(ws.count + it.row, unsigned(chunks), 32);\n", "", "PM(4);"),
        ("            const MD<C> s = merge_chunks<C>(ws.part + 2 * it.row * chunks, chunks, scratch);\n", "", "PM(5);"),
        ("            it.st.template write<false>(y + it.row * ldy + it.begin, cols - it.begin, s.m, scale_of(s.d, C()));\n",
         "", "PM(6);"),
        ("        load(i + ahead);  // into the slot of ticket i - lag, just written by the same threads\n",
         "", "PM(7);"),
        ("PM(7);\n    }\n", "", END),
    ],
    "softmax_columns.cu": [
        ("    mail.open();\n    int k = 0;  // lines done\n", "", START),
        ("        if (k == 0) mail.opened();  // while the first line loads\n", "PM(0); ++steps_;", ""),
        ("        warp_columns_reduce(m, width, MaxOp());  // the warp's maxima\n", "PM(1);", "PM(2);"),
        ("        warp_columns_reduce(d, width, SumOp());\n", "PM(3);", "PM(4);"),
        ("        if (threadIdx.x == 0) mail.expect(k, CL * cols * 8);\n        __syncthreads();\n", "", "PM(12);"),
        ("            for (int b = w; b < CL; b += warps) mail.send(", "PM(13);\n", ""),
        ("        mail.wait(k);  // the blocks' pairs of this line\n", "PM(5);", "PM(6);"),
        ("        __syncthreads();\n        float scale[V];\n", "PM(7);", "PM(10);"),
        ("        // fin is written again only after", "PM(11);\n", ""),
        ("    if (k == 0) mail.opened();  // no line: still leave the cluster barrier\n", END, ""),
    ],
}
NAMES = {
    "grid": {9: "loop head", 0: "copy wait", 1: "max, block reduction", 2: "sum, block reduction",
             3: "publication", 4: "wait for the row", 5: "merge of the row", 6: "write",
             7: "next copy issued"},
    "slab": {0: "copies issued", 1: "copies landing, max walk",
             2: "max shuffles", 3: "sum walk", 4: "sum shuffles", 12: "warps' pairs, barrier",
             13: "warps' merge", 5: "sends",
             6: "wait for the cluster's pairs", 7: "merge", 10: "barrier", 11: "write"},
}


def patched(text, marks, head=HEAD, tool="phase_probe"):
    """The kernel source `text` with `head` ahead of its namespace and each (line, before,
    after) of `marks` put around its exactly one `line`."""
    text = text.replace("namespace csm {", head + "namespace csm {", 1)
    for line, before, after in marks:
        if text.count(line) != 1:
            raise SystemExit(f"{tool}: the kernel source no longer has exactly one line {line!r}")
        text = text.replace(line, before + line + after + ("\n" if after else ""))
    return text


def marked_functions(marks_of, head=HEAD, tool="phase_probe"):
    """A stand-in for `_kernels.function` compiling the kernels whose file `marks_of` (a
    function of the kernel's name) gives marks for from their patched source, others as
    before; and the modules it compiled, by (kernel, dtype, template), to read the marks."""
    import cupy

    from cusoftmax import _kernels

    plain, unmarked, modules = _kernels.source.__wrapped__, _kernels.function, {}

    def function(kernel, dtype_name, template, ops, defines, device_id):  # keeping the module
        marks = marks_of(kernel)
        if marks is None:
            return unmarked(kernel, dtype_name, template, ops, defines, device_id)
        key = (kernel, dtype_name, template)
        if key not in modules:
            expr = _kernels.name_expression(kernel, dtype_name, template, ops)
            module = cupy.RawModule(code=patched(plain(_kernels.FILES[kernel]), marks, head, tool),
                                    options=(*_kernels.LANGUAGE, *defines), name_expressions=(expr,))
            modules[key] = (module, module.get_function(expr))
        return modules[key][1]

    return function, modules


def main(which):
    import cupy

    import cusoftmax
    from cusoftmax import _kernels

    function, modules = marked_functions(lambda kernel: MARKS.get(_kernels.FILES[kernel]))
    _kernels.function = function

    def probe(shape, dtype, axis, method):
        if dtype == "bfloat16":
            import ml_dtypes
            dt = ml_dtypes.bfloat16
        else:
            dt = np.dtype(dtype)
        x = cupy.random.standard_normal(shape, dtype=cupy.float32).astype(dt)
        y = cusoftmax.softmax(x, axis=axis, method=method)
        module = [m for k, (m, _) in modules.items() if k[0] == f"softmax_{method}" and k[1] == dtype][-1]
        counts = cupy.ndarray((PHASES + 4,), cupy.uint64, module.get_global("csm_phase"))
        counts[:] = 0
        start, stop = cupy.cuda.Event(), cupy.cuda.Event()
        start.record()
        cusoftmax.softmax(x, axis=axis, method=method, out=y)
        stop.record()
        stop.synchronize()
        c = counts.get().astype(np.float64)
        steps, blocks = c[PHASES], c[PHASES + 1]
        print(f"== {shape} {dtype} axis {axis} {method}: {cupy.cuda.get_elapsed_time(start, stop) * 1e3:.0f} us"
              f" marked; {blocks:.0f} blocks, {steps / blocks:.1f} steps a block, {c[:PHASES].sum() / steps:.0f}"
              f" cycles a step, {c[PHASES + 2] / max(c[PHASES + 3], 1):.2f} GHz under load")
        print("   " + ", ".join(f"{name} {c[k] / steps:.0f}" for k, name in NAMES[method].items()), flush=True)

    if which == "grid":
        for dtype in ("float32", "bfloat16"):
            for cols in (2**20, 2**21, 2**22):
                probe((2**26 // cols, cols), dtype, -1, "grid")
    else:
        for dtype in ("float32", "bfloat16"):
            for shape in ((4096, 16384), (16384, 4096)):
                probe(shape, dtype, 0, "slab")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "grid")
