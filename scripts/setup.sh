#!/usr/bin/env bash
# scripts/setup.sh — install what moeplan needs to build and test on Debian 12 (root or sudo).
# Idempotent: installs only the packages that are missing. CUDA is optional (the toolkit is
# found through nvcc on PATH or /usr/local/cuda/bin); without it the CUDA code is not built.
set -euo pipefail
pkgs=(meson ninja-build pkg-config gcc libsqlite3-dev libcjson-dev libpcre2-dev libcriterion-dev libssl-dev
      sqlite3 python3 python3-jsonschema chromium libsimde-dev groff-base zsh)
# libsimde-dev: headers only; test quant_avx512_emul runs the AVX-512 kernels' logic through
# SIMDe's portable intrinsics on CPUs without AVX-512 (it reports SKIP without them).
# chromium: the analyzer's report test renders report.html headless (about 100 MB to download);
# the test fails, never skips, without it.
# groff-base, zsh: test cli_docs renders moeplan(1) and runs the zsh completion (SKIP without them).
# python3-jsonschema: test costs_schema checks schemas/costs.schema.json against the cost files
# (SKIP without it).
[ "${MP_SETUP_FUZZ:-0}" = 1 ] && pkgs+=(clang)
missing=()
for p in "${pkgs[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
    echo "setup: installing ${missing[*]}"
    sudo=""
    [ "$(id -u)" = 0 ] || sudo=sudo
    export DEBIAN_FRONTEND=noninteractive
    $sudo apt-get update -qq
    $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
if ! command -v nvcc >/dev/null 2>&1 && [ -x /usr/local/cuda/bin/nvcc ]; then
    echo "setup: nvcc is in /usr/local/cuda/bin; add it to PATH to build the CUDA kernels"
fi
