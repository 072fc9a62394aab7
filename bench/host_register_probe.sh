#!/usr/bin/env bash
# bench/host_register_probe.sh MOEPLAN OUTDIR — does the GPU executor start with every expert in
# host memory, for each weight type and file system? The F32 hybrid run hung inside
# cudaHostRegister of the model's file mapping (H200 machine, 2026-11-29: only F32 in /tmp, on
# ext4; the main thread running in the kernel, a second thread blocked in mmap); the executor now
# page-locks its own copy (gpu/gpu_host.c). This runs `bench --placement cpu` (every expert on
# the host) on tiny models of several types and from several file systems, 15 s each, and says for
# each: finished or killed, and where the executor kept the host experts. Facts about the machine
# first (kernel, file systems, THP).
set -u
moeplan=$1 out=$2
mkdir -p "$out"
{
    echo "kernel: $(uname -r)"
    for d in /tmp /dev/shm "$PWD"; do echo "fs $d: $(stat -f -c %T "$d") $(findmnt -no OPTIONS -T "$d" 2>/dev/null)"; done
    for f in enabled shmem_enabled defrag; do
        echo "thp $f: $(cat /sys/kernel/mm/transparent_hugepage/$f 2>/dev/null)"
    done
    grep -i -E 'movable|kernelcore' /proc/cmdline || echo "cmdline: no movablecore/kernelcore"
    grep -E '^Node|zone' /proc/zoneinfo | grep -c Movable | sed 's/^/zoneinfo lines naming Movable: /'
} >"$out/machine.txt" 2>&1
cat "$out/machine.txt"
probe() { # NAME QUANT DIR [PREP]
    local name=$1 quant=$2 dir=$3 prep=${4:-}
    local f=$dir/mp-probe-$name.gguf
    "$moeplan" mkmodel --arch qwen3moe --quant "$quant" --quiet --force -o "$f" || return
    [ "$prep" = cat ] && cat "$f" >/dev/null
    local t0=$SECONDS
    timeout -s KILL 15 "$moeplan" bench -m "$f" --placement cpu -p 40 -n 4 -t 4 -r 1 >"$out/$name.log" 2>&1
    local rc=$?
    echo "$name: quant $quant in $dir${prep:+ (after $prep)}: exit $rc in $((SECONDS - t0)) s;" \
        "$(grep -o 'host experts in [^;]*' "$out/$name.log" | head -1)"
    rm -f "$f"
}
{
    probe f32-tmp f32 /tmp
    probe f32-shm f32 /dev/shm
    mkdir -p "$PWD/out"
    probe f32-work f32 "$PWD/out"
    probe f32-tmp-cached f32 /tmp cat
    probe f16-tmp f16 /tmp
    probe bf16-tmp bf16 /tmp
    probe q8-tmp q8_0 /tmp
    probe q4km-tmp q4_k_m /tmp
} 2>&1 | tee "$out/summary.txt"
