#!/usr/bin/env bash
# Runs every test of the workspace and ends with one summary line over all test
# binaries ("tests: N passed, N failed, N skipped").
#
# The tests are built once (the test profile: optimised, with debug assertions),
# then the test binaries run side by side, as many at a time as there are
# cores (PMSIM_TEST_JOBS), the slowest first
# (scripts/test-times.tsv, rewritten into the target directory by every run); each prints
# its output when it ends, and a table of every binary's wall and CPU time
# (user + system, its children included) comes before the summary line.
#
#   bash scripts/test.sh                      every test
#   bash scripts/test.sh -p pmsim-crash       cargo's selection of test binaries
#   bash scripts/test.sh -- --nocapture       arguments for every test binary
set -uo pipefail
cd "$(dirname "$0")/.."

cargo_args=() test_args=()
seen_dashes=0
for a in "$@"; do
  if [ "$seen_dashes" = 0 ] && [ "$a" = "--" ]; then seen_dashes=1; continue; fi
  if [ "$seen_dashes" = 0 ]; then cargo_args+=("$a"); else test_args+=("$a"); fi
done
# The criterion benchmarks (benchmarks/) are not tests: with them, the doc
# tests would enable criterion's dependencies and rebuild most of the
# workspace with other features.
[ ${#cargo_args[@]} -gt 0 ] || cargo_args=(--workspace --exclude pmsim-benches)
# Tests marked #[ignore] need root (the local Slurm cluster): run them as root
# or in CI, else report them as skipped, never as passed.
if [ "$(id -u)" = 0 ] || [ -n "${CI:-}" ]; then test_args+=(--include-ignored); fi

. scripts/zstd-env.sh

work=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null; wait; rm -rf "$work"' EXIT
trap 'exit 130' INT TERM

# One build of every test binary; its list: name, package directory, executable.
start=$(date +%s)
if ! cargo test --no-run --message-format=json-render-diagnostics "${cargo_args[@]}" >"$work/build.json"; then
  echo "tests: the build failed"
  exit 101
fi
python3 - "$work/build.json" >"$work/binaries.tsv" <<'EOF'
import json, os, sys
for line in open(sys.argv[1]):
    try:
        m = json.loads(line)
    except ValueError:
        continue
    if m.get("reason") != "compiler-artifact" or not m.get("executable") or not m["profile"].get("test"):
        continue
    # Named by its source file in the workspace (`crash/tests/explore.rs`,
    # `model/src/lib.rs` for a library's unit tests).
    name = os.path.relpath(m["target"]["src_path"], os.getcwd())
    print(f"{name}\t{os.path.dirname(m['manifest_path'])}\t{m['executable']}")
EOF
built=$(date +%s)
echo "tests: built $(wc -l <"$work/binaries.tsv") test binaries in $((built - start)) s"

# The slowest first: the last run's times in Cargo's target directory
# (CARGO_TARGET_DIR when set, as cargo reads it), else the committed ones.
tdir=${CARGO_TARGET_DIR:-target}
mkdir -p "$tdir"
times=$tdir/test-times.tsv
[ -s "$times" ] || times=scripts/test-times.tsv
python3 - "$work/binaries.tsv" "$times" >"$work/order.tsv" <<'EOF'
import sys
known = {}
try:
    for line in open(sys.argv[2]):
        f = line.rstrip("\n").split("\t")
        if len(f) >= 2 and not line.startswith("#"):
            known[f[0]] = float(f[1])
except OSError:
    pass
rows = [l.rstrip("\n").split("\t") for l in open(sys.argv[1])]
# A binary with no time yet counts as 30 s: after the known slow ones, before the quick ones.
rows.sort(key=lambda r: -known.get(r[0], 30.0))
for i, r in enumerate(rows):
    print(i, *r, sep="\t")
print(len(rows), "doc tests", ".", "doc", sep="\t")
EOF

# Runs one binary (or the doc tests) into its log; its status and times into its .time.
run_one() {
  local i=$1 name=$2 dir=$3 exe=$4
  local log="$work/$i.log" t0 t1
  t0=$(date +%s.%N)
  (
    TIMEFORMAT="%U %S"
    time {
      if [ "$exe" = doc ]; then
        cargo test --doc "${cargo_args[@]}" -- "${test_args[@]}"
      else
        echo "     Running $name ($exe)"
        cd "$dir" && "$exe" "${test_args[@]}"
      fi
    } >"$log" 2>&1
    echo $? >"$work/$i.status"
  ) 2>"$work/$i.cpu"
  t1=$(date +%s.%N)
  echo "$t0 $t1" >"$work/$i.wall"
}

jobs_max=${PMSIM_TEST_JOBS:-$(nproc)}
while IFS=$'\t' read -r i name dir exe; do
  while [ "$(jobs -rp | wc -l)" -ge "$jobs_max" ]; do wait -n; done
  run_one "$i" "$name" "$dir" "$exe" &
done <"$work/order.tsv"
wait

status=0
while IFS=$'\t' read -r i name dir exe; do
  cat "$work/$i.log"
  [ "$(cat "$work/$i.status" 2>/dev/null || echo 1)" = 0 ] || status=101
done <"$work/order.tsv"

# The per-binary times, and the summary over every binary's "test result" line.
python3 - "$work" >"$tdir/test-times.tsv.new" <<'EOF'
import os, sys
work = sys.argv[1]
for line in open(os.path.join(work, "order.tsv")):
    i, name = line.rstrip("\n").split("\t")[:2]
    try:
        t0, t1 = map(float, open(os.path.join(work, f"{i}.wall")).read().split())
        user, sys_ = map(float, open(os.path.join(work, f"{i}.cpu")).read().split()[-2:])
    except (OSError, ValueError):
        continue
    print(f"{name}\t{t1 - t0:.1f}\t{user + sys_:.1f}")
EOF
mv "$tdir/test-times.tsv.new" "$tdir/test-times.tsv"
echo
echo "tests: seconds per binary (wall, CPU = user + system):"
sort -t$'\t' -k2,2 -rn "$tdir/test-times.tsv" | awk -F'\t' '{ printf "  %7.1f %7.1f  %s\n", $2, $3, $1 }'
end=$(date +%s)
read -r passed failed ignored < <(cat "$work"/*.log | awk '/^test result:/ {
    for (i = 1; i <= NF; i++) {
      if ($(i+1) ~ /^passed/) p += $i; if ($(i+1) ~ /^failed/) f += $i; if ($(i+1) ~ /^ignored/) g += $i
    }
  } END { print p + 0, f + 0, g + 0 }')
echo
echo "tests: built in $((built - start)) s, ran in $((end - built)) s on $jobs_max job(s)"
echo "tests: $passed passed, $failed failed, $ignored skipped"
exit "$status"
