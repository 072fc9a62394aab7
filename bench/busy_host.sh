#!/usr/bin/env bash
# bench/busy_host.sh — offloaded decode on a quiet host and on a busy one, side by side in one run.
#
# The host's read bandwidth is shared with other tenants and drifts (59-180 GB/s seen on the H200
# machines). A decode whose CPU side holds its share of the bound only while the host is quiet
# collapses on a busy one. This runs each placement with and without a neighbour that takes host
# memory bandwidth (bench/host_load.cu), alternating, and reports each row's tok/s, the host read
# bandwidth bench probed beside it (the neighbour running), the CPU experts' GB/s and the shares of
# the host+bus and serial bounds (docs/bench.md).
#
#   MODEL=m.gguf [MOEPLAN=build/cli/moeplan] [HOST_LOAD=build/bench/host_load] [COSTS=c.json]
#   [PLACEMENTS="layers:12 layers:24 layers:48"] [LOADS="none d2h"] [ARMS=default] [ROUNDS=2] [TG=128] [REPS=2]
#   [OUT=out/busy-host] [MEMBW=build/bench/mp_membw: probe the host under each load first]
#   [STREAM=build/bench/moe_cpu_stream [STREAM_LAYERS=48] [STREAM_GAP_US=50] [STREAM_ARGS=...]: the
#   CPU side alone under each load first] bash bench/busy_host.sh
#
# LOADS: none (a quiet host), d2h (the GPU's copy engine writes host memory: takes no core),
# cpuN (N reader threads on the host's last N CPUs; moeplan then runs with the other CPUs' count of
# threads, on the first CPUs, so pair it with noneN: a quiet host, moeplan on the same CPUs), wrN
# (N writer threads there, non-temporal stores: more of the memory per core than readers, and the
# GPU's link left alone, where d2h writes through it), or parts joined by '+' (d2h+cpu2: both
# neighbours at once, for a host that reads less still; cpu2+wr2). Each
# round starts one load later, so that over as many rounds as loads each runs once in each position.
#
# ARMS: the settings each placement and load runs under, alternated: NAME (as the environment is) or
# NAME@VAR=VALUE (a knob, base/knobs.h), e.g. ARMS="unit segment@MP_GPU_PART_BY_UNIT=0". The table
# gives each row's arm, and a last table each arm's tok/s over the first's, load by load.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1

MOEPLAN=${MOEPLAN:-build/cli/moeplan}
HOST_LOAD=${HOST_LOAD:-build/bench/host_load}
PLACEMENTS=${PLACEMENTS:-layers:12 layers:24 layers:48}
LOADS=${LOADS:-none d2h}
ROUNDS=${ROUNDS:-2}
TG=${TG:-128}
REPS=${REPS:-2}
OUT=${OUT:-out/busy-host}
die() { echo "busy_host: error: $*" >&2; exit 1; }
log() { echo "[busy_host $(date +%H:%M:%S)] $*" >&2; }
[ -x "$MOEPLAN" ] || die "moeplan binary '$MOEPLAN' not found (build first, or set MOEPLAN)"
{ [ -n "${MODEL:-}" ] && [ -f "$MODEL" ]; } || die "MODEL: expected an existing GGUF file (got '${MODEL:-}')"
[[ "$ROUNDS" =~ ^[1-9][0-9]*$ ]] || die "ROUNDS '$ROUNDS': expected a positive integer"
[ -z "${COSTS:-}" ] || [ -f "$COSTS" ] || die "COSTS '$COSTS': no such file"
ncpu=$(nproc)
read -ra loads <<<"$LOADS"
read -ra arms <<<"${ARMS:-default}"
for a in "${arms[@]}"; do
    [[ $a =~ ^[A-Za-z0-9_-]+(@[A-Z][A-Z0-9_]*=[^@[:space:]]*)?$ ]] ||
        die "ARMS '$a': expected NAME or NAME@VAR=VALUE"
done
arm_env() { [[ $1 != *@* ]] || echo "${1#*@}"; } # the arm's VAR=VALUE, or nothing
arm_name() { echo "${1%%@*}"; }
[ "$(for a in "${arms[@]}"; do arm_name "$a"; done | sort | uniq -d)" = "" ] ||
    die "ARMS '${arms[*]}': expected each arm's NAME once"
loaded() { [[ $1 != none* ]]; } # a load with a neighbour running
threads_for() { # moeplan's threads under a load: its cpuN and wrN parts, or noneN, leave N CPUs out
    local n=0 part
    if [[ $1 == none* ]]; then
        n=${1#none}
    else
        local IFS=+
        for part in $1; do
            [[ $part != cpu* ]] || n=$((n + ${part#cpu}))
            [[ $part != wr* ]] || n=$((n + ${part#wr}))
        done
    fi
    echo $((ncpu - ${n:-0}))
}
for l in "${loads[@]}"; do
    case $l in
    none | none[1-9] | none[1-9][0-9]) ;;
    *)
        [[ $l != +* && $l != *+ && $l != *++* ]] || die "LOADS '$l': an empty part"
        IFS=+ read -ra parts <<<"$l"
        for part in "${parts[@]}"; do
            [[ $part =~ ^(d2h|cpu[1-9][0-9]?|wr[1-9][0-9]?)$ ]] ||
                die "LOADS '$l': expected none, noneN, or d2h, cpuN and wrN joined by '+'"
        done
        [ -x "$HOST_LOAD" ] || die "host_load binary '$HOST_LOAD' not found (built with CUDA)" ;;
    esac
    [ "$(threads_for "$l")" -ge 1 ] || die "LOADS '$l': expected fewer than this host's $ncpu CPUs"
done
mkdir -p "$OUT/bench" || die "cannot create $OUT"

on_cpus() { # on_cpus T CMD...: CMD on the host's first T CPUs (all of them: as it is)
    local t=$1
    shift
    if [ "$t" -lt "$ncpu" ]; then taskset -c "0-$((t - 1))" "$@"; else "$@"; fi
}
load_pids=()
start_load() { # start_load LOAD TAG: the neighbours of LOAD's parts, running when this returns
    local tag=$2 part i=0 n_cpu=0 parts
    IFS=+ read -ra parts <<<"$1"
    rm -f "$OUT/bench/$tag".ready.* "$OUT/bench/$tag.load"
    for part in "${parts[@]}"; do
        i=$((i + 1))
        if [ "$part" = d2h ]; then
            "$HOST_LOAD" --mode d2h --ready "$OUT/bench/$tag.ready.$i" 2>>"$OUT/bench/$tag.load" &
        else # cpuN and wrN parts take the last CPUs, one part after another
            local mode=${part%%[0-9]*} n=${part##*[a-z]}
            "$HOST_LOAD" --mode "$mode" --threads "$n" --skip "$n_cpu" --gib 4 --ready "$OUT/bench/$tag.ready.$i" \
                2>>"$OUT/bench/$tag.load" &
            n_cpu=$((n_cpu + n))
        fi
        load_pids+=($!)
    done
    for _ in $(seq 1 300); do
        local up=0 pid
        for pid in "${load_pids[@]}"; do
            kill -0 "$pid" 2>/dev/null || die "host_load ($tag) stopped: $(tail -n 1 "$OUT/bench/$tag.load")"
        done
        for i in $(seq 1 ${#parts[@]}); do [ ! -f "$OUT/bench/$tag.ready.$i" ] || up=$((up + 1)); done
        [ "$up" -lt ${#parts[@]} ] || return 0
        sleep 0.1
    done
    die "host_load ($tag) not running after 30 s"
}
stop_load() {
    [ ${#load_pids[@]} -gt 0 ] || return 0
    kill -TERM "${load_pids[@]}" 2>/dev/null
    wait "${load_pids[@]}" 2>/dev/null
    load_pids=()
}
trap stop_load EXIT

# what the host reads under each load, before the rows: MEMBW's probe (the one bench takes beside
# a row), with the cores moeplan would run on
if [ -x "${MEMBW:-}" ]; then
    : >"$OUT/probes.md"
    for l in "${loads[@]}"; do
        threads=$(threads_for "$l")
        ! loaded "$l" || start_load "$l" "probe-$l"
        echo "| $l | $threads | $(on_cpus "$threads" "$MEMBW" --threads "$threads" --reps 5 2>&1 | tail -n 1) |" >>"$OUT/probes.md"
        stop_load
        [ ! -f "$OUT/bench/probe-$l.load" ] || echo "|   | load | $(tr '\n' ' ' <"$OUT/bench/probe-$l.load") |" >>"$OUT/probes.md"
    done
    cat "$OUT/probes.md" >&2
fi
# the CPU side alone under each load (bench/moe_cpu_stream: one-row expert calls over STREAM_LAYERS
# layers' host copy, STREAM_GAP_US of spinning after each, no GPU in the loop), beside the probes
if [ -x "${STREAM:-}" ]; then
    for l in "${loads[@]}"; do
        threads=$(threads_for "$l")
        ! loaded "$l" || start_load "$l" "stream-$l"
        # shellcheck disable=SC2086 # STREAM_ARGS: more flags, e.g. --profile
        on_cpus "$threads" "$STREAM" -m "$MODEL" --layers "${STREAM_LAYERS:-48}" --gap-us "${STREAM_GAP_US:-50}" \
            --threads "$threads" ${STREAM_ARGS:-} >"$OUT/stream-$l.txt" 2>&1 || die "moe_cpu_stream ($l): $(tail -n 1 "$OUT/stream-$l.txt")"
        stop_load
        echo "stream, load $l, $threads threads:" >&2
        grep -v '^moe_cpu_stream: copying' "$OUT/stream-$l.txt" >&2
    done
fi

n_loads=${#loads[@]}
for round in $(seq 1 "$ROUNDS"); do
    for p in $PLACEMENTS; do
        for k in $(seq 0 $((n_loads - 1))); do
            l=${loads[$(((k + round - 1) % n_loads))]}
            threads=$(threads_for "$l")
            n_arms=${#arms[@]}
            for j in $(seq 0 $((n_arms - 1))); do # each round starts one arm later, as the loads
                a=${arms[$(((j + round - 1) % n_arms))]}
                tag=${p//:/}-$l-$(arm_name "$a")-$round
                ! loaded "$l" || start_load "$l" "$tag"
                log "round $round, $p, load $l, arm $a, $threads threads"
                # shellcheck disable=SC2086,SC2046 # COSTS is one path or nothing; the arm's VAR=VALUE or nothing
                on_cpus "$threads" env $(arm_env "$a") "$MOEPLAN" bench -m "$MODEL" --placement "$p" \
                    ${COSTS:+--costs "$COSTS"} -t "$threads" -p 0 -n "$TG" -r "$REPS" -o json \
                    >"$OUT/bench/$tag.json" 2>"$OUT/bench/$tag.log" ||
                    { stop_load; die "bench ($tag): $(tail -n 1 "$OUT/bench/$tag.log")"; }
                stop_load
            done
        done
    done
    command -v pack >/dev/null && pack # scripts/gpu.sh: bring back what finished
done

arm_names=""
for a in "${arms[@]}"; do arm_names+="$(arm_name "$a") "; done
MP_BENCH_DIR=$PWD/bench python3 - "$OUT" "$ROUNDS" "$PLACEMENTS" "$LOADS" "$arm_names" >"$OUT/busy-host.md" <<'EOF' || die "the table failed"
import json, os, re, statistics, sys
sys.path.insert(0, os.environ["MP_BENCH_DIR"])
from bench_sides import sides
out, rounds, placements, loads = sys.argv[1], int(sys.argv[2]), sys.argv[3].split(), sys.argv[4].split()
arms = sys.argv[5].split()
def row(p, l, a, r):
    tag = f"{p.replace(':', '')}-{l}-{a}-{r}"
    with open(f"{out}/bench/{tag}.json") as f:
        x = json.load(f)["rows"][0]
    load = "-"
    try:
        with open(f"{out}/bench/{tag}.load") as f:
            rates = [float(r) for r in re.findall(r"([0-9.]+) GB/s", f.read())]
            load = f"{sum(rates):.1f}" if rates else "-"
    except OSError:
        pass
    return x, load
print("| placement | load | arm | round | threads | tok/s | load GB/s | host GB/s | host+bus GB/s | CPU experts GB/s | share of host+bus bound | share of serial bound | GPU / CPU side us (GPU led) | routes gpu/cpu/far/split |")
print("|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|")
med = {}
for p in placements:
    for l in loads:
        for a in arms:
            for r in range(1, rounds + 1):
                x, load = row(p, l, a, r)
                b = x.get("bound") or {}
                f = lambda v, d=1: f"{v:.{d}f}" if isinstance(v, (int, float)) else "-"
                routes = "/".join(str(x.get(k, 0)) for k in ("routes_gpu", "routes_cpu", "routes_far", "routes_split"))
                print(f"| {p} | {l} | {a} | {r} | {x['threads']} | {x['median_tok_s']:.2f} | {load} "
                      f"| {f(b.get('host_read_gbs'))} | {f(b.get('hostbus_gbs'))} | {f(x.get('cpu_expert_gbs'))} "
                      f"| {f(b.get('share_of_hostbus_bound'), 2)} | {f(b.get('share_of_serial_bound'), 2)} | {sides(x)} | {routes} |")
                med.setdefault((p, l, a), []).append(x["median_tok_s"])
print()
cols = [(l, a) for l in loads for a in arms]
name = lambda l, a: l if len(arms) == 1 else f"{l} {a}"
print("| placement | " + " | ".join(f"{name(l, a)} tok/s" for l, a in cols) + " | " +
      " | ".join(f"{name(l, a)} / {name(*cols[0])}" for l, a in cols[1:]) + " |")
print("|---|" + "---:|" * (2 * len(cols) - 1))
for p in placements:
    m = [statistics.median(med[(p, l, a)]) for l, a in cols]
    print(f"| {p} | " + " | ".join(f"{v:.2f}" for v in m) + " | " + " | ".join(f"{v / m[0]:.3f}" for v in m[1:]) + " |")
if len(arms) > 1: # each arm against the first, load by load
    print()
    print("| placement | load | " + " | ".join(f"{a} / {arms[0]}" for a in arms[1:]) + " |")
    print("|---|---|" + "---:|" * (len(arms) - 1))
    for p in placements:
        for l in loads:
            b0 = statistics.median(med[(p, l, arms[0])])
            print(f"| {p} | {l} | " + " | ".join(f"{statistics.median(med[(p, l, a)]) / b0:.3f}" for a in arms[1:]) + " |")
EOF
cat "$OUT/busy-host.md"
