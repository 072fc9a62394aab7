#!/usr/bin/env bash
# scripts/demo.sh — the README's first command, end to end: install what is missing, build,
# write the CI-sized synthetic MoE model, inspect it, and generate text from it.
# Everything it writes goes to out/ (git-ignored).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/build.sh build
mkdir -p out
build/cli/moeplan mkmodel --preset tiny -o out/tiny.gguf --force
build/cli/moeplan inspect out/tiny.gguf
build/cli/moeplan run -m out/tiny.gguf -p "Explain mixture of experts" -n 32
