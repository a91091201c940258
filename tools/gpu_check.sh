#!/usr/bin/env bash
# The GPU checks CI cannot run, in one call: the whole test suite, compute-sanitizer over the GPU
# kernel tests, and the benchmark. Logs and results go under $OUT (default ./gpu-logs).
#
#   tools/gpu_check.sh [STEP ...]        (default: tests sanitize bench)
#
# Steps:
#   smoke         every forced method once on small inputs against SciPy (tools/smoke.py); stops
#                 the run when it fails
#   tests         the whole test suite
#   gpu-tests     tests/test_gpu.py alone
#   sanitize      compute-sanitizer memcheck, racecheck and synccheck over the GPU kernel tests,
#                 and synccheck over the cluster exchange alone (tools/mail_probe.py)
#   bench         the benchmark's default sweep (python -m cusoftmax.bench)
#   profile       Nsight Compute over one call per kernel family, then the host path
#                 (tools/profile_cases.py)
#   tune          forced row methods at the widths where the policy switches, and the host time
#                 of a launch (tools/host_launch.py)
#   tune-short, tune-axis0, tune-cluster, tune-online, tune-grid
#                 the benchmark with tuning values changed (tools/bench_variant.py NAME=VALUE,
#                 a value's flat name, slice_field, in the policy's Tuning); their records are in
#                 docs/tuning/
#   axis0-probe   axis 0 read twice, the second time from L2 (dev/probes/reread_probe.py)
#   team-probe    axis 0 held by teams of blocks exchanging through L2 (dev/probes/team_probe.py)
#   tune-spill    cluster rows with a spill against online
#   kcache        pack CuPy's compiled kernels into $OUT/kcache.tgz
#   ties          three rounds of the cells where a peer ran within 1% of cusoftmax
#   bench-quick   a short benchmark sweep (float32 and bfloat16, six widths)
#   topk          softmax_topk: its tests, racecheck and memcheck over one call per kernel form
#                 (as run s32-5), and its benchmark (--op softmax_topk)
#   vjp           the vjp family: its GPU tests, memcheck and racecheck over the two-pass kernels'
#                 tests, both backward passes' benchmark against torch and JAX
#   segments      the segment kernels: tests/test_segment.py, memcheck and racecheck over their
#                 float32 GPU tests, each launch's kernel time (dev/probes/segment_probe.py), the
#                 bench (--segments: PyG and JAX as peers)
#   fronts        the JAX and torch fronts on the GPU: tests/test_jax.py (XLA and kernel routes),
#                 tests/test_torch.py, every op's host time (dev/probes/host_probe.py), the bench
#                 --torch-op and --jax-jit (the kernels' custom call inside jax.jit: it needs a C++
#                 compiler)
#   loads         scale= and where= in the kernels: tests/test_scale.py and test_masked.py,
#                 memcheck over them, the Scaled load's kernel times (dev/probes/scale_probe.py),
#                 the bench with --where full, --where padding and --scale
#
# Each step has its own time limit (seconds, STEP_LIMIT, default 280) so one slow step cannot
# take the others' results with it.
# CuPy's compiled kernels go to build/kcache (CUPY_CACHE_DIR, unless set): the `kcache` step packs
# them into $OUT/kcache.tgz; unpacked into build/ here and carried (`build`), they spare the next
# fresh machine every kernel's first NVRTC compilation (whole suite 213 s then 175 s, runs s10-1
# and s10-5).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-gpu-logs}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false CUPY_CACHE_DIR=${CUPY_CACHE_DIR:-$PWD/build/kcache}
LIMIT=${STEP_LIMIT:-280}
failed=()

step() {  # step NAME LOGFILE COMMAND...
    local name=$1 log=$2
    shift 2
    echo "== $name: $*" | tee -a "$OUT/$log"
    local t0=$SECONDS
    timeout "$LIMIT" "$@" >>"$OUT/$log" 2>&1
    local rc=$?
    echo "== $name: exit $rc after $((SECONDS - t0)) s" | tee -a "$OUT/$log"
    tail -n 3 "$OUT/$log" | sed 's/^/   /'
    [ $rc -eq 0 ] || failed+=("$name($rc)")
}

# compute-sanitizer TOOL over pytest: CuPy's pool off so overruns reach the tool, few examples.
sanitize=(env HYPOTHESIS_PROFILE=quick CUSOFTMAX_NO_POOL=1 compute-sanitizer --error-exitcode 99
          --print-limit 20 --tool)
pytest=(python3 -m pytest -q -p no:cacheprovider)

{ nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
  python3 -c 'import sys, cupy, numpy; print(sys.version.split()[0], "cupy", cupy.__version__, "numpy", numpy.__version__, "CUDA runtime", cupy.cuda.runtime.runtimeGetVersion())'
  date -u; } | tee "$OUT/env.log"

for what in ${@:-tests sanitize bench}; do
    case $what in
    smoke)  # every method once, a 120 s limit; stops the run when it fails
        LIMIT=120 step smoke smoke.log env PYTHONPATH=. python3 tools/smoke.py
        [ ${#failed[@]} -eq 0 ] || { echo "smoke failed: stopping"; exit 1; } ;;
    tests) step pytest pytest.log "${pytest[@]}" ;;
    gpu-tests) step pytest-gpu pytest.log "${pytest[@]}" tests/test_gpu.py ;;
    sanitize)
        step memcheck sanitizer.log "${sanitize[@]}" memcheck "${pytest[@]}" tests/test_gpu.py
        # racecheck: the special rows of 1000000 and each spill case take 30 s or more under it
        # (runs s9-5 to s9-7), so it takes float32's two spill cases.
        step racecheck sanitizer.log "${sanitize[@]}" racecheck "${pytest[@]}" tests/test_gpu.py \
            -k "(special and not 1000000) or strided or determin or past_grid or two_pass or grid_slots or (spill and float32) or flat_runs"
        # synccheck stops on 8 or more clusters of 16 blocks exchanging by st.async, the 30-line
        # tools/mail_probe.py too (docs/history/benchmarks-log.md): the rows of 100000 run 12
        # such clusters, so they are left out here (and so the rows of 1000000, which "100000"
        # also selects) and the exchange runs alone at 7 clusters of 16 and 24 of 8. The spill
        # test runs 4 rows.
        # The slab's special columns stop it too (run s12-12: also on the slab before the twelfth
        # session), after a warning of too many tracked barriers.
        step synccheck sanitizer.log "${sanitize[@]}" synccheck "${pytest[@]}" tests/test_gpu.py \
            -k "(two_pass or grid_slots or past_grid or determin or spill or flat_runs or (special and not 100000)) and not special_columns"
        step synccheck-mail sanitizer.log "${sanitize[@]}" synccheck env PYTHONPATH=. python3 tools/mail_probe.py 7 16
        step synccheck-mail sanitizer.log "${sanitize[@]}" synccheck env PYTHONPATH=. python3 tools/mail_probe.py 24 8
        ;;
    bench) step bench bench.log python3 -m cusoftmax.bench --out "$OUT" ;;
    profile) step ncu ncu.log ncu --clock-control none --section SpeedOfLight --section Occupancy \
        --section WarpStateStats --section ComputeWorkloadAnalysis --section LaunchStats \
        -k "regex:softmax|online|columns" env PYTHONPATH=. python3 tools/profile_cases.py
        step host ncu.log env PYTHONPATH=. python3 tools/profile_cases.py host ;;
    tune)  # forced methods where the policy switches
        step tune bench.log python3 -m cusoftmax.bench --out "$OUT/tune" --repeat 10 \
            --dtypes float32,bfloat16 --peers none --no-long --no-axis0 \
            --widths 8192,16384,32768,65536,131072,262144,524288,1048576 --methods block,cluster,grid,online
        step host-launch bench.log env PYTHONPATH=. python3 tools/host_launch.py ;;
    # Tuning values against others (tools/bench_variant.py FIELD=VALUE).
    tune-short)
        for v in warp_lane_values=16 warp_lane_values=8 warp_lane_values=32 "registers_max_cols=0 registers_max_bytes=0 registers_wide_max_bytes=0"; do
            step "tune-$v" bench.log env PYTHONPATH=. python3 tools/bench_variant.py $v -- \
                --out "$OUT/tune-short" --repeat 15 --dtypes float32,bfloat16 --peers none --no-axis0 \
                --no-long --widths 32,64,128,256,512,1024
        done ;;
    tune-axis0)
        for v in "slab_strip_bytes=(128, 64)" "slab_strip_bytes=(64,)" "slab_strip_bytes=(128,)" slab_slice_bytes=32768 \
                 slab_slice_bytes=131072 slab_max_threads=128; do
            step "tune-$v" bench.log env PYTHONPATH=. python3 tools/bench_variant.py "$v" -- \
                --out "$OUT/tune-axis0" --repeat 10 --dtypes float32,bfloat16 --peers none --no-long \
                --widths 32 --methods slab,columns
        done ;;
    axis0-probe)  # axis 0 read twice, the second time from L2 (dev/probes/reread_probe.py)
        step axis0-probe probe.log env PYTHONPATH=. python3 dev/probes/reread_probe.py --out "$OUT" ;;
    team-probe)  # axis 0 held by teams of blocks exchanging through L2 (dev/probes/team_probe.py)
        step team-probe team-probe.log env PYTHONPATH=. python3 dev/probes/team_probe.py --out "$OUT" ;;
    tune-spill)  # cluster rows with a spill against online, spill ratios 0.14 to 1.28
        step tune-spill bench.log python3 -m cusoftmax.bench --out "$OUT/tune-spill" --repeat 20 \
            --peers none --no-long --no-axis0 --dtypes float32,bfloat16 --methods cluster,online \
            --widths 524288,655360,786432,917504,1048576,1310720,1572864,1835008,2097152 ;;
    tune-cluster)
        for v in "(32768, 65536)" "(65536,)" "(32768,)" "(131072,)"; do
            step "tune-cluster-$v" bench.log env PYTHONPATH=. python3 tools/bench_variant.py \
                "cluster_slice_bytes=$v" -- --out "$OUT/tune-cluster" --repeat 10 --dtypes float32,bfloat16 \
                --peers none --no-long --no-axis0 --widths 65536,131072,262144,524288 --methods cluster
        done ;;
    tune-online)  # online chunk length and group size (in waves of items)
        for v in 131072_0.5 65536_0.5 262144_0.5 131072_2 131072_0.25; do
            step "tune-online-$v" bench.log env PYTHONPATH=. python3 tools/bench_variant.py \
                online_min_chunk_bytes=${v%_*} online_group_waves=${v#*_} -- --out "$OUT/tune-online" \
                --repeat 10 --dtypes float32,bfloat16 --peers none --no-axis0 --methods online \
                --widths 1048576,4194304
        done ;;
    tune-grid)  # the grid kernel's chunk, threads, copies ahead and chunks behind (runs s11-1 to s11-3)
        for v in grid_chunk_bytes=32768 grid_chunk_bytes=16384 grid_threads=256 grid_ahead=2 grid_lag=2; do
            step "tune-grid-$v" bench.log env PYTHONPATH=. python3 tools/bench_variant.py $v -- \
                --out "$OUT/tune-grid" --repeat 15 --dtypes float32,bfloat16 --peers none --no-axis0 \
                --no-long --methods grid --widths 262144,524288,1048576,2097152,4194304
        done ;;
    kcache) tar czf "$OUT/kcache.tgz" -C "$CUPY_CACHE_DIR/.." "$(basename "$CUPY_CACHE_DIR")" ;;
    ties)  # the cells where a peer ran within 1% of cusoftmax in table s26-10, three rounds
        for r in 1 2 3; do
            step "ties-$r" bench.log python3 -m cusoftmax.bench --out "$OUT/ties-$r" --repeat 100 \
                --widths 128,256,2048,8192 --no-axis0 --no-long
        done ;;
    bench-quick) step bench bench.log python3 -m cusoftmax.bench --out "$OUT" --repeat 10 \
        --widths 32,256,1024,4096,32768,262144 --dtypes float32,bfloat16 ;;
    topk)  # the topk family: its tests, racecheck and memcheck over one call per kernel form, its bench
        step topk-tests topk.log "${pytest[@]}" tests/test_topk.py
        for tool in racecheck memcheck; do
            step "topk-$tool" topk.log "${sanitize[@]}" $tool env PYTHONPATH=. python3 \
                tools/profile_cases.py topk float32:6:3001:64 float32:300:256:8 float32:2:50257:256 \
                bfloat16:3:70000:33 float32:4:100000:1
        done
        step topk-bench topk.log python3 -m cusoftmax.bench --op softmax_topk --repeat 20 ;;
    vjp)  # the vjp family: its tests, the sanitizers over vjp_chunks and vjp_columns, both backward passes' bench
        step vjp-tests vjp.log "${pytest[@]}" tests/test_gpu.py tests/test_family.py -k vjp
        for tool in memcheck racecheck; do
            step "vjp-$tool" vjp.log "${sanitize[@]}" $tool "${pytest[@]}" tests/test_gpu.py \
                -k "(vjp_chunks or vjp_columns) and not float64"
        done
        for op in softmax_vjp log_softmax_vjp; do
            step "$op-bench" vjp.log python3 -m cusoftmax.bench --op $op --dtypes float32,bfloat16 \
                --widths 32,128,512,2048,8192,32768,131072,1048576 --repeat 20 --peers torch,jax \
                --out "bench-results/$op"
        done ;;
    segments)
        step segment-tests segments.log "${pytest[@]}" -n 16 tests/test_segment.py
        for tool in memcheck racecheck; do
            step "segment-$tool" segments.log "${sanitize[@]}" $tool "${pytest[@]}" tests/test_segment.py \
                -k "(kernels and float32) or find_ids or offsets_past"
        done
        step segment-probe segments.log env PYTHONPATH=. python3 dev/probes/segment_probe.py
        step segment-probe-offsets segments.log env PYTHONPATH=. python3 dev/probes/segment_probe.py float32 --ids offsets
        step segment-bench segments.log python3 -m cusoftmax.bench --segments --repeat 10 --out "$OUT" ;;
    fronts)
        step jax-tests fronts.log "${pytest[@]}" -n 8 tests/test_jax.py
        step torch-tests fronts.log "${pytest[@]}" -n 8 tests/test_torch.py
        step host-probe fronts.log env PYTHONPATH=. python3 dev/probes/host_probe.py
        step torch-op-bench fronts.log python3 -m cusoftmax.bench --torch-op --repeat 10 --out "$OUT"
        step jax-jit-bench fronts.log python3 -m cusoftmax.bench --jax-jit --dtypes float32,bfloat16 --out "$OUT" ;;
    loads)  # scale= and where= in the kernels: their tests, memcheck over them, their benches
        step loads-tests loads.log "${pytest[@]}" tests/test_scale.py tests/test_masked.py
        step loads-memcheck loads.log "${sanitize[@]}" memcheck "${pytest[@]}" tests/test_scale.py \
            tests/test_masked.py -k "float32 or bfloat16 or topk or logsumexp or strided"
        step loads-probe loads.log env PYTHONPATH=. python3 dev/probes/scale_probe.py
        for w in full padding; do
            step "where-$w" loads.log python3 -m cusoftmax.bench --where $w --dtypes float32,bfloat16 \
                --widths 32,256,2048,16384 --no-axis0 --no-long --repeat 20 --peers jax
        done
        step scale-bench loads.log python3 -m cusoftmax.bench --scale 0.125 --dtypes float32,bfloat16 \
            --widths 32,256,2048,16384,131072 --no-long --repeat 20 ;;
    *) echo "unknown step $what"; exit 2 ;;
    esac
done
echo "failed steps: ${failed[*]:-none}"
[ ${#failed[@]} -eq 0 ]
