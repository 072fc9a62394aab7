#!/usr/bin/env bash
# tests/sm_arch_test.sh — meson setup refuses an -Dsm_arch that is not a CUDA SM architecture of 70
# or more written as digits, in one error line naming the value, and leaves no build behind it; a
# good value configures. Run where nvcc is (the option is read only then). Needs MP_SOURCE_ROOT and
# MP_MESON (run through meson test).
set -uo pipefail
src=${MP_SOURCE_ROOT:?MP_SOURCE_ROOT is not set (run through meson test)}
meson=${MP_MESON:?MP_MESON is not set (run through meson test)}
out=$(mktemp -d /tmp/mp_sm_arch_XXXXXX) || exit 1
trap 'rm -rf "$out"' EXIT
for bad in abc 61 9x0 ''; do
    log=$("$meson" setup "$out/b" "$src" "-Dsm_arch=$bad" 2>&1)
    rc=$?
    lines=$(printf '%s\n' "$log" | grep -c "ERROR: Problem encountered: sm_arch '$bad': expected a CUDA SM architecture of 70 or more as digits")
    [ "$rc" != 0 ] && [ "$lines" = 1 ] ||
        { echo "sm_arch_test: -Dsm_arch='$bad' gave exit $rc and no one-line refusal:"; printf '%s\n' "$log" | tail -5; exit 1; }
    [ ! -e "$out/b/build.ninja" ] || { echo "sm_arch_test: -Dsm_arch='$bad' left a configured build"; exit 1; }
    rm -rf "$out/b"
done
"$meson" setup "$out/b" "$src" -Dsm_arch=86 >"$out/ok.log" 2>&1 ||
    { echo "sm_arch_test: -Dsm_arch=86 did not configure:"; tail -5 "$out/ok.log"; exit 1; }
grep -q "arch=compute_80,code=compute_80" "$out/b/build.ninja" && grep -q "arch=compute_86,code=sm_86" "$out/b/build.ninja" ||
    { echo "sm_arch_test: -Dsm_arch=86 does not build sm_86 code with compute_80 PTX"; exit 1; }
echo "sm_arch_test: abc, 61, 9x0 and '' refused in one line; 86 builds sm_86 code and compute_80 PTX"
