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
# Meson before 1.4 asks nvcc for no dependency file, so ninja never sees the headers a .cu file
# includes: after a header edit the CUDA objects would stay stale. Where that is so, a header newer
# than the last build's stamp gets every .cu file recompiled (their mtimes touched, content as is).
stamp=$dir/.cuda-headers-stamp
old_meson=$(printf '%s\n1.4.0\n' "$(meson --version)" | sort -V | head -1)
if [ -f "$stamp" ] && [ "$old_meson" != 1.4.0 ] &&
    [ -n "$(find kernels tests/unit \( -name '*.cuh' -o -name '*.h' \) -newer "$stamp" -print -quit)" ]; then
    find kernels tests/unit -name '*.cu' -exec touch {} +
fi
ninja -C "$dir" >/dev/null || ninja -C "$dir"
touch "$stamp"
