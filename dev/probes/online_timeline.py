"""When the online kernel's items run: `python3 dev/probes/online_timeline.py` on a GPU
(PYTHONPATH=.) prints, per case, a timeline of one call from the global timer that thread 0 of every
block reads at marks: an item's start (after the hand-over), a read item's end, a row's merge, the
held chunk's write (start and end), a write item's row statistics in hand (after its wait) and its
end. Times are in microseconds from the call's first mark.

The kernel's source is patched in memory at exact lines (MARKS), as dev/probes/phase_probe.py does;
where a line has changed, the probe stops and names it. Each mark is an atomic and a few stores
by thread 0, so the marked call runs somewhat slower than the plain one (both are printed); the
timeline is for seeing where the blocks wait, not for timing.
"""

import os
import sys

import numpy as np

from phase_probe import marked_functions  # dev/probes/, beside this script

RECORDS = 1 << 16
HEAD = (f"extern \"C\" __device__ unsigned long long csm_marks[4 * {RECORDS}];\n"
        'extern "C" __device__ unsigned csm_mark_count;\n'
        "#define MARK(k, a) do { if (threadIdx.x == 0) { const unsigned i_ = atomicAdd(&csm_mark_count, 1u); "
        f"if (i_ < {RECORDS}) {{ unsigned long long t_; unsigned s_; "
        'asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t_)); asm("mov.u32 %0, %%smid;" : "=r"(s_)); '
        "csm_marks[4 * i_] = blockIdx.x | ((unsigned long long)s_ << 32); csm_marks[4 * i_ + 1] = (k); "
        "csm_marks[4 * i_ + 2] = (unsigned long long)(a); csm_marks[4 * i_ + 3] = t_; } } } while (0)\n")
START, READ, MERGE, HELD, HELD_END, NORM, WRITE = range(7)
NAMES = {START: "item start", READ: "read end", MERGE: "merge end", HELD: "held write start",
         HELD_END: "held write end", NORM: "row in hand", WRITE: "write end"}

# (a line of softmax_online.cu, code put before it, code put after it)
MARKS = [
    ("    return *slot;\n", "MARK(5, 0);", ""),
    ("        const Norm<C> r = row_norm<C>(ws.stats + 2 * hold.row, nullptr, &norms[0]);\n",
     "MARK(3, hold.row);", ""),
    ("        hold.row = -1;\n", "MARK(4, hold.row);", ""),
    ("        if (h.merge_row >= 0) {\n", "MARK(0, h.ticket);", ""),
    ("            online_merge<C>(ws.part + 2 * r * chunks, chunks, ws.stats + 2 * r, line_pairs);\n",
     "", "MARK(2, r);"),
    ("                                      ONLINE_HOLDS<T> ? kept + row * chunks + c : nullptr, &norms[1]);\n",
     "", "MARK(6, c);"),
    ("        h = hand_over(Handed{next, merge_row}, slots, turn);\n", "if (plan.item(h.ticket, row, c, write) && !write) MARK(1, c);", ""),
]


def main():
    import cupy

    import cusoftmax
    from cusoftmax import _kernels

    unmarked = _kernels.function
    function, modules = marked_functions(lambda kernel: MARKS if kernel == "online" else None,
                                         HEAD, "online_timeline")

    flush = cupy.empty(1 << 28, dtype=cupy.uint8)

    def timed(x, y):
        flush.fill(0)
        a, b = cupy.cuda.Event(), cupy.cuda.Event()
        a.record()
        cusoftmax.softmax(x, method="online", out=y)
        b.record()
        b.synchronize()
        return cupy.cuda.get_elapsed_time(a, b) * 1e3

    def probe(shape, dtype):
        if dtype == "bfloat16":
            import ml_dtypes
            dt = ml_dtypes.bfloat16
        else:
            dt = np.dtype(dtype)
        x = cupy.random.standard_normal(shape, dtype=cupy.float32).astype(dt)
        y = cusoftmax.softmax(x, method="online")
        plain_us = np.median([timed(x, y) for _ in range(10)])
        _kernels.function = function
        _kernels.bind.cache_clear()
        try:
            cusoftmax.softmax(x, method="online", out=y)  # compiles the marked kernel
            module = [m for k, (m, _) in modules.items() if k[1] == dtype][-1]
            count = cupy.ndarray((1,), cupy.uint32, module.get_global("csm_mark_count"))
            marks = cupy.ndarray((RECORDS, 4), cupy.uint64, module.get_global("csm_marks"))
            count[:] = 0
            marked_us = timed(x, y)
            n = min(int(count.get()[0]), RECORDS)
            m = marks[:n].get()
        finally:
            _kernels.function = unmarked
            _kernels.bind.cache_clear()
        if save:
            np.save(os.path.join(save, f"timeline-{shape[0]}x{shape[1]}-{dtype}.npy"), m)
        block, sm = m[:, 0] & 0xFFFFFFFF, m[:, 0] >> 32
        kind, t = m[:, 1], (m[:, 3] - m[:, 3].min()) / 1e3
        steps = np.unique(np.diff(np.unique(m[:, 3])))
        print(f"== {shape} {dtype} online: {plain_us:.1f} us plain, {marked_us:.1f} us marked; "
              f"{len(np.unique(block))} blocks on {len(np.unique(sm))} SMs, {n} marks, "
              f"timeline {t.max():.1f} us, timer step {steps.min() if steps.size else 0} ns")
        for k, name in NAMES.items():
            s = np.sort(t[kind == k])
            if s.size:
                q = np.percentile(s, [0, 10, 50, 90, 100])
                print(f"   {name:16s} {s.size:5d}: " + " / ".join(f"{v:6.1f}" for v in q))
        # per block, the time from its item start to the next mark of the same block
        order = np.lexsort((t, block))
        b, k, tt = block[order], kind[order], t[order]
        same = b[1:] == b[:-1]
        for k0, k1, what in ((START, READ, "read item"), (START, WRITE, "item start to write end"),
                             (START, NORM, "item start to row in hand (write items)"),
                             (NORM, WRITE, "row in hand to write end"), (HELD, HELD_END, "held write"),
                             (READ, START, "read end to next item start"),
                             (WRITE, START, "write end to next item start")):
            sel = same & (k[:-1] == k0) & (k[1:] == k1)
            d = tt[1:][sel] - tt[:-1][sel]
            if d.size:
                print(f"   {what:40s} {d.size:5d}: median {np.median(d):6.2f}, "
                      f"90% {np.percentile(d, 90):6.2f}, max {d.max():6.2f} us")
        busy = np.histogram(t[kind == READ], bins=np.arange(0, t.max() + 2, 2))[0]
        print("   read ends per 2 us: " + " ".join(map(str, busy)))
        busy = np.histogram(t[kind == WRITE], bins=np.arange(0, t.max() + 2, 2))[0]
        print("   write ends per 2 us: " + " ".join(map(str, busy)), flush=True)

    # arguments: [--save FOLDER] [ROWSxCOLS:DTYPE ...]; --save writes each case's raw marks
    # (block | SM << 32, mark, argument, global timer in ns) as timeline-ROWSxCOLS-DTYPE.npy
    args = sys.argv[1:]
    save = args[1] if args[:1] == ["--save"] else None
    args = args[2:] if save else args
    cases = [((1, 2**24), "float32"), ((16, 2**22), "float32"), ((32, 2**21), "bfloat16"), ((1, 2**27), "float32")]
    if args:
        cases = [(tuple(int(v) for v in a.split(":")[0].split("x")), a.split(":")[1]) for a in args]
    for shape, dtype in cases:
        probe(shape, dtype)


if __name__ == "__main__":
    main()
