#!/usr/bin/env bash
# scripts/build.sh [BUILD_DIR [meson options...]] — configure (once) and build.
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${1:-build}
shift || true
[ -x /usr/local/cuda/bin/nvcc ] && export PATH="$PATH:/usr/local/cuda/bin"
if [ ! -f "$dir/build.ninja" ]; then
    meson setup "$dir" "$@" >/dev/null || { echo "build: meson setup $dir failed (see $dir/meson-logs/meson-log.txt)" >&2; exit 1; }
fi
ninja -C "$dir" >/dev/null || ninja -C "$dir"
