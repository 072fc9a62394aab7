#!/usr/bin/env bash
# scripts/gpu.sh [STAGE ...] — everything moeplan runs on the GPU machine, in one call.
#
# The GPU machine (see docs/gpu-machine.md) reaches no package registry, so the Debian packages
# moeplan builds against travel with the working tree in .debs/ (made here by
# `bash tools/device-debs.sh .debs`) and Python wheels in .whl/. Stages (default: tests bench-cpu):
#   tests      build (release, sm_90 + PTX) and run the GPU suite (the unit suite runs in CI;
#              set MP_GPU_ALL_TESTS=1 to run it here too: it needs chromium and sqlite3; or name
#              tests in MP_GPU_TESTS, e.g. "gpu_exec gpu_calibrate")
#   hf-ref     regenerate the transformers parity fixtures (qwen3moe, qwen2moe, olmoe, mixtral, gpt-oss) into $OUT/hf
#              (tools/hf_reference.py)
#   bench-cpu  decode of the qwen3-30b-a3b preset in Q4_K on the CPU vs the memory-bandwidth bound
#   bench-gpu  CUDA GEMV / MoE-expert GB/s per weight type (bench/bench_cuda.c)
#   amx-ab     the AMX tile GEMMs (MP_ISA=amx, the default where the CPU has AMX) against avx512's: the kernel tests on the hardware
#              (quant, quant_amx_emul; nothing more runs if they fail), bench_kernels --gemm (the levels
#              alternated in one process), then prefill of the qwen3-30b-a3b preset with the levels
#              alternated AMX_ROUNDS (default 2) times: the CPU executor's pp AMX_CPU_PP (default 128)
#              and bench-exec's AMX_CONFIGS (default "ncpu48 fill8"), pp512 -> $OUT/amx-*.log, amx-ab.md
#   cpu-prefill-ab  the CPU executor's prefill of this tree against another, alternated: AB_REV (a
#              commit of this copy's git history: git archive) or AB_BASE (a source tree), both built
#              without CUDA in /tmp, on a CPU_AB_LAYERS-layer (default 8) model of the qwen3-30b-a3b
#              preset, prompts of each of CPU_AB_PP (default "64 128 512") tokens, CPU_AB_ROUNDS (default
#              3) rounds, each side first in every other -> $OUT/cpu-ab.md (tok/s of each side and their
#              ratio by prompt and round) and the bench JSON of every run; for a change of the CPU
#              kernels (a threshold, a tile)
#   amx-rows-ab  the CPU executor's prefill under MP_AMX_ROWS arms (bench/amx_rows_ab.sh: ARMS, default
#              "table calibrated", calibrate's choice made here; LAYERS, PP, ROUNDS), built without CUDA
#              in /tmp -> $OUT/amx-rows-ab/amx-ab.md (tok/s and ratios to the first arm by prompt and round)
#   bench-exec moeplan bench with the GPU executor: all-GPU, layers:N, budgets (bench/gpu_bench.sh;
#              CONFIGS="gpu ncpu12 ..." picks configurations, REPS the repetitions)
#   decode-table  the offloaded decode table (all-GPU and layers:12/24/36/48, tg128) with far routes
#              decided by a calibration made here first (its far routes are the best of the machine
#              it measured: bench/NOTES-gpu-exec.md run 40): calibrate the qwen3-30b-a3b preset
#              (TABLE_CALIBRATE_ARGS, default "--rows 1,2 --reps 3") into /tmp/mp-bench/costs-here.json
#              unless COSTS names a file, then bench/gpu_bench.sh over TABLE_CONFIGS in ROUNDS
#              (default 2) alternated rounds, REPS (default 2) -> $OUT/decode-table/ (costs.json,
#              calibrate.log, bench-*.json, table.md)
#   bench-ab   bench-exec's CONFIGS for two builds, alternated AB_ROUNDS (default 2) times (each first in every other round): this
#              tree against the source tree in AB_BASE (default .base; make it with `git archive REV |
#              tar -x -C .base`, drop .base/bench/results to stay under the device tool's carry limit,
#              and carry it; a carried folder is replaced at every call, so copy it outside the tree,
#              e.g. AB_BASE=/tmp/mp-base, to keep its build between calls), built in AB_BASE/build-gpu
#              -> $OUT/ab-{head,base}-N/ and $OUT/ab.md (the host's bandwidth drifts within minutes:
#              only alternated A/Bs count)
#   bench-trace    decode tok/s with tracing on vs off (bench/trace_overhead.c) on the 30B preset
#   profile    where the GPU time goes: `collect --cupti` of bench/prompt-long.jsonl (a 510-token prompt,
#              64 generated) on the qwen3-30b-a3b preset per placement in PROFILE_PLACEMENTS (default
#              "gpu layers:24"), summarized by bench/cupti_kernels.py -> $OUT/profile-*.md
#   cpu-part   a split far route's CPU side against whole routes, interleaved call by call
#              (moe_cpu_stream --routes R --part N/D --compare-part): the down tensor's rows read in
#              segments, on a 4-layer model of the Mixtral preset's shape (made in /tmp/mp-bench),
#              PART_LIST (default "6/8 4/8 2/8 1/8"), PART_ROUTES (default 1), each PART_ROUNDS
#              (default 2) times, under each of PART_ARMS (knob settings alternated as cpu-routes'
#              ROUTES_ARMS, e.g. "- MP_MOE_UNIT_KB=0") -> $OUT/cpu-part.log; PART_COMPARE=compare-packed
#              alternates the part's down read in row segments with the same part packed (a layout by
#              far unit; PART_ROUTES must stay 1)
#   cpu-stream the hybrid decode's CPU side alone (bench/moe_cpu_stream.c): one-row expert calls over
#              the host copy of STREAM_LAYERS (default "12 48") layers, STREAM_GAPS (default "0 50")
#              µs between calls, on the qwen3-30b-a3b preset -> $OUT/cpu-stream.log (STREAM_TOKENS,
#              STREAM_ARGS: more flags, e.g. --compare or --compare-isa avx512,avx2 for an interleaved A/B;
#              STREAM_ARMS: knob settings alternated in each of STREAM_ROUNDS (default 1) rounds, as
#              cpu-routes' ROUTES_ARMS, e.g. "MP_PREFETCH_BYTES=2048 MP_PREFETCH_BYTES=8192")
#   cpu-routes the CPU side's fixed cost per call for small experts: moe_cpu_stream --profile with
#              1, 2, 4, 8 routes a call (ROUTES_LIST) on a 4-layer model of the 256-expert qwen3moe
#              shape (2 MB experts, made in /tmp/mp-bench), with 0 and 25 µs between calls
#              (ROUTES_GAPS: a resident layer's GPU part), and the least-squares line of the median
#              call time over the routes: its intercept is what a hybrid layer step pays before its
#              bytes (H200, 2026-12-04: 23 µs beside 16.4 µs a route). ROUTES_ARMS: knob settings
#              alternated in each of ROUTES_ROUNDS (default 1) rounds, "-" the environment as it is,
#              else VAR=VALUE[,VAR=VALUE...], e.g. "MP_MOE_UNIT_KB=0 MP_MOE_UNIT_KB=64"; a line per
#              arm and gap, of the rounds' medians -> $OUT/cpu-routes.log
#   bench-pool thread-pool region overhead at 16 and 8 threads (bench/pool_overhead.c)
#   membw-pcie host memory read by the cores, by the copy engine and by a zero-copy kernel, alone and
#              side by side (bench/membw_pcie.cu; MEMBW_PCIE_ARGS) -> $OUT/membw-pcie.log
#   host-register  tiny models of several types and file systems, all experts on the host: which
#              can the executor page-lock, which hang (bench/host_register_probe.sh)
#   bench-decode   the 1-row expert call of five expert shapes (the presets', a 256-expert one, top-1
#              of 16) with the K-quant mixes' and Q8_0 experts, the down kernel's settings (rule, 8
#              lanes, a warp, moe.cu's unit kernels) alternated twice (bench_cuda REPS decode;
#              DECODE_REPS, default 200)
#   bench-far  the 1-row expert call with far routes on Mixtral's and Qwen3-30B-A3B's experts: off, on
#              with none cold, one whole, one split; the gather sized by the SMs against one block a
#              chunk, alternated (bench_cuda FAR_REPS far; FAR_REPS default 50)
#   bench-attn attention on Qwen3-30B-A3B's heads (and 64 x 64, 16 x 256): decode rows as graphs,
#              prefill steps of 16 ... 2048 rows (bench_cuda ATTN_REPS attn; ATTN_REPS default 20)
#              -> $OUT/bench-attn.log
#   ncu-moe-dec    Nsight Compute durations of bench-decode's kernels
#   bench-prefill  grouped prefill experts, CUDA cores vs tensor cores, 32 ... 512 rows
#              (bench_cuda REPS prefill)
#   ncu-decode Nsight Compute of the all-GPU decode step's small kernels (NCU_KERNELS, NCU_SKIP,
#              NCU_COUNT) -> $OUT/ncu-decode.txt
#   ncu-mma    Nsight Compute sections of the tensor-core expert kernels at 64 and 512 rows
#   decode-ab  the all-resident decode step: plain, --ctx 4096, --route-replay, graphs off
#   nsys-decode  Nsight Systems timeline of 6 hybrid decode tokens (NSYS_PLACEMENT, default layers:48)
#              -> $OUT/nsys/*.csv (bench/hybrid_timeline.py reads them)
#   timeline   where a decode step's GPU wall time goes, kernel by kernel, graphs and PDL on
#              (bench/decode_timeline, CUPTI) per placement in TIMELINE_PLACEMENTS (default "gpu
#              layers:12 layers:48") -> $OUT/timeline.md
#   bench-cupti    collect --cupti's cost per step: CUPTI off / flush per step / flush at the end
#              (bench/cupti_overhead.c)
#   bench-analyze  moeplan analyze throughput and peak RSS (bench/bench_analyze.sh)
#   bench-sim      moeplan simulate decisions/s per policy (bench/bench_simulate.sh)
#   calibrate-tiny  moeplan calibrate on the tiny preset -> $OUT/costs-h200-tiny.json (the demo's)
#   calibrate  moeplan calibrate on the qwen3-30b-a3b preset (Q4_K_M) -> $OUT/costs-h200.json
#              (extra flags in CALIBRATE_ARGS, e.g. "--reps 9")
#   accuracy-matrix  simulated vs measured decode ms/token per shape x budget x policy: qwen3-30b-a3b
#              q4_k_m and q8_0, mixtral, olmoe, a 256-expert qwen3moe, flame with its real routing
#              (bench/accuracy_matrix.sh; MATRIX_SHAPES picks, MATRIX_REPS measured repetitions per
#              row, default 1; MATRIX_ROUNDS bench processes per row, alternated over the rows,
#              default 2: the host's read bandwidth moves between processes, which repetitions inside
#              one cannot average (Mixtral's table, 2026-12-04: 5 of 6 in one round, 6 of 6 in two);
#              MATRIX_BUDGETS for every shape; MATRIX_KEEP_MODELS=1 and MATRIX_REUSE_COSTS=1 with a
#              kept MP_GPU_WORK let a second call reuse a shape's model and costs)
#              -> $OUT/accuracy-matrix/matrix.md
#   busy-host  offloaded decode on the qwen3-30b-a3b preset with and without a neighbour taking host
#              memory bandwidth (bench/busy_host.sh: PLACEMENTS, LOADS "none d2h" (or cpuN, noneN,
#              d2h+cpuN), ARMS (e.g. "track fixed@MP_GPU_FAR_TRACK_US=0"), ROUNDS, TG, REPS;
#              COSTS default examples/costs-h200-qwen3-30b-a3b.json, COSTS= for none; BUSY_MODEL; the
#              CPU side alone under each load first, STREAM_LAYERS/STREAM_GAP_US/STREAM_ARGS, BUSY_STREAM=
#              for none)
#              -> $OUT/busy-host/busy-host.md
#   split-ab   split far routes against whole ones on the mixtral preset (top-2, 114 MB experts),
#              fill under 24/16/12 GB, alternated in one run (bench/split_ab.sh; its knobs: MODEL,
#              PRESET, QUANT, COSTS, CALIBRATE_ARGS, BUDGETS, PLACEMENTS, ROUNDS, REPS, TG; e.g.
#              PRESET=qwen3-30b-a3b PLACEMENTS="layers:24 layers:48" ARMS="split u1" for the rule's thirds
#              at top-8 against whole routes) -> $OUT/split-ab/, split-ab.log
#   adaptive-ab  the adaptive tier against the static profile at the same budget, alternated
#              (bench/adaptive_ab.sh; ADAPTIVE_SHAPE flame or drift, ADAPTIVE_BUDGETS, ADAPTIVE_POLICY,
#              ADAPTIVE_SLOTS, ADAPTIVE_ROUNDS, ADAPTIVE_REPS) -> $OUT/adaptive-ab/adaptive-ab.md
#   decode-check  the cost file's one-row decode model against bench, one factor at a time
#              (bench/decode_check.sh: the all-resident step, the decode grid's c = 0 and c = top_k
#              points, pools of two sizes, one hybrid layer first or last, with and without route
#              replay and step stamps) on DECODE_CHECK_PRESET (default flame; mixtral takes ~3 min
#              more), calibrated there (DECODE_CHECK_CALIBRATE_ARGS, default "--rows 1,2,4,16,64
#              --reps 3") unless DECODE_CHECK_COSTS; DECODE_CHECK_CONFIGS, DECODE_CHECK_ROUNDS,
#              DECODE_CHECK_REPS, DECODE_CHECK_N ("63 511": short and long tg)
#              -> $OUT/decode-check/decode-check.md
#   grid-vs-run  the CPU side of first-n-cpu decodes (layers:N, far routes on and off) against the
#              decode grid point that charges it (bench/grid_vs_run.sh; PRESET default olmoe, COSTS,
#              PLACEMENTS, ROUNDS) -> $OUT/grid-vs-run/, grid-vs-run.log
#   shape-sweep  the pipeline on small models of unusual shapes (top-1 and top-8, 12 and 40 experts,
#              FFN widths of 128 and 320, Q8_0, BF16, Q5_K_M, Q3_K_M): collect, calibrate --quick, plan with its
#              measured check, collect with an adaptive tier and analyze (bench/shape_sweep.sh;
#              SWEEP_SHAPES) -> $OUT/shape-sweep/shape-sweep.md
#   host-variance  the same decode in alternated processes, MP_POOL_PIN 0 and 1 (bench/host_variance.sh)
#              on an 8-layer Mixtral-shaped model (114 MB experts), 6 layers' experts on the CPU:
#              how much one process differs from the next (HV_ROUNDS, HV_PLACEMENT, HV_LAYERS)
#              -> $OUT/host-variance/host-variance.md
#   demo       scripts/demo.sh (the README's first command) with this build: calibrate measures the
#              GPU here, run and plan use the GPU executor -> $OUT/demo.log
#   sim-accuracy  simulated vs measured decode ms/token per budget and policy on the qwen3-30b-a3b
#              preset (bench/sim_accuracy.sh) -> $OUT/sim-accuracy.{md,json,log}; costs from
#              $OUT/costs-h200.json when the calibrate stage ran first, else
#              examples/costs-h200-qwen3-30b-a3b.json (or SIM_ACC_COSTS); SIM_ACC_BUDGETS,
#              SIM_ACC_POLICIES, SIM_ACC_NPROMPTS (default 2), SIM_ACC_REPS (default 1) size it;
#              SIM_ACC_EXECUTOR (default auto), SIM_ACC_MATCH (exact or budget, docs/simulator.md),
#              SIM_ACC_TRACE (a trace of the preset to replay instead of collecting one)
# Stages write their results and logs under a work folder ($OUT below: MP_GPU_WORK, default
# /tmp/mp-gpu); after every stage the files there under 8 MB (no models) are packed
# into RESULTS/gpu-results.tar.gz (RESULTS: the device tool's $OUT, or out/gpu/ when OUT is unset;
# gpu-results-NAME.tar.gz with MP_GPU_WORK=.../NAME), because the device tool brings back at most 8
# files. `tar -xzf gpu-results.tar.gz` unpacks them. An A/B in one call:
#   MP_GPU_WORK=/tmp/a bash scripts/gpu.sh bench-exec; MP_GPU_WORK=/tmp/b X=1 bash scripts/gpu.sh bench-exec
# A second invocation in one command on the device (OUT set) with the default work folder empties
# that folder (its files are in the first's tarball by then) and packs into gpu-results.2.tar.gz
# (then .3, ...): it never overwrites an earlier invocation's tarball (a local run, OUT unset,
# replaces out/gpu's). Files a later invocation needs (a cost file) belong outside the work folder.
set -uo pipefail
cd "$(dirname "$0")/.."
RESULTS=${OUT:-out/gpu}
on_device=${OUT:+1} # the device tool's $OUT starts empty on every call (a local out/gpu/ does not)
OUT=${MP_GPU_WORK:-/tmp/mp-gpu}
[ -n "${MP_GPU_WORK:-}" ] || rm -rf "$OUT" # the default work folder starts empty on every call
mkdir -p "$OUT" "$RESULTS" || exit 1
RESULTS=$(cd "$RESULTS" && pwd) # pack() writes it from inside the work folder
# pack: RESULTS/gpu-results.tar.gz from the work folder (gpu-results-NAME.tar.gz for a work
# folder NAME given in MP_GPU_WORK, so that two invocations in one call, e.g. an A/B with an
# environment variable, bring back both), written to a temporary name and renamed, so that a call
# cut short by its time limit still brings back every finished stage
TARBALL=gpu-results${MP_GPU_WORK:+-$(basename "$MP_GPU_WORK")}.tar.gz
n_tarball=1
while [ -n "$on_device" ] && [ -e "$RESULTS/$TARBALL" ]; do
    n_tarball=$((n_tarball + 1))
    TARBALL=gpu-results${MP_GPU_WORK:+-$(basename "$MP_GPU_WORK")}.$n_tarball.tar.gz
done
pack() {
    (cd "$MP_PACK_DIR" && find . -type f -size -8M ! -name '*.gguf' |
        tar -czf "$MP_PACK_RESULTS/.$MP_PACK_TARBALL" -T -) &&
        mv "$MP_PACK_RESULTS/.$MP_PACK_TARBALL" "$MP_PACK_RESULTS/$MP_PACK_TARBALL"
}
# exported, so that a long stage can pack as it goes (bench/gpu_bench.sh after every configuration):
# a call cut short by its time limit then still brings back the configurations that finished
export MP_PACK_DIR=$OUT MP_PACK_RESULTS=$RESULTS MP_PACK_TARBALL=$TARBALL
export -f pack
# no core files: a CUDA process's core takes minutes to write and looks like a hang
ulimit -c 0
stages=("$@")
[ ${#stages[@]} -gt 0 ] || stages=(tests bench-cpu)
log() { echo "[gpu.sh $(date +%H:%M:%S)] $*"; }

if [ -d .debs ]; then
    eval "$(bash tools/device-prefix.sh .debs /tmp/mp-prefix)"
fi
if [ -d .whl ]; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
        --target /tmp/mp-site .whl/*.whl && export PYTHONPATH=/tmp/mp-site
fi
export PATH="$PATH:/usr/local/cuda/bin"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>&1 | sed 's/^/gpu: /'
log "cpu: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2)"
# the host as this call found it, for runs that differ between machines of one kind: CPU topology
# (NUMA nodes, caches), memory free per node, transparent huge pages, load
{
    lscpu 2>&1
    for n in /sys/devices/system/node/node[0-9]*; do
        [ -d "$n" ] && echo "$(basename "$n"): cpus $(cat "$n/cpulist") $(grep -E 'MemTotal|MemFree' "$n/meminfo" | awk '{printf "%s %s kB ", $3, $4}')"
    done
    echo "thp enabled: $(cat /sys/kernel/mm/transparent_hugepage/enabled 2>&1); defrag: $(cat /sys/kernel/mm/transparent_hugepage/defrag 2>&1)"
    grep -E 'MemTotal|MemFree|MemAvailable|^Cached|Dirty|AnonHugePages|HugePages_Total' /proc/meminfo
    echo "load: $(cat /proc/loadavg)"
} >"$OUT/host.txt" 2>&1
log "host: $(grep -m1 -E '^NUMA node\(s\)' "$OUT/host.txt" | tr -s ' '), $(grep -c '^node' "$OUT/host.txt") node(s) listed, load $(cut -d' ' -f1-3 /proc/loadavg) (host.txt)"

build() {
    [ -f build-gpu/build.ninja ] || meson setup build-gpu -Dsm_arch=90 >"$OUT/setup.log" 2>&1 \
        || { tail -30 "$OUT/setup.log"; return 1; }
    # MP_GPU_TARGETS: only these ninja targets (e.g. cli/moeplan); moeplan's GPU side is the module
    # gpu/libmoeplan-gpu.so, which it loads only from its own build: built with it, always
    local targets=${MP_GPU_TARGETS:-}
    case " $targets " in
    *" cli/moeplan "*) targets="$targets gpu/libmoeplan-gpu.so" ;;
    esac
    # the stamp names the tree's content too where this copy's .git is older than its files
    # (base/git_commit.py --tree); an MP_BUILD_COMMIT given to the call wins. Exported: `meson test`
    # rebuilds its own targets (not the module moeplan loads), and a test binary or moeplan
    # stamped otherwise than the module refuses it ("the GPU module belongs to another build")
    MP_BUILD_COMMIT=${MP_BUILD_COMMIT:-$(python3 base/git_commit.py --tree .)}
    export MP_BUILD_COMMIT
    # shellcheck disable=SC2086
    ninja -C build-gpu $targets >"$OUT/build.log" 2>&1 || { tail -40 "$OUT/build.log"; return 1; }
    log "build: $MP_BUILD_COMMIT"
}

# the qwen3-30b-a3b preset in Q4_K_M, made once per machine (bench-cpu's bench/cpu_decode.sh and
# bench-exec's bench/gpu_bench.sh make the same file themselves)
MODEL30=/tmp/mp-bench/qwen3-30b-a3b-q4_k_m.gguf
ensure_model() {
    [ -f "$MODEL30" ] && return 0
    mkdir -p "$(dirname "$MODEL30")" || return 1
    log "mkmodel $MODEL30"
    build-gpu/cli/moeplan mkmodel --preset qwen3-30b-a3b --quant q4_k_m --quiet -o "$MODEL30"
}

# build_cpu DIR SRC NAME STAMP: moeplan of the source tree SRC built without CUDA in DIR (made afresh),
# its logs $OUT/NAME-setup.log and $OUT/NAME-build.log (their tails shown when it fails); STAMP: the
# build's stamp (MP_BUILD_COMMIT), empty for SRC's own (base/git_commit.py)
build_cpu() {
    local dir=$1 src=$2 name=$3 stamp=$4
    rm -rf "$dir"
    { meson setup "$dir" "$src" -Dcuda=disabled >"$OUT/$name-setup.log" 2>&1 &&
        env -u MP_BUILD_COMMIT ${stamp:+MP_BUILD_COMMIT=$stamp} ninja -C "$dir" cli/moeplan >"$OUT/$name-build.log" 2>&1; } ||
        { tail -20 "$OUT/$name-setup.log" "$OUT/$name-build.log" 2>/dev/null; return 1; }
}

# in_turn ROUND A B: "A B" in odd rounds, "B A" in even ones, so that each side of an A/B runs first in
# every other round (the side run first led by a median 1.061 against 0.997 on the development VM)
in_turn() {
    if [ $(($1 % 2)) = 0 ]; then echo "$3 $2"; else echo "$2 $3"; fi
}

# arm_run ARM CMD...: CMD under a bench arm's knob settings: "-" the environment as it is, else
# VAR=VALUE[,VAR=VALUE...] (cpu-routes' ROUTES_ARMS, cpu-part's PART_ARMS)
arm_run() {
    local arm=$1 settings=()
    shift
    [ "$arm" = - ] || IFS=, read -r -a settings <<<"$arm"
    env "${settings[@]}" "$@"
}

rc=0
for stage in "${stages[@]}"; do
    case "$stage" in
    tests)
        log "build + tests"
        build || { rc=1; continue; }
        # shellcheck disable=SC2046,SC2086
        meson test -C build-gpu --print-errorlogs --num-processes 4 \
            $([ "${MP_GPU_ALL_TESTS:-0}" = 1 ] || [ -n "${MP_GPU_TESTS:-}" ] || echo --suite gpu) ${MP_GPU_TESTS:-} \
            2>&1 | tee "$OUT/tests.log" | tail -25
        [ "${PIPESTATUS[0]}" = 0 ] || rc=1
        ;;
    hf-ref)
        mkdir -p "$OUT/hf"
        for a in qwen3moe qwen2moe olmoe mixtral gpt-oss; do python3 tools/hf_reference.py "$OUT/hf" "$a" || rc=1; done
        ;;
    bench-cpu)
        build || { rc=1; continue; }
        bash bench/cpu_decode.sh build-gpu/cli/moeplan 2>&1 | tee "$OUT/bench-cpu.log" || rc=1
        ;;
    bench-ab)
        build || { rc=1; continue; }
        base=${AB_BASE:-.base}
        [ -f "$base/meson.build" ] || { log "bench-ab: no source tree in $base"; rc=1; continue; }
        { [ -f "$base/build-gpu/build.ninja" ] || meson setup "$base/build-gpu" "$base" -Dsm_arch=90 >"$OUT/setup-base.log" 2>&1; } &&
            env -u MP_BUILD_COMMIT ninja -C "$base/build-gpu" cli/moeplan $([ -f "$base/gpu/meson.build" ] && echo gpu/libmoeplan-gpu.so) \
                >"$OUT/build-base.log" 2>&1 ||
            { tail -30 "$OUT/build-base.log" "$OUT/setup-base.log" 2>/dev/null; rc=1; continue; }
        for round in $(seq 1 "${AB_ROUNDS:-2}"); do
            for side in $(in_turn "$round" head base); do
                bin=build-gpu/cli/moeplan
                [ "$side" = base ] && bin=$base/build-gpu/cli/moeplan
                log "bench-ab: round $round, $side"
                bash bench/gpu_bench.sh "$bin" "$OUT/ab-$side-$round" 2>/dev/null | grep '^| [a-z]' | grep -v '^| config' |
                    sed "s/^| /| $side $round | /" | tee -a "$OUT/ab.md"
            done
        done
        ;;
    cpu-prefill-ab)
        bad=
        for v in "CPU_AB_LAYERS=${CPU_AB_LAYERS:-8}" "CPU_AB_ROUNDS=${CPU_AB_ROUNDS:-3}" $(printf 'CPU_AB_PP=%s ' ${CPU_AB_PP:-64}); do
            [[ "${v#*=}" =~ ^[1-9][0-9]{0,4}$ ]] || bad="$bad ${v%%=*} '${v#*=}'"
        done
        [ -z "$bad" ] || { log "cpu-prefill-ab:$bad: expected whole numbers 1..99999 (CPU_AB_PP: a list of them)"; rc=1; continue; }
        base_src=/tmp/mp-ab-base-src
        if [ -n "${AB_REV:-}" ]; then
            rm -rf "$base_src" && mkdir -p "$base_src" && git archive "$AB_REV" 2>/dev/null | tar -x -C "$base_src" 2>/dev/null ||
                { log "cpu-prefill-ab: AB_REV '$AB_REV': not a commit of this copy's git history"; rc=1; continue; }
        elif [ -f "${AB_BASE:-.base}/meson.build" ]; then
            base_src=$(cd "${AB_BASE:-.base}" && pwd)
        else
            log "cpu-prefill-ab: give AB_REV (a commit) or AB_BASE (a source tree with meson.build)"
            rc=1
            continue
        fi
        built=1
        for side in head base; do
            src=. stamp=${MP_BUILD_COMMIT:-}
            # the base is stamped as what it is, not as this tree (build() exports this tree's stamp)
            [ "$side" = base ] && src=$base_src stamp=${AB_REV:+base-$AB_REV}
            build_cpu "/tmp/mp-ab-$side-build" "$src" "cpu-ab-$side" "$stamp" || built=0
        done
        [ "$built" = 1 ] || { rc=1; pack; continue; }
        layers=${CPU_AB_LAYERS:-8}
        model=/tmp/mp-bench/qwen3-30b-a3b-q4_k_m-layers-$layers.gguf
        mkdir -p /tmp/mp-bench
        [ -f "$model" ] || /tmp/mp-ab-head-build/cli/moeplan mkmodel --preset qwen3-30b-a3b --quant q4_k_m \
            --layers "$layers" --quiet -o "$model" || { rc=1; continue; }
        echo "| prompt | round | head tok/s | base tok/s | head / base |" >"$OUT/cpu-ab.md"
        echo "|---|---:|---:|---:|---:|" >>"$OUT/cpu-ab.md"
        for round in $(seq 1 "${CPU_AB_ROUNDS:-3}"); do
            for p in ${CPU_AB_PP:-64 128 512}; do
                for side in $(in_turn "$round" head base); do
                    /tmp/mp-ab-$side-build/cli/moeplan bench -m "$model" --executor cpu -t "$(nproc)" -p "$p" -n 0 \
                        -r 3 -o json >"$OUT/cpu-ab-$side-pp$p-$round.json" 2>"$OUT/cpu-ab-$side-pp$p-$round.log" || rc=1
                done
                python3 - "$OUT" "$p" "$round" <<'PY' | tee -a "$OUT/cpu-ab.md"
import json, sys
out, p, r = sys.argv[1:4]
def tok(side):
    try:
        return json.load(open(f"{out}/cpu-ab-{side}-pp{p}-{r}.json"))["rows"][0]["median_tok_s"]
    except (OSError, ValueError, KeyError, IndexError):
        return None
h, b = tok("head"), tok("base")
cell = lambda v: f"{v:.2f}" if v else "-"
print(f"| pp{p} | {r} | {cell(h)} | {cell(b)} | {h / b:.3f} |" if h and b else f"| pp{p} | {r} | {cell(h)} | {cell(b)} | - |")
PY
            done
            pack # a call cut short keeps the rounds that finished
        done
        ;;
    amx-rows-ab)
        # a build without CUDA: calibrate's CPU parts alone (the GPU's grid is not what this times)
        build_cpu /tmp/mp-amx-build . amx-rows "${MP_BUILD_COMMIT:-}" || { rc=1; continue; }
        bash bench/amx_rows_ab.sh /tmp/mp-amx-build/cli/moeplan "$OUT/amx-rows-ab" 2>&1 | tee "$OUT/amx-rows-ab.log"
        [ "${PIPESTATUS[0]}" = 0 ] || rc=1
        ;;
    bench-exec)
        build || { rc=1; continue; }
        bash bench/gpu_bench.sh build-gpu/cli/moeplan "$OUT/bench-exec" 2>&1 | tee "$OUT/bench-exec.log" || rc=1
        ;;
    decode-table)
        build || { rc=1; continue; }
        ensure_model || { rc=1; continue; }
        mkdir -p "$OUT/decode-table"
        dt_costs=${COSTS:-/tmp/mp-bench/costs-here.json}
        if [ -z "${COSTS:-}" ]; then
            log "decode-table: calibrate ${TABLE_CALIBRATE_ARGS:---rows 1,2 --reps 3} -> $dt_costs"
            # shellcheck disable=SC2086
            build-gpu/cli/moeplan calibrate -m "$MODEL30" --out "$dt_costs" --force \
                ${TABLE_CALIBRATE_ARGS:---rows 1,2 --reps 3} >"$OUT/decode-table/calibrate.log" 2>&1 ||
                { log "decode-table: calibrate failed: $(tail -1 "$OUT/decode-table/calibrate.log")"; rc=1; continue; }
        fi
        cp "$dt_costs" "$OUT/decode-table/costs.json"
        pack
        COSTS=$dt_costs PP_ALL=0 PP=0 REPS=${REPS:-2} ROUNDS=${ROUNDS:-2} \
            CONFIGS="${TABLE_CONFIGS:-gpu ncpu12 ncpu24 ncpu36 ncpu48}" \
            bash bench/gpu_bench.sh build-gpu/cli/moeplan "$OUT/decode-table" 2>"$OUT/decode-table/bench.log" |
            tee "$OUT/decode-table/table.md" | grep '^|'
        [ "${PIPESTATUS[0]}" = 0 ] || rc=1
        ;;
    amx-ab)
        build || { rc=1; continue; }
        log "amx-ab: the kernel tests on this CPU"
        meson test -C build-gpu --print-errorlogs quant quant_amx_emul 2>&1 | tee "$OUT/amx-tests.log" | tail -6
        [ "${PIPESTATUS[0]}" = 0 ] || { log "amx-ab: the kernel tests failed: no benchmark"; rc=1; continue; }
        build-gpu/bench/bench_kernels --gemm 2,4,6,8,16,64 --mb 1 --type Q4_K --type Q6_K --type Q5_K --type Q8_0 --type Q4_0 --reps 5 \
            2>&1 | tee "$OUT/amx-gemm.log"
        ensure_model || { rc=1; continue; }
        for round in $(seq 1 "${AMX_ROUNDS:-2}"); do
            for isa in $(in_turn "$round" avx512 amx); do
                log "amx-ab: round $round, MP_ISA=$isa"
                MP_ISA=$isa build-gpu/cli/moeplan bench -m "$MODEL30" --executor cpu -t "$(nproc)" \
                    -p "${AMX_CPU_PP:-128}" -n 0 -r 2 -o json >"$OUT/amx-cpu-$isa-$round.json" 2>"$OUT/amx-cpu-$isa-$round.log" ||
                    rc=1
                MP_ISA=$isa CONFIGS="${AMX_CONFIGS:-ncpu48 fill8}" PP=512 TG=0 REPS=2 \
                    bash bench/gpu_bench.sh build-gpu/cli/moeplan "$OUT/amx-$isa-$round" 2>/dev/null |
                    grep '^| [a-z]' | grep -v '^| config' | sed "s/^| /| $isa $round | /" | tee -a "$OUT/amx-ab.md"
            done
        done
        ;;
    bench-gpu)
        build || { rc=1; continue; }
        build-gpu/bench/bench_cuda 50 2>&1 | tee "$OUT/bench-gpu.log" || rc=1
        ;;
    calibrate)
        build || { rc=1; continue; }
        ensure_model || { rc=1; continue; }
        model=$MODEL30
        log "calibrate $model"
        # shellcheck disable=SC2086
        build-gpu/cli/moeplan calibrate -m "$model" --out "$OUT/costs-h200.json" --force ${CALIBRATE_ARGS:-} \
            2>&1 | tee "$OUT/calibrate.log"
        [ "${PIPESTATUS[0]}" = 0 ] || rc=1
        ;;
    calibrate-tiny)
        # the demo's model: scripts/demo.sh simulates with this file where no GPU exists
        build || { rc=1; continue; }
        mkdir -p /tmp/mp-bench
        build-gpu/cli/moeplan mkmodel --preset tiny --quiet -o /tmp/mp-bench/tiny.gguf --force &&
            build-gpu/cli/moeplan calibrate -m /tmp/mp-bench/tiny.gguf --out "$OUT/costs-h200-tiny.json" \
                --force ${CALIBRATE_ARGS:-} 2>&1 | tail -3 || rc=1
        ;;
    bench-trace)
        build || { rc=1; continue; }
        [ -f "$MODEL30" ] || { echo "bench-trace: run bench-cpu first"; rc=1; continue; }
        build-gpu/bench/mp_trace_overhead "$MODEL30" --tokens 64 --rounds 3 \
            2>&1 | tee "$OUT/bench-trace.log" || rc=1
        ;;
    profile)
        build || { rc=1; continue; }
        ensure_model || { rc=1; continue; }
        model=$MODEL30
        for pl in ${PROFILE_PLACEMENTS:-gpu layers:24}; do
            log "profile --placement $pl"
            name=profile-${pl//:/}
            build-gpu/cli/moeplan collect -m "$model" --prompts bench/prompt-long.jsonl --raw-prompts \
                --trace "/tmp/$name.db" --force --no-progress --ctx 1024 --cupti --placement "$pl" 2>&1 | tail -3
            python3 bench/cupti_kernels.py "/tmp/$name.db" 30 | tee "$OUT/$name.md" || rc=1
        done
        ;;
    bench-pool)
        build || { rc=1; continue; }
        for t in 16 8; do build-gpu/bench/pool_overhead $t 3000; done 2>&1 | tee "$OUT/bench-pool.log" || rc=1
        ;;
    membw-pcie)
        # host memory read by the cores and by the GPU over PCIe, alone and side by side
        build || { rc=1; continue; }
        # shellcheck disable=SC2086
        build-gpu/bench/membw_pcie ${MEMBW_PCIE_ARGS:-} 2>&1 | tee "$OUT/membw-pcie.log" || rc=1
        ;;
    host-register)
        # which host mappings the executor can page-lock (bench/host_register_probe.sh)
        build || { rc=1; continue; }
        bash bench/host_register_probe.sh build-gpu/cli/moeplan "$OUT/host-register" || rc=1
        ;;
    bench-decode)
        build || { rc=1; continue; }
        build-gpu/bench/bench_cuda "${DECODE_REPS:-200}" decode 2>&1 | tee "$OUT/bench-decode.log" || rc=1
        ;;
    bench-far)
        build || { rc=1; continue; }
        build-gpu/bench/bench_cuda "${FAR_REPS:-50}" far 2>&1 | tee "$OUT/bench-far.log" || rc=1
        ;;
    bench-attn)
        build || { rc=1; continue; }
        build-gpu/bench/bench_cuda "${ATTN_REPS:-20}" attn 2>&1 | tee "$OUT/bench-attn.log" || rc=1
        ;;
    ncu-moe-dec)
        # Nsight Compute durations of the 1-row expert call's kernels (bench-decode: the pair kernels'
        # call, then the unit kernels' on Q8_0, twice: 6 replays of a 4-kernel call each, 24 launches)
        build || { rc=1; continue; }
        timeout 300 ncu --clock-control none --graph-profiling node --launch-count "${NCU_COUNT:-96}" \
            --section SpeedOfLight --section Occupancy --section LaunchStats \
            build-gpu/bench/bench_cuda 3 decode >"$OUT/ncu-moe-dec.txt" 2>&1 || rc=1
        grep -E '^  [a-zA-Z_].*\(|Duration|DRAM Throughput|Registers Per|Achieved Occupancy' "$OUT/ncu-moe-dec.txt" |
            sed -E 's/\(mpc_expert_t.*//; s/^ +//' | paste - - - - - | awk '{print}' | head -100
        ;;
    bench-prefill)
        # the grouped prefill experts at 32 ... 512 rows, CUDA cores against tensor cores
        build || { rc=1; continue; }
        build-gpu/bench/bench_cuda 20 prefill 2>&1 | tee "$OUT/bench-prefill.log" || rc=1
        ;;
    ncu-mma)
        # Nsight Compute on the tensor-core experts (gate/up and down, Q4_K/Q6_K) at 64 and 512 rows:
        # bench_cuda 5 prefill launches each tensor-core configuration 8 x 2 times, in the order
        # 32, 64, ..., 512 rows x (Q4_K, Q8_0): 64-row Q4_K third, 512-row Q4_K thirteenth
        build || { rc=1; continue; }
        for skip in 32 192; do
            timeout 240 ncu --clock-control none --kernel-name regex:'moe_mma2?_kernel' --launch-skip $skip \
                --launch-count 2 --section SpeedOfLight --section Occupancy --section LaunchStats \
                --section WarpStateStats --section SchedulerStats --section MemoryWorkloadAnalysis \
                build-gpu/bench/bench_cuda 5 prefill >"$OUT/ncu-mma-skip$skip.txt" 2>&1 || rc=1
            grep -E 'Duration|Registers|Achieved Occupancy|Theoretical Occupancy|Stall|Warp Cycles|Issued|Memory Throughput|Compute \(SM\)' \
                "$OUT/ncu-mma-skip$skip.txt" | head -40
        done
        ;;
    ncu-decode)
        # Nsight Compute on the all-GPU decode step's small kernels (norms, router, GEMVs, decode
        # experts) of the qwen3-30b-a3b preset: where a 2-5 us kernel waits (warp stall reasons)
        build || { rc=1; continue; }
        ensure_model || { rc=1; continue; }
        timeout 300 ncu --clock-control none --graph-profiling node \
            --kernel-name regex:"${NCU_KERNELS:-rmsnorm_quant|router_kernel|down_combine|gate_up_kernel|gemv_kernel}" \
            --launch-skip "${NCU_SKIP:-2000}" --launch-count "${NCU_COUNT:-12}" --section SpeedOfLight \
            --section LaunchStats --section Occupancy --section WarpStateStats --section SchedulerStats \
            build-gpu/cli/moeplan bench -m "$MODEL30" --placement gpu -p 0 -n 16 -r 1 \
            >"$OUT/ncu-decode.txt" 2>&1 || rc=1
        grep -E '^  [a-zA-Z_].*\(|Duration|Registers Per|Achieved Occupancy|Stall|Warp Cycles Per Issued|Memory Throughput' \
            "$OUT/ncu-decode.txt" | head -150
        ;;
    decode-ab)
        # the all-resident decode step as bench runs it, one factor changed at a time: the context
        # (--ctx), routes replayed from a trace (DECODE_AB_TRACE, a trace of the preset's geometry),
        # CUDA graphs off; tg128, 3 repetitions each
        build || { rc=1; continue; }
        ensure_model || { rc=1; continue; }
        mkdir -p "$OUT/decode-ab"
        trace=${DECODE_AB_TRACE:-.ab/trace-qwen3-30b-2prompts.db}
        for v in plain ctx4096 replay graphs0; do
            extra=(); envs=()
            case $v in
            ctx4096) extra=(--ctx 4096) ;;
            replay) extra=(--route-replay "$trace") ;;
            graphs0) envs=(MP_GPU_GRAPHS=0) ;;
            esac
            env "${envs[@]}" build-gpu/cli/moeplan bench -m "$MODEL30" --placement gpu -p 0 -n 128 -r 3 -t 16 \
                "${extra[@]}" -o json >"$OUT/decode-ab/$v.json" 2>"$OUT/decode-ab/$v.err" || rc=1
            python3 -c 'import json,sys; r=json.load(open(sys.argv[1]))["rows"][0]; print(sys.argv[2], "tg128", round(r["median_tok_s"],2), "tok/s", round(1000/r["median_tok_s"],4), "ms/token")' \
                "$OUT/decode-ab/$v.json" "$v" 2>&1 | tee -a "$OUT/decode-ab/summary.txt"
        done
        ;;
    nsys-decode)
        # Nsight Systems timeline of hybrid decode steps: the GPU's kernels and copies and the host's
        # CUDA calls, as CSV for bench/hybrid_timeline.py (NSYS_PLACEMENT, default layers:48; 6
        # tokens after a 1-token prompt, one repetition)
        build || { rc=1; continue; }
        ensure_model || { rc=1; continue; }
        mkdir -p "$OUT/nsys"
        nsys=$(command -v nsys || ls /usr/local/cuda/bin/nsys /opt/nvidia/nsight-systems/*/bin/nsys 2>/dev/null | head -1)
        if [ -z "$nsys" ]; then log "nsys-decode: no nsys on this machine"; rc=1; continue; fi
        timeout 300 "$nsys" profile -t cuda,osrt --cuda-graph-trace=node -o /tmp/mp-nsys -f true \
            build-gpu/cli/moeplan bench -m "$MODEL30" --placement "${NSYS_PLACEMENT:-layers:48}" -p 0 -n 6 -r 1 -t 16 \
            >"$OUT/nsys/profile.log" 2>&1 || rc=1
        for rep in cuda_gpu_trace cuda_api_trace; do
            "$nsys" stats --report $rep --format csv -o "$OUT/nsys/x" /tmp/mp-nsys.nsys-rep >>"$OUT/nsys/profile.log" 2>&1 || rc=1
        done
        ls -la "$OUT/nsys" | tail -5
        ;;
    timeline)
        # where a decode step's GPU wall time goes, kernel by kernel, as production runs it (graphs,
        # PDL, hybrid handoffs): bench/decode_timeline per placement in TIMELINE_PLACEMENTS
        build || { rc=1; continue; }
        ensure_model || { rc=1; continue; }
        for p in ${TIMELINE_PLACEMENTS:-gpu layers:12 layers:48}; do
            build-gpu/bench/decode_timeline -m "$MODEL30" --placement "$p" --tokens "${TIMELINE_TOKENS:-16}" \
                2>&1 | tee -a "$OUT/timeline.md" || rc=1
        done
        ;;
    bench-cupti)
        build || { rc=1; continue; }
        build-gpu/bench/bench_cupti 2>&1 | tee "$OUT/bench-cupti.log" || rc=1
        ;;
    bench-analyze)
        build || { rc=1; continue; }
        command -v /usr/bin/time >/dev/null || export TIME="$PWD/tools/gnutime.py"
        MOEPLAN=build-gpu/cli/moeplan GEN=build-gpu/bench/gen_routing_trace \
            bash bench/bench_analyze.sh ${ANALYZE_REQUESTS:-25 100} 2>&1 | tee "$OUT/bench-analyze.log" || rc=1
        ;;
    cpu-part)
        build || { rc=1; continue; }
        mx4=/tmp/mp-bench/mixtral-4layers.gguf
        mkdir -p /tmp/mp-bench
        [ -f "$mx4" ] || build-gpu/cli/moeplan mkmodel --preset mixtral --quant q4_k_m --layers 4 --quiet -o "$mx4" ||
            { rc=1; continue; }
        for part in ${PART_LIST:-6/8 4/8 2/8 1/8}; do
            for round in $(seq 1 "${PART_ROUNDS:-2}"); do
                for arm in ${PART_ARMS:--}; do
                    echo "cpu-part $part, round $round, arm $arm" | tee -a "$OUT/cpu-part.log"
                    arm_run "$arm" build-gpu/bench/moe_cpu_stream -m "$mx4" --layers 4 --tokens "${PART_TOKENS:-64}" \
                        --routes "${PART_ROUTES:-1}" --part "$part" "--${PART_COMPARE:-compare-part}" 2>&1 |
                        tee -a "$OUT/cpu-part.log" || rc=1
                done
            done
        done
        ;;
    cpu-stream)
        build || { rc=1; continue; }
        ensure_model || { rc=1; continue; }
        for round in $(seq "${STREAM_ROUNDS:-1}"); do
            for arm in ${STREAM_ARMS:--}; do
                for layers in ${STREAM_LAYERS:-12 48}; do
                    for gap in ${STREAM_GAPS:-0 50}; do
                        echo "cpu-stream: arm $arm, round $round, $layers layers, gap $gap us" | tee -a "$OUT/cpu-stream.log"
                        # shellcheck disable=SC2086 # STREAM_ARGS: extra flags, e.g. --compare
                        arm_run "$arm" build-gpu/bench/moe_cpu_stream -m "$MODEL30" --layers "$layers" --gap-us "$gap" \
                            --tokens "${STREAM_TOKENS:-16}" ${STREAM_ARGS:-} 2>&1 | tee -a "$OUT/cpu-stream.log" || rc=1
                    done
                done
            done
        done
        ;;
    cpu-routes)
        build || { rc=1; continue; }
        m256=/tmp/mp-bench/qwen3-256-4layers.gguf
        mkdir -p /tmp/mp-bench
        [ -f "$m256" ] || build-gpu/cli/moeplan mkmodel --preset qwen3-30b-a3b --layers 4 --experts 256 \
            --expert-ff 512 --quant q4_k_m --quiet -o "$m256" || { rc=1; continue; }
        # arms (arm_run), alternated in each round
        for round in $(seq "${ROUTES_ROUNDS:-1}"); do
            for arm in ${ROUTES_ARMS:--}; do
                for gap in ${ROUTES_GAPS:-0 25}; do
                    for r in ${ROUTES_LIST:-1 2 4 8}; do
                        echo "cpu-routes: arm $arm, round $round, gap $gap us, $r routes a call" | tee -a "$OUT/cpu-routes.log"
                        arm_run "$arm" build-gpu/bench/moe_cpu_stream -m "$m256" --layers 4 --tokens "${ROUTES_TOKENS:-64}" \
                            --routes "$r" --gap-us "$gap" --profile 2>&1 | tee -a "$OUT/cpu-routes.log" || rc=1
                    done
                done
            done
        done
        python3 - "$OUT/cpu-routes.log" <<'PY' | tee -a "$OUT/cpu-routes.log"
import re, statistics, sys
calls = {}  # (arm, gap) -> {routes: [median us of each round]}
key = None
for line in open(sys.argv[1]):
    m = re.match(r"cpu-routes: arm (\S+), round \d+, gap (\d+) us, (\d+) routes", line)
    if m:
        key = (m.group(1), int(m.group(2)), int(m.group(3)))
    m = re.search(r"per call median ([0-9.]+) us", line)
    if m and key and "whole routes" not in line:
        calls.setdefault(key[:2], {}).setdefault(key[2], []).append(float(m.group(1)))
for (arm, g), by_routes in sorted(calls.items()):
    pts = [(r, statistics.median(v)) for r, v in sorted(by_routes.items())]
    n = len(pts)
    if n < 2:
        continue
    mx, my = sum(x for x, _ in pts) / n, sum(y for _, y in pts) / n
    sxx = sum((x - mx) ** 2 for x, _ in pts)
    slope = sum((x - mx) * (y - my) for x, y in pts) / sxx if sxx else 0
    print("cpu-routes: arm %s, gap %d us: median call = %.1f us + %.1f us a route (%s; the median of %d rounds)" %
          (arm, g, my - slope * mx, slope, ", ".join("%d: %.1f" % p for p in pts), len(next(iter(by_routes.values())))))
PY
        ;;
    bench-sim)
        build || { rc=1; continue; }
        bash bench/bench_simulate.sh build-gpu 2>&1 | tee "$OUT/bench-sim.log" || rc=1
        ;;
    accuracy-matrix)
        # simulated vs measured decode across model shapes (bench/accuracy_matrix.sh; MATRIX_SHAPES,
        # MATRIX_POLICIES, MATRIX_CALIBRATE_ARGS), models under /tmp/mp-matrix, deleted after use
        build || { rc=1; continue; }
        MOEPLAN=build-gpu/cli/moeplan GEN=build-gpu/bench/gen_routing_trace OUT="$OUT/accuracy-matrix" \
            SHAPES="${MATRIX_SHAPES:-qwen3-q4 mixtral-q4 olmoe-q4 qwen3-256 flame qwen3-q8}" \
            POLICIES="${MATRIX_POLICIES:-first-n-cpu static-topn plan}" \
            CALIBRATE_ARGS="${MATRIX_CALIBRATE_ARGS:---rows 1,2,4,16,64 --reps 3}" REPS="${MATRIX_REPS:-1}" \
            ROUNDS="${MATRIX_ROUNDS:-2}" BUDGETS="${MATRIX_BUDGETS:-}" REUSE_COSTS="${MATRIX_REUSE_COSTS:-0}" \
            KEEP_MODELS="${MATRIX_KEEP_MODELS:-0}" bash bench/accuracy_matrix.sh 2>&1 | tee "$OUT/accuracy-matrix.log"
        [ "${PIPESTATUS[0]}" = 0 ] || rc=1
        ;;
    adaptive-ab)
        # the adaptive tier against the static profile at the same budget (bench/adaptive_ab.sh):
        # ADAPTIVE_SHAPE flame (FLAME-MoE's real routing, 8 sequences as one context) or drift (the
        # qwen3-30b-a3b preset, synthetic routing whose popularity drifts between 4 requests)
        build || { rc=1; continue; }
        aw=/tmp/mp-adaptive
        mkdir -p "$aw" "$OUT/adaptive-ab"
        case "${ADAPTIVE_SHAPE:-flame}" in
        flame)
            amk="--preset flame --quant q4_k_m"
            abud=${ADAPTIVE_BUDGETS:-f0.25 f0.5 f0.75}
            ;;
        drift)
            amk="--preset qwen3-30b-a3b --quant q4_k_m"
            abud=${ADAPTIVE_BUDGETS:-8GiB 12GiB 16GiB}
            ;;
        *) log "adaptive-ab: ADAPTIVE_SHAPE '${ADAPTIVE_SHAPE}': expected flame or drift"; rc=1; continue ;;
        esac
        amodel=$aw/${ADAPTIVE_SHAPE:-flame}.gguf
        # shellcheck disable=SC2086
        [ -f "$amodel" ] || build-gpu/cli/moeplan mkmodel $amk --quiet -o "$amodel" || { rc=1; continue; }
        read -r aL aE aK aEB <<<"$(build-gpu/cli/moeplan inspect --json "$amodel" | python3 -c 'import json,sys; d=json.load(sys.stdin); print(len(d["moe_layers"]), d["moe_layers"][0]["experts"], [x["value"] for x in d["metadata"] if x["key"].endswith(".expert_used_count")][0], d["moe_layers"][0]["bytes_per_expert"])')"
        atrace=$aw/trace.db
        rm -f "$atrace"
        if [ "${ADAPTIVE_SHAPE:-flame}" = flame ]; then
            python3 bench/flame_csv.py "$aw/flame.csv" && build-gpu/cli/moeplan import csv "$aw/flame.csv" \
                --trace "$atrace" --experts "$aE" >"$OUT/adaptive-ab/import.log" 2>&1 || { rc=1; continue; }
        else
            build-gpu/bench/gen_routing_trace "$atrace" 4 64 "$aL" "$aE" "$aK" 1 7 "$aEB" 1.0 "${ADAPTIVE_DRIFT:-0.5}" \
                >"$OUT/adaptive-ab/trace.log" 2>&1 || { rc=1; continue; }
        fi
        acosts=${ADAPTIVE_COSTS:-$aw/${ADAPTIVE_SHAPE:-flame}-costs.json}
        [ -f "$acosts" ] || build-gpu/cli/moeplan calibrate -m "$amodel" --out "$acosts" --force \
            ${ADAPTIVE_CALIBRATE_ARGS:---rows 1,2,4 --reps 3} >"$OUT/adaptive-ab/calibrate.log" 2>&1 || { rc=1; continue; }
        cp "$acosts" "$OUT/adaptive-ab/costs.json"
        MOEPLAN=build-gpu/cli/moeplan MODEL="$amodel" COSTS="$acosts" TRACE="$atrace" BUDGETS="$abud" \
            POLICY="${ADAPTIVE_POLICY:-cost}" SLOTS="${ADAPTIVE_SLOTS:-10%}" ROUNDS="${ADAPTIVE_ROUNDS:-2}" \
            REPS="${ADAPTIVE_REPS:-3}" OUT="$OUT/adaptive-ab" bash bench/adaptive_ab.sh 2>&1 | tee "$OUT/adaptive-ab.log"
        [ "${PIPESTATUS[0]}" = 0 ] || rc=1
        ;;
    decode-check)
        build || { rc=1; continue; }
        read -r dc_short dc_long <<<"${DECODE_CHECK_N:-63 511}"
        MOEPLAN=build-gpu/cli/moeplan PRESET="${DECODE_CHECK_PRESET:-flame}" COSTS="${DECODE_CHECK_COSTS:-}" \
            CALIBRATE_ARGS="${DECODE_CHECK_CALIBRATE_ARGS:-}" CONFIGS="${DECODE_CHECK_CONFIGS:-}" \
            ROUNDS="${DECODE_CHECK_ROUNDS:-1}" REPS="${DECODE_CHECK_REPS:-3}" \
            N_SHORT="$dc_short" N_LONG="$dc_long" WORK=/tmp/mp-decode-check OUT="$OUT/decode-check" \
            bash bench/decode_check.sh 2>&1 | tee "$OUT/decode-check.log"
        [ "${PIPESTATUS[0]}" = 0 ] || rc=1
        rm -f /tmp/mp-decode-check/*.gguf # tens of GB for the large presets
        ;;
    host-variance)
        build || { rc=1; continue; }
        hv_model=/tmp/mp-hv/mixtral-${HV_LAYERS:-8}.gguf
        mkdir -p /tmp/mp-hv
        [ -f "$hv_model" ] || build-gpu/cli/moeplan mkmodel --preset mixtral --layers "${HV_LAYERS:-8}" --quant q4_k_m \
            --quiet -o "$hv_model" || { rc=1; continue; }
        MOEPLAN=build-gpu/cli/moeplan MODEL="$hv_model" PLACEMENT="${HV_PLACEMENT:---placement layers:6}" \
            ROUNDS="${HV_ROUNDS:-4}" OUT="$OUT/host-variance" bash bench/host_variance.sh 2>&1 | tee "$OUT/host-variance.log"
        [ "${PIPESTATUS[0]}" = 0 ] || rc=1
        ;;
    busy-host)
        build || { rc=1; continue; }
        ensure_model || { rc=1; continue; }
        MOEPLAN=build-gpu/cli/moeplan HOST_LOAD=build-gpu/bench/host_load MEMBW=build-gpu/bench/mp_membw \
            STREAM=${BUSY_STREAM-build-gpu/bench/moe_cpu_stream} \
            MODEL="${BUSY_MODEL:-$MODEL30}" COSTS="${COSTS-examples/costs-h200-qwen3-30b-a3b.json}" \
            OUT="$OUT/busy-host" bash bench/busy_host.sh 2>&1 | tee "$OUT/busy-host.log"
        [ "${PIPESTATUS[0]}" = 0 ] || rc=1
        ;;
    split-ab)
        build || { rc=1; continue; }
        bash bench/split_ab.sh build-gpu/cli/moeplan "$OUT/split-ab" 2>&1 | tee "$OUT/split-ab.log"
        [ "${PIPESTATUS[0]}" = 0 ] || rc=1
        rm -f "$OUT"/split-ab/*.gguf
        ;;
    grid-vs-run)
        build || { rc=1; continue; }
        bash bench/grid_vs_run.sh build-gpu/cli/moeplan "$OUT/grid-vs-run" 2>&1 | tee "$OUT/grid-vs-run.log"
        [ "${PIPESTATUS[0]}" = 0 ] || rc=1
        ;;
    shape-sweep)
        build || { rc=1; continue; }
        MOEPLAN=build-gpu/cli/moeplan OUT="$OUT/shape-sweep" SHAPES="${SWEEP_SHAPES:-}" \
            bash bench/shape_sweep.sh 2>&1 | tee "$OUT/shape-sweep.log"
        [ "${PIPESTATUS[0]}" = 0 ] || rc=1
        rm -f "$OUT"/shape-sweep/s*/*.gguf
        ;;
    demo)
        build || { rc=1; continue; }
        DEMO_BUILD=build-gpu bash scripts/demo.sh 2>&1 | tee "$OUT/demo.log" | tail -30
        [ "${PIPESTATUS[0]}" = 0 ] || rc=1
        ;;
    sim-accuracy)
        build || { rc=1; continue; }
        ensure_model || { rc=1; continue; }
        model=$MODEL30
        costs=${SIM_ACC_COSTS:-}
        [ -n "$costs" ] || { [ -f "$OUT/costs-h200.json" ] && costs=$OUT/costs-h200.json; } ||
            costs=examples/costs-h200-qwen3-30b-a3b.json
        log "sim-accuracy $model with $costs"
        MOEPLAN=build-gpu/cli/moeplan MODEL="$model" COSTS="$costs" OUT="$OUT/sim-accuracy" \
            BUDGETS="${SIM_ACC_BUDGETS:-8GiB 12GiB 16GiB 24GiB}" \
            POLICIES="${SIM_ACC_POLICIES:-static-topn static-equal first-n-cpu best-layers plan}" \
            NPROMPTS="${SIM_ACC_NPROMPTS:-2}" REPS="${SIM_ACC_REPS:-1}" \
            EXECUTOR="${SIM_ACC_EXECUTOR:-auto}" MATCH="${SIM_ACC_MATCH:-exact}" TRACE="${SIM_ACC_TRACE:-}" \
            bash bench/sim_accuracy.sh 2>&1 | tee "$OUT/sim-accuracy.log"
        [ "${PIPESTATUS[0]}" = 0 ] || rc=1
        for f in sim-accuracy.md sim-accuracy.json; do
            [ -f "$OUT/sim-accuracy/$f" ] && cp "$OUT/sim-accuracy/$f" "$OUT/$f"
        done
        ;;
    *)
        echo "gpu.sh: unknown stage '$stage' (tests, hf-ref, bench-cpu, bench-gpu, bench-prefill, ncu-mma, ncu-decode, decode-ab, timeline, nsys-decode, bench-exec, decode-table, bench-ab, cpu-prefill-ab, amx-rows-ab, amx-ab, profile, cpu-part, cpu-stream, bench-pool, membw-pcie, host-register, bench-trace, bench-cupti, bench-analyze, bench-sim, calibrate, calibrate-tiny, accuracy-matrix, adaptive-ab, decode-check, demo, sim-accuracy, grid-vs-run, cpu-routes)" >&2
        exit 2
        ;;
    esac
    pack
done
exit $rc
