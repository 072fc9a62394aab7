#!/usr/bin/env bash
# scripts/test.sh — set up, build and run the whole test suite twice: a release build, then a
# build with AddressSanitizer + UndefinedBehaviorSanitizer. GPU tests skip (exit 77, reported as
# SKIP with the reason) where no CUDA device exists.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/build.sh build
meson test -C build --print-errorlogs --num-processes 2
# meson shows a skipped executable as SKIP; say why, once
grep -h "^SKIP:" build/meson-logs/testlog.txt | sort | uniq -c || true
# The sanitizer build is a debug build: its tests check memory and UB, not speed. It builds no CUDA:
# no GPU test runs without a device, and the release build above compiles the CUDA code (nvcc took
# 191 s of the sanitizer build's 814 s of compiling on a 2-core VM).
bash scripts/build.sh build-asan -Db_sanitize=address,undefined -Dbuildtype=debug -Db_lundef=false -Dcuda=disabled
ASAN_OPTIONS=detect_leaks=1 meson test -C build-asan --print-errorlogs --num-processes 2
