#!/usr/bin/env bash
# The main job on its built-in defaults: Threadtest (tiny scale, 2 threads) on the
# NVAlloc ablation `base` and on `nvalloc-log`, each traced to a .pmt file,
# summarised (`pmsim trace info`) and replayed through the simulator
# (`pmsim sim`), then the same runs natively for ops/s.
# Results go to results/main-job/ (override with OUT=DIR).
set -euo pipefail
cd "$(dirname "$0")/.."
PMSIM=target/release/pmsim
OUT=${OUT:-results/main-job}
mkdir -p "$OUT"
for alloc in base nvalloc-log; do
  trace="$OUT/threadtest-$alloc.pmt"
  echo "== $alloc: traced run"
  $PMSIM run --alloc "$alloc" --workload threadtest --threads 2 --scale tiny --trace "$trace" --overwrite
  $PMSIM trace info "$trace" | tee "$OUT/threadtest-$alloc.info.txt" | sed -n '1,12p'
  echo "== $alloc: simulated"
  $PMSIM sim "$trace" --access-map "$OUT/threadtest-$alloc.access-map.csv" | tee "$OUT/threadtest-$alloc.sim.txt" | sed -n '1,30p'
done
echo "== native runs (real flush instructions, heap in /dev/shm)"
$PMSIM run --alloc base,nvalloc-log,pmdk --workload threadtest --threads 1,2 --scale tiny | tee "$OUT/native.txt"
echo "results in $OUT/"
