#!/usr/bin/env bash
# Ready for the first GPU: everything a session lent a GPU should run, in one go, in under 11 minutes.
#
#   benchmarks/gpu_check.sh              # on a machine with a CUDA GPU: writes docs/gpu-validation.md
#   benchmarks/gpu_check.sh --dry-run    # anywhere: checks that the script parses and its parts launch (CPU)
#
# 1. the gpu-marked tests (`pytest -m gpu`: a real device assert, OOM, one_hot, a NameError after CUDA started, the
#    fast checks on a real embedding/cross-entropy step, the restart freeing the device memory, the snapshot bit for
#    bit, the exact checks' sync mode);
# 2. the guard's cost on the GPU: plain, fast, exact and plain with CUDA_LAUNCH_BLOCKING=1, one process each
#    (bench_guard.run_gpu through bench_gpu.py), and the device-to-host copy limit (pinned memory);
# 3. the snapshot's copy bandwidth (bench_snapshot.py --gpu), set against that limit;
# 4. the fast checks through the real shell on the GPU (bench_guard_shell.py --device cuda, issue 32): the host time
#    inside each check with the same batch every step and with a new host batch copied every step, and whole
#    4-step cells with the checks on and off;
# 5. docs/gpu-validation.md: date, commit, device (nvidia-smi), the figures and the test summary.
# Each part has its own time limit (180 + 150 + 100 + 210 s, the rest well under a minute), so the whole stays
# under 11 minutes even when a part hangs; a part that fails is written into the page as it failed.
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python}
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"

if [ "${1:-}" = "--dry-run" ]; then
  set -e
  bash -n "$0"
  LOGS=$(mktemp -d)
  trap 'rm -rf "$LOGS"' EXIT
  date -u +%Y-%m-%dT%H:%MZ > "$LOGS/date.txt"
  git rev-parse --short HEAD > "$LOGS/commit.txt" 2>/dev/null || echo unknown > "$LOGS/commit.txt"
  echo "no GPU (dry run)" > "$LOGS/device.txt"
  # the gpu-marked tests are collected and skipped cleanly without a GPU
  rc=0
  "$PY" -m pytest -m gpu tests/test_gpu.py -q -p no:cacheprovider > "$LOGS/pytest.txt" 2>&1 || rc=$?
  echo "$rc" > "$LOGS/pytest.rc"
  grep -Eq "[0-9]+ (skipped|deselected)" "$LOGS/pytest.txt"
  "$PY" benchmarks/bench_guard.py --help > /dev/null
  "$PY" benchmarks/bench_snapshot.py --help > /dev/null
  "$PY" benchmarks/bench_guard_shell.py --help > /dev/null
  echo "(dry run: the shell benchmark not run)" > "$LOGS/shell.txt"
  "$PY" benchmarks/bench_gpu.py measure --dry-run > "$LOGS/gpu.json"
  "$PY" benchmarks/bench_gpu.py report --logs "$LOGS" --out "$LOGS/gpu-validation.md" > /dev/null
  grep -q "D2H limit" "$LOGS/gpu-validation.md"
  [ -n "${GPU_CHECK_SHOW:-}" ] && cat "$LOGS/gpu-validation.md"
  echo "gpu_check.sh --dry-run: ok (parses, its parts launch, the page renders)"
  exit 0
fi

if ! command -v nvidia-smi > /dev/null || ! "$PY" -c "import torch, sys; sys.exit(not torch.cuda.is_available())"; then
  echo "gpu_check.sh: no CUDA GPU here (nvidia-smi, torch.cuda.is_available()); use --dry-run" >&2
  exit 2
fi

LOGS=$(mktemp -d)
started=$(date +%s)
date -u +%Y-%m-%dT%H:%MZ > "$LOGS/date.txt"
git rev-parse --short HEAD > "$LOGS/commit.txt" 2>/dev/null || echo unknown > "$LOGS/commit.txt"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | head -1 > "$LOGS/device.txt"

echo "[1/5] gpu-marked tests"
timeout 180 "$PY" -m pytest -m gpu tests -q -p no:cacheprovider -o timeout=120 > "$LOGS/pytest.txt" 2>&1
echo $? > "$LOGS/pytest.rc"
tail -3 "$LOGS/pytest.txt"

echo "[2/5] the guard on the GPU and the D2H limit"
timeout 150 "$PY" benchmarks/bench_gpu.py measure --repeats 5 > "$LOGS/gpu.json" 2> "$LOGS/gpu.err" || {
  echo "bench_gpu failed: $(tail -1 "$LOGS/gpu.err")"
  echo '{}' > "$LOGS/gpu.json"
}

echo "[3/5] the snapshot's copy bandwidth"
timeout 100 "$PY" benchmarks/bench_snapshot.py --gpu --seconds 8 > "$LOGS/snapshot.txt" 2>&1 || echo "(bench_snapshot failed)" >> "$LOGS/snapshot.txt"
grep "bandwidth" "$LOGS/snapshot.txt" || true

echo "[4/5] the fast checks through the real shell"
SHELL_BENCH=(benchmarks/bench_guard_shell.py --device cuda --sizes tiny,issue --cells 4)
for extra in "--probe" "--probe --fresh" "--rounds 6" "--rounds 6 --fresh"; do  # 45 + 45 + 60 + 60 s at most
  limit=$([ "${extra#--probe}" != "$extra" ] && echo 45 || echo 60)
  # shellcheck disable=SC2086  # extra: the flags of this run, word-split on purpose
  timeout "$limit" "$PY" "${SHELL_BENCH[@]}" $extra >> "$LOGS/shell.txt" 2>> "$LOGS/shell.err" \
    || echo "(bench_guard_shell.py $extra failed: $(tail -1 "$LOGS/shell.err"))" >> "$LOGS/shell.txt"
done
grep -E "steps:|^issue" "$LOGS/shell.txt" || true

echo "[5/5] docs/gpu-validation.md"
"$PY" benchmarks/bench_gpu.py report --logs "$LOGS" --out docs/gpu-validation.md
echo "gpu_check.sh: done in $(( $(date +%s) - started )) s; logs in $LOGS"
exit "$(cat "$LOGS/pytest.rc")"
