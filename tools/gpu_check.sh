#!/usr/bin/env bash
# The GPU checks CI cannot run, in one call: the whole test suite, compute-sanitizer over the GPU
# kernel tests, and the benchmark. Logs and results go under $OUT (default ./gpu-logs).
#
#   tools/gpu_check.sh [tests] [sanitize] [bench] [bench-quick] [tune] [profile]
#                                                      (default: tests sanitize bench)
#
# tune: forced row methods at the widths where the policy switches (the dispatcher's evidence;
# tools/bench_variant.py runs the benchmark with a constant changed).
# Each step has its own time limit (seconds, STEP_LIMIT, default 280) so one slow step cannot
# take the others' results with it.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-gpu-logs}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
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
    tests) step pytest pytest.log "${pytest[@]}" ;;
    sanitize)
        step memcheck sanitizer.log "${sanitize[@]}" memcheck "${pytest[@]}" tests/test_gpu.py
        step racecheck sanitizer.log "${sanitize[@]}" racecheck "${pytest[@]}" tests/test_gpu.py \
            -k "special or strided or determin or past_grid or two_pass"
        step synccheck sanitizer.log "${sanitize[@]}" synccheck "${pytest[@]}" tests/test_gpu.py \
            -k "special or determin or past_grid or two_pass"
        ;;
    bench) step bench bench.log python3 -m cusoftmax.bench --out "$OUT" ;;
    profile) step ncu ncu.log ncu --clock-control none --section SpeedOfLight --section Occupancy \
        --section WarpStateStats --section ComputeWorkloadAnalysis --section LaunchStats \
        -k "regex:softmax|online|columns" env PYTHONPATH=. python3 tools/profile_cases.py
        step host ncu.log env PYTHONPATH=. python3 tools/profile_cases.py host ;;
    tune) step tune bench.log python3 -m cusoftmax.bench --out "$OUT/tune" --repeat 15 \
            --dtypes float32,bfloat16 --peers none --no-axis0 --methods block,cluster,grid,online \
            --widths 32768,65536,262144,524288,1048576,4194304
        # A tuning constant against another value, e.g.:
        # step tune-x bench.log env PYTHONPATH=. python3 tools/bench_variant.py NAME=VALUE -- BENCH ARGS
        step host-launch bench.log env PYTHONPATH=. python3 tools/host_launch.py ;;
    bench-quick) step bench bench.log python3 -m cusoftmax.bench --out "$OUT" --repeat 10 \
        --widths 32,256,1024,4096,32768,262144 --dtypes float32,bfloat16 ;;
    *) echo "unknown step $what"; exit 2 ;;
    esac
done
echo "failed steps: ${failed[*]:-none}"
[ ${#failed[@]} -eq 0 ]
