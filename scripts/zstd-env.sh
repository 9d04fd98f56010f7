# Sourced by setup.sh and test.sh before they build: where the system has
# zstd's library (libzstd-dev, which setup.sh installs), the zstd-sys crate
# links it instead of compiling its bundled C sources, about 25 s of CPU in
# every clean build. Without it, the bundled copy is built as usual.
if pkg-config --exists libzstd 2>/dev/null; then
  export ZSTD_SYS_USE_PKG_CONFIG=1
fi
