#!/usr/bin/env bash
# The main job: `pmsim reproduce` at tiny scale (every experiment of
# analyses/experiments/, its figures, and a report with the tables behind them).
# Results go to results/reproduce-tiny/ (override with OUT=DIR, SCALE=small|paper);
# running it again into the same directory resumes.
set -euo pipefail
cd "$(dirname "$0")/.."
SCALE=${SCALE:-tiny}
OUT=${OUT:-results/reproduce-$SCALE}
target/release/pmsim reproduce --scale "$SCALE" --out "$OUT"
echo "open $OUT/index.html"
