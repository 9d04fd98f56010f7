#!/usr/bin/env bash
# Runs every test of the workspace and ends with one summary line over all test
# binaries ("tests: N passed, N failed, N skipped"), since cargo prints one per binary.
set -uo pipefail
cd "$(dirname "$0")/.."
log=$(mktemp)
trap 'rm -f "$log"' EXIT
# Tests marked #[ignore] need root (the local Slurm cluster): run them as root
# or in CI, else report them as skipped, never as passed.
extra=()
if [ "$(id -u)" = 0 ] || [ -n "${CI:-}" ]; then
  case " $* " in *" -- "*) extra=(--include-ignored) ;; *) extra=(-- --include-ignored) ;; esac
fi
cargo test --workspace --no-fail-fast "$@" "${extra[@]}" 2>&1 | tee "$log"
status=${PIPESTATUS[0]}
read -r passed failed ignored < <(awk '/^test result:/ {
    for (i = 1; i <= NF; i++) {
      if ($(i+1) ~ /^passed/) p += $i; if ($(i+1) ~ /^failed/) f += $i; if ($(i+1) ~ /^ignored/) g += $i
    }
  } END { print p + 0, f + 0, g + 0 }' "$log")
echo
echo "tests: $passed passed, $failed failed, $ignored skipped"
exit "$status"
