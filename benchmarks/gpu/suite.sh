#!/usr/bin/env bash
# Run ON the lent GPU machine, in the repository root, one stage per device call:
#
#   bash benchmarks/gpu/suite.sh STAGE [ARGS]
#
# stages (each ends well inside the tool's 10-minute limit; times are estimates, nothing here
# has run on a GPU yet):
#   install-and-test        env.json (versions, ceilings), tests/test_cuda.py + tests/test_sparse_triton.py
#                           on the GPU, a small every-implementation smoke case of blocksparse.py  (<= 6 min)
#   kernels                 issue 13's kernel table: bf16, N=8192, batch 8192, tiles 128/64/32,
#                           density 0.01..1, fwd+bwd, + a tf32 row (tile 64)                        (<= 7.5 min)
#   model-step              memory at N=131,072, density 0.01; model step n=16/64/256               (<= 6 min)
#   tune                    the Triton blocking per kernel and tile (triton_configs.py)             (<= 4.5 min)
#   probe                   1 MNIST epoch of each model and 600 WikiText batches of each model,
#                           all in parallel, to size the long runs                                  (<= 5 min)
#   (the limits are the timeouts inside each stage; a cut-off benchmark keeps its finished cases)
#   mnist-start [E [SEEDS [JOBS [MODELS]]]]   start the MNIST comparison in the background
#                           (default 100 epochs, seeds 0,1,2,3,4, 15 parallel jobs; returns at once)
#   wikitext-start [E [MAX_BATCHES]]         start the four WikiText-2 models in the background
#                           (default: full mode, 40 epochs; one process per model)
#   status                  what the background jobs are doing
#   wait SECONDS            sleep until the background jobs end or SECONDS pass, printing status
#   collect mnist|wikitext [E]                 their results into $OUT (after the jobs ended)
#
# Every stage installs the carried wheels and the project first (once per machine), sets
# SEQ2D_DATA to the carried data, writes nvidia-smi and the versions at the top of its log, and
# leaves at most 8 small files in $OUT (the device tool returns no more). Background jobs write
# under runs/gpu/ (started with setsid nohup, so they outlive the call while the machine is held).
set -euo pipefail

cd "$(dirname "$0")/../.."
ROOT=$PWD
PY=${PYTHON:-python3}
OUT=${OUT:-$ROOT/runs/gpu/out}
RUNS=$ROOT/runs/gpu
DEVICE=${SEQ2D_SUITE_DEVICE:-cuda}  # cpu only to smoke-test the background stages without a GPU
CARRY=$ROOT/gpu_carry
mkdir -p "$OUT" "$RUNS"
export SEQ2D_DATA=$CARRY/data MPLBACKEND=Agg PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1
export PYTHONPATH=$ROOT${PYTHONPATH:+:$PYTHONPATH}  # the checkout wins over anything installed

die() { echo "suite.sh: $*" >&2; exit 1; }

setup() {  # once per machine: the carried wheels and the project, no index, no dependencies
    local marker=/tmp/seq2d_gpu_setup_done
    [ -f "$marker" ] && return 0
    [ -d "$CARRY/wheels" ] || die "$CARRY/wheels is missing: run benchmarks/gpu/prepare.sh here and carry gpu_carry"
    [ -f "$SEQ2D_DATA/MNIST/raw/train-images-idx3-ubyte.gz" ] || die "no MNIST under $SEQ2D_DATA (carry gpu_carry)"
    local pip=("$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --disable-pip-version-check)
    if ! "${pip[@]}" "$CARRY"/wheels/*.whl; then
        echo "wheels: installing into the image failed; using --target /tmp/site"
        "${pip[@]}" --target /tmp/site "$CARRY"/wheels/*.whl
    fi
    if ! "${pip[@]}" --no-build-isolation -e "$ROOT" >/tmp/seq2d_pip_e.log 2>&1; then
        echo "project: editable install failed (see below); PYTHONPATH=$ROOT is used instead"
        tail -5 /tmp/seq2d_pip_e.log
    fi
    touch "$marker"
}

pythonpath_site() {  # wheels installed with --target (the fallback above)
    if [ -d /tmp/site ]; then export PYTHONPATH=$PYTHONPATH:/tmp/site; fi
}

header() {  # the machine as found, at the top of every stage's log
    echo "=== seq2d GPU suite, stage '$1', $(date -u '+%Y-%m-%d %H:%M:%S UTC'), $(uname -nr)"
    nvidia-smi || echo "(nvidia-smi failed)"
    "$PY" - <<'EOF' || true
import torch
try:
    import triton; tv = triton.__version__
except Exception as e:  # noqa: BLE001
    tv = f"n/a ({e})"
print(f"torch {torch.__version__} (CUDA {torch.version.cuda}), triton {tv}, "
      f"cuda available {torch.cuda.is_available()}, devices {torch.cuda.device_count()}")
EOF
    git -C "$ROOT" log -1 --format='commit %H %s' 2>/dev/null || echo "(no git metadata on this machine)"
}

TEE_PID=
log_to() {  # tee this stage's output into $OUT/<name>.log (fds 3/4 keep the original stdout/stderr)
    exec 3>&1 4>&2
    exec > >(tee -a "$OUT/$1.log") 2>&1
    TEE_PID=$!
}

finish() {  # let tee write the last lines before the device tool collects $OUT
    if [ -n "$TEE_PID" ]; then
        exec 1>&3 2>&4
        wait "$TEE_PID" 2>/dev/null || true
    fi
}
trap finish EXIT

pids_alive() {  # the pids in file $1 that still run
    [ -f "$1" ] || return 0
    local p
    while read -r p; do
        if kill -0 "$p" 2>/dev/null; then echo "$p"; fi
    done <"$1"
}

# ------------------------------------------------------------------ stages
stage_install_and_test() {
    log_to install-and-test
    header install-and-test
    local rc=0 timeout_opt=()
    "$PY" benchmarks/gpu/env_check.py --json "$OUT/env.json" || rc=1
    if "$PY" -c "import pytest_timeout" 2>/dev/null; then timeout_opt=(--timeout=150); fi
    timeout "${TESTS_S:-270}" "$PY" -m pytest -q -p no:cacheprovider -o addopts= -rfEs --durations=15 "${timeout_opt[@]}" \
        --junitxml="$OUT/test_cuda.xml" tests/test_cuda.py tests/test_sparse_triton.py || rc=1
    # the CUDA-only tests that live beside the CPU ones (first run on a GPU after 2026-11-26)
    timeout 60 "$PY" -m pytest -q -p no:cacheprovider -o addopts= -rfEs \
        tests/test_spec.py::test_device_gives_same_values tests/test_data.py::test_cuda_batches_and_augment || rc=1
    # every implementation of blocksparse.py once, small (stk needs tile 128 and 16 bits)
    timeout "${SMOKE_S:-60}" "$PY" benchmarks/blocksparse.py --device cuda --dtype bfloat16 --N 1024 --batch 512 --tile 128 \
        --densities 0.25 1.0 --repeats 2 --warmup 1 --max-others 1 --retries 0 \
        --json "$OUT/blocksparse-smoke.json" || rc=1
    echo "=== install-and-test: rc $rc"
    return "$rc"
}

KERNEL_IMPLS=(dense masked_dense torch_bsr_triton stk blksprs "seq2d[triton]" "seq2d[dense]" "seq2d[auto]")

stage_kernels() {
    log_to kernels
    header kernels
    local rc=0
    # tiles in the order 128, 64, 32: a case cut off by the timeout loses tile 32 first
    # (the JSON is rewritten after every case, so what finished comes back)
    timeout "${KERNELS_BF16_S:-330}" "$PY" benchmarks/blocksparse.py --device cuda --dtype bfloat16 \
        --N 8192 --batch 8192 --tile 128 64 32 --densities 0.01 0.05 0.1 0.25 0.5 0.75 1.0 \
        --impls "${KERNEL_IMPLS[@]}" --passes --repeats 7 --warmup 2 --max-others 1 --retries 0 \
        --json "$OUT/blocksparse-cuda-bf16.json" || rc=$?
    timeout "${KERNELS_TF32_S:-110}" "$PY" benchmarks/gpu/blocksparse_tf32.py --device cuda --dtype float32 \
        --N 8192 --batch 8192 --tile 64 --densities 0.01 0.1 0.5 1.0 \
        --impls dense torch_bsr_triton "seq2d[triton]" "seq2d[dense]" --repeats 7 --warmup 2 --max-others 1 \
        --retries 0 --json "$OUT/blocksparse-cuda-tf32.json" || rc=$?
    echo "=== kernels: rc $rc (124 = cut off by timeout; the JSON keeps the finished cases)"
    return "$rc"
}

stage_model_step() {
    log_to model-step
    header model-step
    local rc=0
    timeout "${MEMORY_S:-120}" "$PY" benchmarks/gpu/memory.py --json "$OUT/memory-cuda.json" || rc=$?
    timeout "${MODEL_STEP_S:-240}" "$PY" benchmarks/gpu/model_step_cuda.py --batch 4096 256 --json "$OUT/model_step-cuda.json" || rc=$?
    echo "=== model-step: rc $rc"
    return "$rc"
}

stage_tune() {  # the Triton blocking per kernel and tile (bf16, density 0.25), then what it gives
    log_to tune
    header tune
    local rc=0
    timeout "${TUNE_S:-260}" "$PY" benchmarks/gpu/triton_configs.py --budget-s "${TUNE_BUDGET_S:-230}" \
        --json "$OUT/triton_configs-cuda.json" || rc=$?
    echo "=== tune: rc $rc"
    return "$rc"
}

# issue 37's 15-minute plan (README.md): two calls, no carry, no install (the checkout on PYTHONPATH;
# the image's torch and triton), v2 first in each so a cut-off call loses the least
stage_v2_check() {  # call 1: env + ceilings, the Triton tests (v2, then v1), the v2 tuning sweep, the graph-step tests
    log_to v2-check
    header v2-check
    local rc=0 pyt=("$PY" -m pytest -q -p no:cacheprovider -o addopts= -rfEs --durations=10)
    "$PY" benchmarks/gpu/env_check.py --json "$OUT/env.json" >/dev/null || rc=1
    timeout "${TESTS_V2_S:-100}" "${pyt[@]}" --junitxml="$OUT/tests-v2.xml" tests/test_sparse_triton_v2.py || rc=1
    timeout "${TUNE_S:-200}" "$PY" benchmarks/gpu/triton_v2_tune.py --budget-s "${TUNE_BUDGET_S:-170}" \
        --json "$OUT/triton_v2_tune-cuda.json" --best "$RUNS/triton_v2_best.json" || rc=$?
    cp "$RUNS/triton_v2_best.json" "$OUT/" 2>/dev/null || true
    timeout "${TESTS_V1_S:-50}" "${pyt[@]}" --junitxml="$OUT/tests-v1.xml" tests/test_cuda.py -k "triton and not graph_step" || rc=1
    # issue 35: docs/training.md's compiled (reduce-overhead) and CUDA-graph captured training steps
    # against eager, dense and tiled stores (3 compiles, cut off first)
    timeout "${TESTS_GRAPH_S:-90}" "${pyt[@]}" --junitxml="$OUT/tests-graph.xml" tests/test_cuda.py -k "graph_step" || rc=1
    echo "=== v2-check: rc $rc (124 = cut off by timeout; the JSON keeps what finished)"
    return "$rc"
}

stage_v2_probe() {  # call 2: kernel_probe.py with the tuned v2 blocking of call 1 (when the machine kept it)
    log_to v2-probe
    header v2-probe
    local rc=0
    timeout "${PROBE_S:-330}" "$PY" benchmarks/gpu/kernel_probe.py --budget-s "${PROBE_BUDGET_S:-270}" \
        --configs "$RUNS/triton_v2_best.json" --json "$OUT/kernel_probe-cuda.json" || rc=$?
    echo "=== v2-probe: rc $rc"
    return "$rc"
}

MNIST_MODELS=mlp,random_element,random_tile

mnist_start() {  # E SEEDS JOBS MODELS
    local E=$1 SEEDS=$2 JOBS=$3 MODELS=$4 dir=$RUNS/mnist-e$1
    mkdir -p "$dir"
    [ -z "$(pids_alive "$dir/pids")" ] || die "MNIST jobs for $E epochs are already running (status)"
    printf 'E=%s\nSEEDS=%s\nMODELS=%s\n' "$E" "$SEEDS" "$MODELS" >"$dir/args"
    : >"$dir/pids"
    local pairs=() m s
    IFS=, read -r -a models <<<"$MODELS"
    IFS=, read -r -a seeds <<<"$SEEDS"
    for s in "${seeds[@]}"; do for m in "${models[@]}"; do pairs+=("$m:$s"); done; done
    local w n=${#pairs[@]}
    [ "$JOBS" -le "$n" ] || JOBS=$n
    for ((w = 0; w < JOBS; w++)); do
        local mine=() i
        for ((i = w; i < n; i += JOBS)); do mine+=("${pairs[i]}"); done
        setsid nohup bash "$ROOT/benchmarks/gpu/suite.sh" _mnist-worker "$E" "${mine[@]}" \
            >"$dir/worker$w.log" 2>&1 </dev/null 3>&- 4>&- &
        echo $! >>"$dir/pids"
    done
    echo "MNIST: $n runs ($MODELS x seeds $SEEDS, $E epochs, full data) on $JOBS background workers; logs in $dir"
}

mnist_worker() {  # E model:seed ...
    local E=$1 pair
    shift
    for pair in "$@"; do
        echo "=== $(date -u +%H:%M:%S) start ${pair%%:*} seed ${pair##*:}"
        "$PY" experiments/mnist_sparsity/run.py --models "${pair%%:*}" --seeds "${pair##*:}" --epochs "$E" \
            --data full --device "$DEVICE" --num-threads 1 --out "$RUNS/mnist-e$E" \
            || echo "=== FAILED ${pair} (rc $?)"
        echo "=== $(date -u +%H:%M:%S) done ${pair}"
    done
}

WIKITEXT_MODELS=(tanh-unstable tanh-stable lstm-unstable lstm-stable)

wikitext_start() {  # E MAX_BATCHES ("" = full mode defaults)
    local E=$1 MB=$2 tag dir
    tag=e${E:-40}${MB:+-b$MB}
    dir=$RUNS/wikitext-$tag
    mkdir -p "$dir"
    [ -z "$(pids_alive "$dir/pids")" ] || die "WikiText jobs $tag are already running (status)"
    : >"$dir/pids"
    local extra=() m
    [ -n "$E" ] && extra+=(--epochs "$E")
    [ -n "$MB" ] && extra+=(--max-batches "$MB")
    for m in "${WIKITEXT_MODELS[@]}"; do
        setsid nohup "$PY" experiments/stable_rnn/wikitext.py --models "$m" --out "$dir/$m" --device "$DEVICE" \
            --threads 1 "${extra[@]}" >"$dir/$m.log" 2>&1 </dev/null 3>&- 4>&- &
        echo $! >>"$dir/pids"
    done
    echo "WikiText: ${WIKITEXT_MODELS[*]} (${extra[*]:-full mode}) in 4 background processes; logs in $dir"
}

status() {
    local d p alive
    echo "=== status $(date -u +%H:%M:%S)"
    nvidia-smi --query-gpu=utilization.gpu,memory.used,memory.total --format=csv,noheader || true
    for d in "$RUNS"/mnist-e* "$RUNS"/wikitext-e*; do
        [ -d "$d" ] || continue
        alive=$(pids_alive "$d/pids" | wc -l)
        echo "--- $(basename "$d"): $alive of $(wc -l <"$d/pids" 2>/dev/null || echo 0) processes running"
        # epochs done per run (rows of each metrics.csv, header excluded)
        while IFS= read -r -d '' p; do
            echo "    ${p#"$d"/}: $(($(wc -l <"$p") - 1)) epochs, last: $(tail -1 "$p" | cut -c1-110)"
        done < <(find "$d" -name metrics.csv -print0 | sort -z)
        while IFS= read -r -d '' p; do
            echo "    finished: ${p#"$d"/} ($(date -u -r "$p" +%H:%M:%S))"
        done < <(find "$d" -mindepth 2 -maxdepth 2 -name results.json -print0 | sort -z)
        for p in "$d"/*.log; do
            if [ -f "$p" ]; then echo "    $(basename "$p"): $(tail -1 "$p" | cut -c1-150)"; fi
        done
    done
}

wait_jobs() {  # SECONDS
    local limit=$1 start=$SECONDS last=0 alive f
    while :; do
        alive=0
        for f in "$RUNS"/*/pids; do
            if [ -f "$f" ]; then alive=$((alive + $(pids_alive "$f" | wc -l))); fi
        done
        if [ "$alive" -eq 0 ]; then echo "no background job is running"; break; fi
        if ((SECONDS - start >= limit)); then echo "waited ${limit}s; $alive processes still running"; break; fi
        if ((SECONDS - last >= 60)); then status; last=$SECONDS; fi
        sleep 10
    done
    status
}

collect_mnist() {  # [E [nodoc]]
    local E=${1:-100} doc=${2:-doc} dir
    dir=$RUNS/mnist-e$E
    [ -f "$dir/args" ] || die "no MNIST run with $E epochs under $RUNS"
    local SEEDS MODELS
    SEEDS=$(sed -n 's/^SEEDS=//p' "$dir/args")
    MODELS=$(sed -n 's/^MODELS=//p' "$dir/args")
    if [ -n "$(pids_alive "$dir/pids")" ]; then
        echo "MNIST workers still run: returning the per-run metrics only (run collect again when they end)"
        "$PY" - "$dir" "$OUT/mnist-partial.json" <<'EOF'
import json, sys
from pathlib import Path
from seq2d.train import read_metrics
root = Path(sys.argv[1])
runs = {str(p.parent.relative_to(root)): read_metrics(p.parent) for p in sorted(root.glob("*/seed*/metrics.jsonl"))}
Path(sys.argv[2]).write_text(json.dumps(runs, indent=1, default=str))
print(f"{len(runs)} runs, epochs: " + ", ".join(f"{k} {len(v)}" for k, v in runs.items()))
EOF
        return 0
    fi
    # every run finished: run.py again with the workers' arguments reuses them (nothing is
    # retrained) and writes the table, the plots and the results page
    local docopt=()
    if [ "$doc" = doc ]; then
        cp docs/results/mnist.md "$OUT/mnist.md" 2>/dev/null || true
        docopt=(--doc "$OUT/mnist.md")
    fi
    "$PY" experiments/mnist_sparsity/run.py --models "$MODELS" --seeds "$SEEDS" --epochs "$E" --data full \
        --device "$DEVICE" --num-threads 1 --out "$dir" "${docopt[@]}"
    cp "$dir/results.json" "$OUT/mnist-results.json"
    cp "$dir/results.md" "$OUT/mnist-results.md"
}

collect_wikitext() {  # [TAG], e.g. e40 (default) or e1-b300
    local tag=${1:-e40} dir
    dir=$RUNS/wikitext-$tag
    [ -d "$dir" ] || die "no WikiText run $tag under $RUNS"
    [ -z "$(pids_alive "$dir/pids")" ] || echo "WikiText processes still run: collecting what has finished"
    "$PY" - "$dir" "$OUT/wikitext-$tag.json" "$OUT/wikitext-$tag.md" <<'EOF'
import json, sys
from pathlib import Path
root, out_json, out_md = Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3])
merged, md = {}, []
for d in sorted(p for p in root.iterdir() if p.is_dir()):
    res = d / "results.json"
    metrics = d / d.name / "metrics.jsonl"
    rows = [json.loads(line) for line in metrics.read_text().splitlines() if line.strip()] if metrics.exists() else []
    merged[d.name] = {"results": json.loads(res.read_text()) if res.exists() else None, "metrics": rows}
    if (d / "results.md").exists():
        md += [f"## {d.name}", "", (d / "results.md").read_text(), ""]
    print(f"{d.name}: {'results' if res.exists() else 'no results yet'}, {len(rows)} epochs of metrics")
out_json.write_text(json.dumps(merged, indent=1, default=str))
out_md.write_text("\n".join(md))
EOF
    local f
    for f in "$dir"/*.log; do
        if [ -f "$f" ]; then echo "--- $(basename "$f")"; tail -15 "$f"; fi
    done
}

stage_probe() {
    log_to probe
    header probe
    mnist_start 1 0 3 "$MNIST_MODELS"
    wikitext_start 1 600
    wait_jobs "${PROBE_S:-240}"
    collect_mnist 1 nodoc || true
    collect_wikitext e1-b600 || true
    # time per epoch per MNIST model, per run of wikitext: the numbers that size the long runs
    "$PY" - "$RUNS" <<'EOF' || true
import json, sys
from pathlib import Path
root = Path(sys.argv[1])
for p in sorted(root.glob("mnist-e1/*/seed*/metrics.jsonl")):
    rows = [json.loads(l) for l in p.read_text().splitlines() if l.strip()]
    print(f"MNIST {p.parent.parent.name}: " + ", ".join(f"epoch {r.get('epoch')} {r.get('epoch_time_s', 0):.1f} s "
                                                     f"acc {r.get('test_acc')}" for r in rows))
for p in sorted(root.glob("wikitext-e1-b600/*/*/metrics.jsonl")):
    rows = [json.loads(l) for l in p.read_text().splitlines() if l.strip()]
    print(f"WikiText {p.parent.name}: {rows[-1] if rows else 'no epoch'}")
EOF
}

# ------------------------------------------------------------------ dispatch
stage=${1:-}
[ -n "$stage" ] || die "usage: suite.sh v2-check|v2-probe|install-and-test|kernels|model-step|tune|probe|mnist-start|wikitext-start|status|wait|collect"
shift
case $stage in
    _mnist-worker) mnist_worker "$@"; exit 0 ;;  # internal: one background worker
esac
case $stage in
    v2-check|v2-probe) ;;  # the checkout alone: nothing to install, no carry
    *) setup; pythonpath_site ;;
esac
case $stage in
    v2-check) stage_v2_check ;;
    v2-probe) stage_v2_probe ;;
    install-and-test) stage_install_and_test ;;
    kernels) stage_kernels ;;
    model-step) stage_model_step ;;
    tune) stage_tune ;;
    probe) stage_probe ;;
    mnist-start) log_to mnist-start; header mnist-start
        mnist_start "${1:-100}" "${2:-0,1,2,3,4}" "${3:-15}" "${4:-$MNIST_MODELS}" ;;
    wikitext-start) log_to wikitext-start; header wikitext-start; wikitext_start "${1:-}" "${2:-}" ;;
    status) status ;;
    wait) log_to wait; wait_jobs "${1:?wait SECONDS}" ;;
    collect) log_to collect
        case ${1:-} in
            mnist) collect_mnist "${2:-100}" ;;
            wikitext) collect_wikitext "${2:-e40}" ;;
            *) die "collect mnist [EPOCHS] | collect wikitext [TAG]" ;;
        esac ;;
    *) die "unknown stage '$stage'" ;;
esac
