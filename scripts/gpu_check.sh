#!/usr/bin/env bash
# One prepared check for a GPU machine: doctor, then reap and drain at pp 2 with the KV
# pools on CUDA (PP sync on gloo, as SGLang), drain with PP sync on NCCL (two GPUs or more),
# and a short compare-policies. Writes everything under OUT (default ./gpu-check). Under 8 minutes.
#
#   scripts/gpu_check.sh [OUT]
set -uo pipefail
cd "$(dirname "$0")/.."
out=${1:-gpu-check}
mkdir -p "$out"
hicache=(.venv/bin/python -m hicache_cli)
[ -x .venv/bin/python ] || hicache=(python3 -m hicache_cli)
run() {  # name, then the hicache arguments; keeps stdout, stderr and the exit code
  local name=$1; shift
  echo "== $name: hicache $*"
  timeout 150 "${hicache[@]}" "$@" >"$out/$name.out" 2>"$out/$name.err"
  echo "$?" >"$out/$name.rc"
  tail -n 6 "$out/$name.out"
}
run doctor doctor --json
run reap-cuda stress --pp 2 --policy reap --device cuda --duration 20s --no-live \
  --run-dir "$out/reap-cuda" --report "$out/reap-cuda.json"
run drain-cuda stress --pp 2 --policy drain --device cuda --duration 20s --no-live \
  --run-dir "$out/drain-cuda" --report "$out/drain-cuda.json"
if [ "$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')" -ge 2 ]; then  # NCCL takes a GPU for each rank
  run drain-nccl stress --pp 2 --policy drain --device cuda --pp-backend nccl --duration 20s --no-live \
    --run-dir "$out/drain-nccl" --report "$out/drain-nccl.json"
else
  echo "== drain-nccl: skipped, it needs two GPUs (hicache refuses it on one: exit 2)"
fi
run compare compare-policies --pp 2 --device cuda --duration 10s --no-live \
  --run-dir "$out/compare" --output "$out/compare.json" --markdown "$out/compare.md"
echo "== exit codes"; for f in "$out"/*.rc; do echo "$(basename "$f" .rc): $(cat "$f")"; done
