/* runtime/cmd_bench.c — `moeplan bench`: prompt-processing and token-generation throughput.
 *
 * For each size in -p (pp N: one prefill of N ids from an empty cache) and -n (tg N: N decode steps
 * after a 1-token prompt), runs one warm-up and R timed repetitions (runtime/bench.h) and prints one
 * row per test: median, min, max and stddev in tok/s, with the model (file, size, arch, expert quant
 * types), threads, ISA, the placement and GPU budget, and the executor that actually ran. Markdown
 * by default, JSON (docs/bench.md) with -o json. Output goes to stdout only once every test has
 * finished (nothing half-printed on a failure); progress goes to stderr.
 *
 * Executor: chosen as `run` chooses it (runtime/executor.h). GPU rows carry what ran where: the
 * share of routes served by resident experts, by the CPU and by prefill weight copies, and for
 * hybrid decode the measured round trip per MoE layer (GPU gap minus CPU expert time). CPU rows
 * say executor "cpu" and, with placement flags, that the placement was only checked.
 *
 * Route replay (--route-replay TRACE): the tests' routing comes from a recorded trace instead of
 * the router, through the function table the CLI passes to mp_cmd_bench_with (the runtime never
 * links the trace reader), exactly as `run` does; every run (warm-up or repetition) replays from
 * the trace's first row (wrapping at its end), so the repetitions measure the same work. Rows name
 * the trace and the replay's summary.
 *
 * Every numeric flag is parsed strictly (whole string, range-checked); bad flags exit 2 with one
 * line, any other failure exits 1.
 */
#include <cjson/cJSON.h>
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/args.h"
#include "runtime/commands.h"
#include "runtime/decide.h"
#include "kernels/quant.h"
#include "runtime/bench.h"
#include "base/build_info.h"
#include "gguf/gguf.h"
#include "runtime/model.h"
#include "runtime/engine.h"
#include "runtime/gpu.h"
#include "runtime/placement.h"
#include "runtime/session.h"
#include "base/numparse.h"
#include "runtime/knobs_apply.h"

#define MAX_SIZES 32
#define MAX_REPS 1000
#define MAX_TEST_TOKENS ((int64_t)1 << 20)

static void usage(FILE *f)
{
    fprintf(f,
            "usage: moeplan bench -m MODEL [options]\n"
            "\n"
            "Measure prompt processing (pp N: one prefill of N tokens from an empty cache) and\n"
            "token generation (tg N: N decode steps after a 1-token prompt) in tokens/second.\n"
            "Each test runs once to warm up, then R times; rows give the median, min, max and\n"
            "standard deviation. Token ids are random but fixed by --seed.\n"
            "\n"
            "  -m, --model PATH     GGUF model file\n"
            "  -p, --n-prompt LIST  prompt sizes, comma-separated (default 512; 0: no pp tests)\n"
            "  -n, --n-gen LIST     generation sizes, comma-separated (default 128; 0: no tg tests)\n"
            "  -r, --repetitions R  timed repetitions per test (default 5, 1..1000)\n"
            "  -t, --threads N      CPU threads (default: the CPUs this process may use, 1..1024)\n"
            "  -c, --ctx-size, --ctx N  context length (default: the largest test's need, at\n"
            "                       least 32; a test longer than the model's trained context\n"
            "                       needs it)\n"
            "  -s, --seed S         seed of the token ids (default 0, unsigned 64-bit)\n"
            "      --no-simd        use the scalar reference kernels (as MP_ISA=scalar)\n"
            "      --route-replay TRACE  take every layer's expert choices from a trace of a model\n"
            "                       with the same layers, experts and top-k, each run from its\n"
            "                       first row (docs/bench.md)\n"
            "  -o, --output FMT     the format of stdout: md (default) or json (as llama-bench's\n"
            "                       -o; bench writes no file)\n"
            "      --dry-run        plan the executor and the placement against the budget for\n"
            "                       these tests, print the plan and exit: nothing runs (exit 1\n"
            "                       with the reason when it does not fit)\n"
            "%s"
            MP_CLI_NGL_HELP
            "  -h, --help           show this help\n"
            "\n"
            "Results go to stdout after the last test; progress goes to stderr. Rows name the\n"
            "executor that ran (gpu or cpu), the placement and budget, and for GPU rows the share\n"
            "of routes run on the GPU, on the CPU and by weight copies, the measured CPU round\n"
            "trip per hybrid MoE layer, and for decode rows with hybrid layers the bound:\n"
            "max(GPU part, CPU experts' bytes / host read bandwidth) plus the round trips, the\n"
            "bandwidth the larger of two probes, before and after the tests. Output format:\n"
            "docs/bench.md.\n", mp_placement_flags_help);
}

static int usage_error(const char *fmt, const char *a, const char *b)
{
    fprintf(stderr, "moeplan bench: error: ");
    fprintf(stderr, fmt, a, b);
    fprintf(stderr, " (see moeplan bench --help)\n");
    return 2;
}

/* "512,2048" → sizes; "0" alone means none. Each size 1..MAX_TEST_TOKENS, no empty items. */
static bool parse_list(const char *s, int64_t *sizes, int *n)
{
    *n = 0;
    if (!strcmp(s, "0"))
        return true;
    char buf[512];
    if (strlen(s) >= sizeof buf || !*s)
        return false;
    strcpy(buf, s);
    char *p = buf;
    for (;;) {
        char *comma = strchr(p, ',');
        if (comma)
            *comma = '\0';
        if (*n == MAX_SIZES || !mp_parse_i64(p, 1, MAX_TEST_TOKENS, &sizes[*n]))
            return false;
        (*n)++;
        if (!comma)
            return true;
        p = comma + 1;
    }
}

typedef struct bench_opts {
    const char *model;
    int64_t pp[MAX_SIZES], tg[MAX_SIZES];
    int n_pp, n_tg;
    int64_t reps, threads, ctx;
    uint64_t seed;
    bool json, no_simd, dry_run;
    mp_placement_opts pl;
    const char *route_replay; /* --route-replay TRACE, NULL: the router decides */
} bench_opts;

enum { OPT_CTX = 256, OPT_NO_SIMD, OPT_DRY_RUN, OPT_ROUTE_REPLAY, OPT_PLACEMENT, OPT_NGL };

static const mp_cli_opt bench_flags[] = {
    {"model", 'm', true, 'm', NULL},
    {"n-prompt", 'p', true, 'p', NULL},
    {"n-gen", 'n', true, 'n', NULL},
    {"repetitions", 'r', true, 'r', NULL},
    {"threads", 't', true, 't', NULL},
    {"ctx-size", 'c', true, 'c', NULL},
    {"ctx", 0, true, 'c', NULL},
    {"seed", 's', true, 's', NULL},
    {"no-simd", 0, false, OPT_NO_SIMD, NULL},
    {"route-replay", 0, true, OPT_ROUTE_REPLAY, NULL},
    {"output", 'o', true, 'o', NULL},
    {"dry-run", 0, false, OPT_DRY_RUN, NULL},
    MP_CLI_PLACEMENT_OPTS(OPT_PLACEMENT),
    MP_CLI_NGL_OPTS(OPT_NGL),
    {"help", 'h', false, 'h', NULL},
    {0},
};

/* 0 ok, 1 help shown, 2 usage error (reported) */
static int parse_args(int argc, char **argv, bench_opts *o)
{
    *o = (bench_opts){.pp = {512}, .n_pp = 1, .tg = {128}, .n_tg = 1, .reps = 5};
    mp_cli c;
    mp_cli_init(&c, "bench", bench_flags, argc, argv);
    const char *v;
    for (int id; (id = mp_cli_next(&c, &v)) != MP_CLI_END;) {
        bool ok = true;
        char expect[96] = "";
        mp_status pst;
        mp_error perr;
        int64_t ngl;
        switch (id) {
        case MP_CLI_ERROR:
            return mp_cli_usage_error("bench", c.err.msg);
        case MP_CLI_POSITIONAL:
            return usage_error("unexpected argument '%s'%s", v, "");
        case 'h':
            usage(stdout);
            return 1;
        case OPT_NO_SIMD: o->no_simd = true; break;
        case OPT_DRY_RUN: o->dry_run = true; break;
        case OPT_PLACEMENT:
            if (mp_placement_opts_set(&o->pl, c.flag, v, &pst, &perr), pst)
                return usage_error("%s%s", perr.msg, "");
            break;
        case OPT_NGL:
            if ((ok = mp_parse_i64_said(v, -1, INT32_MAX, &ngl, expect, sizeof expect)))
                mp_cli_note_ngl("bench", v);
            break;
        case OPT_ROUTE_REPLAY: o->route_replay = v; break;
        case 'm': o->model = v; break;
        case 'p':
        case 'n':
            snprintf(expect, sizeof expect, "0, or up to %d sizes 1..%" PRId64 ", comma-separated", MAX_SIZES,
                     MAX_TEST_TOKENS);
            ok = id == 'p' ? parse_list(v, o->pp, &o->n_pp) : parse_list(v, o->tg, &o->n_tg);
            break;
        case 'r': ok = mp_parse_i64_said(v, 1, MAX_REPS, &o->reps, expect, sizeof expect); break;
        case 't': ok = mp_parse_i64_said(v, 1, 1024, &o->threads, expect, sizeof expect); break;
        case 'c': ok = mp_parse_i64_said(v, 1, (int64_t)1 << 22, &o->ctx, expect, sizeof expect); break;
        case 's': ok = mp_parse_u64_said(v, &o->seed, expect, sizeof expect); break;
        case 'o':
            if (!strcmp(v, "json"))
                o->json = true;
            else if (!strcmp(v, "md"))
                o->json = false;
            else
                return usage_error("invalid value '%s' for %s (expected md or json)", v, c.given);
            break;
        }
        if (!ok) {
            char what[200];
            snprintf(what, sizeof what, "'%s' for %s: expected %s", v, c.given, expect);
            return usage_error("invalid value %s%s", what, "");
        }
    }
    if (!o->model)
        return usage_error("-m MODEL is required%s%s", "", "");
    o->pl.no_prompts = o->n_pp == 0; /* decode alone: prefill's copy prices are not its concern */
    if (o->n_pp + o->n_tg == 0)
        return usage_error("nothing to run: -p and -n are both 0%s%s", "", "");
    return 0;
}

/* What every row repeats about the model and the setup. */
typedef struct bench_ctx {
    const char *file;     /* base name of the model path */
    uint64_t size_bytes;  /* GGUF file size */
    const char *arch;
    char quant[128];      /* distinct expert tensor types, "Q4_K+Q6_K" */
    int threads;
    int threads_pinned; /* workers pinned to a CPU each (threadpool.c) */
    const char *costs;  /* --costs: the decode costs the executor's far routes were decided by */
    int64_t far_layers; /* hybrid layers with far routes on */
    char costs_machine[400]; /* what differs from the machine the costs measured ("": the same or not known) */
    const char *isa;
    const char *placement; /* mp_placement.desc */
    const char *budget;    /* --gpu-budget as given, NULL: none */
    int64_t file_type;     /* general.file_type, -1 when absent */
    const mp_placement *pl; /* the engine's */
    int64_t n_ctx;
    bool gpu;              /* the GPU executor ran */
    char device[320];
    char host[160];        /* mp_gpu_host_report */
    mp_gpu_memory mem;
    const char *replay;    /* --route-replay TRACE, NULL: the router */
    char replay_desc[512]; /* the replay's summary after the last test ("" without replay) */
    double host_gbs;       /* host read bandwidth for the decode bound (GPU executor with host
                            * experts): the larger of two probes, 0: not measured */
    double host_probe[2];  /* the probes before and after the tests */
    /* host memory read by the cores and the bus at once (mp_bench_host_bus), before and after the
     * tests; together_gbs the larger sum, 0: not measured (no page-locked host copy) */
    mp_bench_two_readers host_bus[2];
    double together_gbs;
    const mp_knobs *knobs; /* the knobs the session ran with (every row records them) */
} bench_ctx;


typedef struct bench_row {
    mp_bench_kind kind;
    int64_t n;
    double *samples; /* (reps) tok/s */
    mp_bench_stats stats;
    mp_gpu_stats gs;  /* over the timed repetitions (GPU executor) */
} bench_row;

static void quant_mix(const mp_model *m, char *buf, size_t cap)
{
    int seen[64];
    int n_seen = 0;
    buf[0] = '\0';
    for (int64_t il = 0; il < m->hp.n_layer; il++) {
        const mp_tensor *ts[3] = {&m->layers[il].gate_exps, &m->layers[il].up_exps,
                                  &m->layers[il].down_exps};
        for (int k = 0; k < 3; k++) {
            bool dup = false;
            for (int j = 0; j < n_seen; j++)
                dup |= seen[j] == ts[k]->type;
            if (dup || n_seen == 64)
                continue;
            seen[n_seen++] = ts[k]->type;
            const char *name = mp_type_name(ts[k]->type);
            const size_t used = strlen(buf);
            snprintf(buf + used, cap - used, "%s%s", used ? "+" : "", name ? name : "?");
        }
    }
}

static const char *kind_name(mp_bench_kind k)
{
    return k == MP_BENCH_PP ? "pp" : "tg";
}

static const char *executor_note(const bench_ctx *c)
{
    if (c->gpu)
        return "executor gpu: routes gpu/cpu/copy/far are the shares of expert routes served by "
               "resident experts, by the CPU from host memory, by copying the expert's weights "
               "to the GPU, and by the GPU reading them from host memory over the bus; rt overhead is the GPU's gap per hybrid MoE layer step minus the CPU "
               "expert time (wake-up, submission, copies' latency)";
    return "executor cpu: every expert ran on the CPU; a placement, if given, was only checked "
           "against the budget";
}

static double share(const mp_gpu_stats *g, int64_t part)
{
    const int64_t all = mp_gpu_stats_routes(g);
    return all ? 100.0 * (double)part / (double)all : 0.0;
}

static double rt_overhead_us(const mp_gpu_stats *g)
{
    return g->rt_measured ? (double)g->rt_overhead_ns / 1e3 / (double)g->rt_measured : 0.0;
}

/* The two readers' rate for the host+bus bound: bench's own probes, else the cost file's (0: none). */
static double together_gbs(const bench_ctx *c)
{
    return c->together_gbs > 0 ? c->together_gbs : c->pl->decode_costs ? c->pl->decode_costs->together_bytes_per_ns : 0;
}

/* The mean bytes of a host-resident expert (0: none on the host). */
static double host_route_bytes(const bench_ctx *c)
{
    const uint64_t cells = (uint64_t)c->pl->n_layer * (uint64_t)c->pl->n_expert;
    const uint64_t n_host = cells - (uint64_t)c->pl->n_resident_total;
    return n_host ? (double)c->pl->host_expert_bytes / (double)n_host : 0;
}

/* The rate at which a row's CPU experts read their weights: their bytes (whole routes and split
 * parts) over their time (GB/s = bytes/ns); 0 where none ran. Beside the host's probe it says
 * whether the CPU side ran at the memory's rate (bench/NOTES-gpu-exec.md run 39: 53-56 GB/s in one
 * machine's rows against 99-107 in its probes). */
static double cpu_expert_gbs(const bench_ctx *c, const mp_gpu_stats *g)
{
    const double bytes = (double)g->routes_cpu * host_route_bytes(c) + (double)g->split_cpu_bytes;
    return g->cpu_expert_ns > 0 && bytes > 0 ? bytes / (double)g->cpu_expert_ns : 0;
}

/* The decode bound of a tg row with hybrid layers (runtime/bench.h); false when it has none or
 * nothing was measured. Per decode step: the gaps and the round-trip overhead of its hybrid layers
 * (event-timed means over the measured layer steps), the GPU's work inside the warm ones' gaps, and
 * the CPU's expert bytes (its routes x the mean bytes of a host-resident expert). */
static bool row_bound(const bench_ctx *c, const bench_row *r, mp_bench_bound *b)
{
    const mp_gpu_stats *g = &r->gs;
    const double bytes_per_route = host_route_bytes(c);
    if (!c->gpu || r->kind != MP_BENCH_TG || g->steps < 1 || g->hybrid_layers < 1 || g->rt_measured < 1 ||
        r->stats.median <= 0 || c->host_gbs <= 0 || bytes_per_route <= 0)
        return false;
    const double layers = (double)g->hybrid_layers / (double)g->steps;
    const double gap_ms = layers * (double)g->rt_gap_ns / (double)g->rt_measured / 1e6;
    const double warm_ms = layers * (double)g->rt_warm_gpu_ns / (double)g->rt_measured / 1e6;
    const double sync_ms = layers * (double)g->rt_overhead_ns / (double)g->rt_measured / 1e6;
    const double cpu_bytes = ((double)g->routes_cpu * bytes_per_route + (double)g->split_cpu_bytes) / (double)g->steps;
    /* every cold route's bytes (CPU, far, split), for the host+bus bound at the decode costs' bus */
    const double cold_bytes = (double)(g->routes_cpu + g->routes_far) * bytes_per_route / (double)g->steps;
    const double bus_gbs = c->pl->decode_costs ? c->pl->decode_costs->bus_bytes_per_ns : 0;
    mp_bench_decode_bound(1e3 / r->stats.median, gap_ms, warm_ms, cpu_bytes, c->host_gbs, sync_ms, cold_bytes,
                          bus_gbs, together_gbs(c), b);
    return b->bound_ms > 0;
}

/* Probe i (0 before the tests, 1 after) of host memory read by the cores and the bus at once, where
 * the executor has a page-locked host copy; together_gbs keeps the larger sum. A probe that fails
 * (no device memory for its buffer on a full GPU, ...) is said and skipped: the rows do not need it. */
static void host_bus_probe(bench_ctx *c, mp_session *s, int i)
{
    mp_gpu *g = mp_session_gpu(s);
    if (!g || (i == 1 && !(c->together_gbs > 0)))
        return;
    fprintf(stderr, "moeplan bench: host memory read by the cores and the bus at once (%d threads)...\n",
            mp_session_n_threads(s));
    mp_bench_two_readers *p = &c->host_bus[i];
    mp_error err;
    if (mp_bench_host_bus(g, mp_bench_host_probe_bytes(false), mp_session_n_threads(s), 2, MP_BENCH_HOST_BUS_SECONDS, p,
                          &err)) {
        fprintf(stderr, "moeplan bench: warning: %s; the host+bus bound takes the cost file's rates\n", err.msg);
        return;
    }
    if (p->bus_gbs > 0) {
        const double sum = p->cpu_gbs + p->bus_gbs;
        c->together_gbs = sum > c->together_gbs ? sum : c->together_gbs;
        fprintf(stderr, "moeplan bench: cores %.1f + bus %.1f = %.1f GB/s together\n", p->cpu_gbs, p->bus_gbs, sum);
    } else {
        fprintf(stderr, "moeplan bench: no page-locked host copy: the host+bus bound takes the cost file's rates\n");
    }
}

/* The decisions the cost file made (far routes, copies) rest on the host it was calibrated on: where
 * this run's probes found the host moved from the grid's level (mp_decide_host_moved), say so; the
 * rows are still this host's. */
static void drift_warning(const bench_ctx *c)
{
    const mp_decode_costs *dc = c->pl->decode_costs;
    if (!dc || !(c->host_gbs > 0) || !mp_decide_host_moved(dc->level_bytes_per_ns, dc->level_by_window, c->host_gbs))
        return;
    fprintf(stderr, "moeplan bench: warning: the host reads %.1f GB/s now, %.1f while the cost file's grid measured: "
            "the far routes it decides may not be this host's best (calibrate on this machine, now)\n", c->host_gbs,
            dc->level_bytes_per_ns);
}

static void print_md(const bench_ctx *c, const bench_row *rows, int n_rows)
{
    char size[32], gpu[32];
    mp_format_bytes(c->size_bytes, size, sizeof size);
    mp_format_bytes(c->pl->gpu_expert_bytes, gpu, sizeof gpu);
    printf("| model | size | arch | quant | threads | isa | placement | gpu budget | gpu experts "
           "| routing | executor | routes gpu/cpu/copy/far %% | rt overhead us | test | tok/s median "
           "| min | max | stddev | bound tok/s (share); serial |\n");
    printf("| --- | ---: | --- | --- | ---: | --- | --- | ---: | ---: | --- | --- | ---: | ---: "
           "| --- | ---: | ---: | ---: | ---: | ---: |\n");
    const char *rslash = c->replay ? strrchr(c->replay, '/') : NULL;
    const char *routing = !c->replay ? "router" : rslash ? rslash + 1 : c->replay;
    for (int i = 0; i < n_rows; i++) {
        const bench_row *r = &rows[i];
        char paths[64] = "-", rt[32] = "-", bound[128] = "-";
        mp_bench_bound b;
        if (row_bound(c, r, &b)) {
            const int at = snprintf(bound, sizeof bound, "%.2f (%.0f %%); serial %.2f (%.0f %%)", 1e3 / b.bound_ms,
                                    100.0 * r->stats.median * b.bound_ms / 1e3, 1e3 / b.serial_ms,
                                    100.0 * r->stats.median * b.serial_ms / 1e3);
            if (b.hostbus_ms > 0 && at > 0 && (size_t)at < sizeof bound)
                snprintf(bound + at, sizeof bound - (size_t)at, "; host+bus %.2f (%.0f %%)", 1e3 / b.hostbus_ms,
                         100.0 * r->stats.median * b.hostbus_ms / 1e3);
        }
        if (c->gpu) {
            snprintf(paths, sizeof paths, "%.1f/%.1f/%.1f/%.1f", share(&r->gs, r->gs.routes_gpu),
                     share(&r->gs, r->gs.routes_cpu), share(&r->gs, r->gs.routes_copied),
                     share(&r->gs, r->gs.routes_far));
            if (r->gs.rt_measured)
                snprintf(rt, sizeof rt, "%.1f", rt_overhead_us(&r->gs));
        }
        printf("| %s | %s | %s | %s | %d | %s | %s | %s | %s | %s%s | %s | %s | %s | %s%" PRId64
               " | %.2f | %.2f | %.2f | %.2f | %s |\n",
               c->file, size, c->arch, c->quant, c->threads, c->isa, c->placement,
               c->budget ? c->budget : "none", gpu, c->replay ? "replay " : "", routing,
               c->gpu ? "gpu" : "cpu", paths, rt,
               kind_name(r->kind), r->n, r->stats.median, r->stats.min, r->stats.max,
               r->stats.stddev, bound);
    }
    if (c->gpu) {
        char mem[32];
        mp_format_bytes(c->mem.total, mem, sizeof mem);
        printf("\nGPU: %s; device memory used %s; %s.\n", c->device, mem, c->host);
    }
    for (int i = 0; c->gpu && c->pl->tier_slots && i < n_rows; i++) {
        const mp_gpu_stats *t = &rows[i].gs;
        char tb[32];
        mp_format_bytes((uint64_t)t->tier_bytes, tb, sizeof tb);
        printf("%sadaptive tier (%s, %" PRIu64 " slots) %s%" PRId64 ": %.1f %% of routes served by its slots, %" PRId64
               " late (copy in flight), %" PRId64 " admissions (%" PRId64 " from prefill staging), %" PRId64
               " evictions, %s copied from host memory\n", i ? "" : "\n",
               mp_tier_policy_name(c->pl->tier_policy), c->pl->tier_slots, kind_name(rows[i].kind), rows[i].n,
               share(t, t->tier_hits), t->tier_late, t->tier_admissions, t->tier_promoted, t->tier_evictions, tb);
    }
    printf("\n%s.\n", executor_note(c));
    if (c->host_gbs > 0) {
        char hb[160] = "host+bus: with a page-locked host copy or --costs";
        if (c->together_gbs > 0)
            snprintf(hb, sizeof hb, "host+bus: at %.1f GB/s, the larger of two probes of the cores and the bus "
                     "reading at once", c->together_gbs);
        else if (together_gbs(c) > 0)
            snprintf(hb, sizeof hb, "host+bus: at the cost file's %.1f GB/s of the cores and the bus reading at once",
                     together_gbs(c));
        else if (c->pl->decode_costs && c->pl->decode_costs->bus_bytes_per_ns > 0)
            snprintf(hb, sizeof hb, "host+bus: at the host's rate plus the cost file's bus, %.1f GB/s, each alone",
                     c->pl->decode_costs->bus_bytes_per_ns);
        printf("bound: of a decode row with hybrid layers, max(GPU part, CPU experts' bytes / host read "
               "bandwidth %.1f GB/s, the larger of probes before and after the tests) + the round trips' "
               "overhead, per token; serial: their sum (no overlap, what whole CPU layers can reach); "
               "%s: serial, with every cold expert byte read by both; share = measured / bound (docs/bench.md).\n",
               c->host_gbs, hb);
    }
    if (c->replay)
        printf("route replay: %s.\n", c->replay_desc);
}

static bool add_num(cJSON *o, const char *k, double v)
{
    return cJSON_AddNumberToObject(o, k, v) != NULL;
}

static bool add_str(cJSON *o, const char *k, const char *v)
{
    return (v ? cJSON_AddStringToObject(o, k, v) : cJSON_AddNullToObject(o, k)) != NULL;
}

/* MP_GPU_STEP_STAMPS=1 (mp_gpu_stats): where a decode step's wall time went, µs per step */
static bool add_stamps(cJSON *o, const mp_gpu_stats *g)
{
    if (!g->stamped_steps)
        return true;
    const double n = (double)g->stamped_steps;
    return add_num(o, "step_host_gap_us", g->step_host_gaps ? (double)g->step_host_gap_ns / 1e3 /
                                                              (double)g->step_host_gaps : 0.0) &&
           add_num(o, "step_start_lag_us", (double)g->step_start_lag_ns / 1e3 / n) &&
           add_num(o, "step_gpu_us", (double)g->step_gpu_ns / 1e3 / n) &&
           add_num(o, "step_drain_lag_us", (double)g->step_drain_lag_ns / 1e3 / n) &&
           add_num(o, "step_stamp_err_us", (double)g->stamp_err_ns / 1e3);
}

static mp_status print_json(const bench_ctx *c, const bench_row *rows, int n_rows, int reps,
                            uint64_t seed, mp_error *err)
{
    cJSON *root = cJSON_CreateObject();
    cJSON *arr = root ? cJSON_AddArrayToObject(root, "rows") : NULL;
    bool ok = arr && add_str(root, "moeplan_version", MP_VERSION) &&
              add_str(root, "moeplan_commit", mp_build_commit()) &&
              add_str(root, "note", executor_note(c));
    char other_knobs[400] = ""; /* the run's knobs against the cost file's (the executor warned) */
    if (c->pl->decode_costs)
        mp_decide_other_knobs(&c->pl->decode_costs->knobs, c->knobs, other_knobs, sizeof other_knobs);
    for (int i = 0; ok && i < n_rows; i++) {
        const bench_row *r = &rows[i];
        cJSON *o = cJSON_CreateObject();
        ok = o && cJSON_AddItemToArray(arr, o);
        if (!ok) {
            cJSON_Delete(o);
            break;
        }
        char test[48];
        snprintf(test, sizeof test, "%s%" PRId64, kind_name(r->kind), r->n);
        /* which build measured: a row copied out of its file still says (speeds of a debug or
         * sanitizer build are not comparable with a release build's) */
        ok = add_str(o, "moeplan_version", MP_VERSION) && add_str(o, "moeplan_commit", mp_build_commit()) &&
             add_str(o, "moeplan_build", mp_build_options());
        ok = ok && add_str(o, "model_file", c->file) && add_num(o, "model_size_bytes", (double)c->size_bytes) &&
             add_str(o, "arch", c->arch) && add_str(o, "quant", c->quant) &&
             (c->file_type < 0 ? cJSON_AddNullToObject(o, "gguf_file_type") != NULL :
                                 add_num(o, "gguf_file_type", (double)c->file_type)) &&
             add_num(o, "threads", c->threads) && add_num(o, "threads_pinned", c->threads_pinned) &&
             add_str(o, "isa", c->isa) &&
             add_str(o, "placement", c->placement) && add_str(o, "gpu_budget", c->budget) &&
             add_num(o, "gpu_budget_bytes", (double)c->pl->budget.budget_bytes) &&
             add_num(o, "gpu_expert_bytes", (double)c->pl->gpu_expert_bytes) &&
             add_num(o, "host_expert_bytes", (double)c->pl->host_expert_bytes) &&
             add_num(o, "experts_resident", (double)c->pl->n_resident_total) &&
             add_num(o, "gpu_fixed_bytes", (double)c->pl->budget.fixed_bytes) &&
             add_num(o, "gpu_dense_bytes", (double)c->pl->budget.dense_bytes) &&
             add_num(o, "gpu_kv_bytes", (double)c->pl->budget.kv_bytes) &&
             add_num(o, "gpu_scratch_bytes", (double)c->pl->budget.scratch_bytes) &&
             add_str(o, "route_replay", c->replay) &&
             add_str(o, "route_replay_summary", c->replay ? c->replay_desc : NULL) &&
             add_str(o, "executor", c->gpu ? "gpu" : "cpu") &&
             add_str(o, "device", c->gpu ? c->device : NULL) &&
             add_str(o, "host_experts", c->gpu ? c->host : NULL) &&
             add_str(o, "costs", c->costs) &&
             add_str(o, "costs_other_machine", c->costs_machine[0] ? c->costs_machine : NULL) &&
             add_str(o, "costs_other_knobs", other_knobs[0] ? other_knobs : NULL) &&
             add_num(o, "far_layers", (double)c->far_layers) &&
             add_num(o, "gpu_memory_bytes", c->gpu ? (double)c->mem.total : 0.0) &&
             add_num(o, "routes_gpu", (double)r->gs.routes_gpu) &&
             add_num(o, "routes_cpu", (double)r->gs.routes_cpu) &&
             add_num(o, "routes_copied", (double)r->gs.routes_copied) &&
             add_num(o, "routes_far", (double)r->gs.routes_far) &&
             add_num(o, "routes_split", (double)r->gs.routes_split) &&
             add_num(o, "routes_split_by_unit", (double)r->gs.routes_split_by_unit) &&
             add_num(o, "experts_copied", (double)r->gs.experts_copied) &&
             add_str(o, "adaptive", c->pl->tier_slots ? mp_tier_policy_name(c->pl->tier_policy) : "off") &&
             add_num(o, "adaptive_slots", (double)c->pl->tier_slots) &&
             add_num(o, "adaptive_bytes", (double)c->pl->tier_bytes) &&
             add_num(o, "tier_hits", (double)r->gs.tier_hits) && add_num(o, "tier_late", (double)r->gs.tier_late) &&
             add_num(o, "tier_admissions", (double)r->gs.tier_admissions) &&
             add_num(o, "tier_evictions", (double)r->gs.tier_evictions) &&
             add_num(o, "tier_copy_bytes", (double)r->gs.tier_bytes) &&
             add_num(o, "tier_promoted", (double)r->gs.tier_promoted) &&
             add_num(o, "gpu_steps", (double)r->gs.steps) &&
             add_num(o, "hybrid_layer_steps", (double)r->gs.hybrid_layers) &&
             add_num(o, "moe_layer_steps", (double)r->gs.moe_layers) &&
             add_num(o, "rt_measured", (double)r->gs.rt_measured) &&
             add_num(o, "rt_gap_us", r->gs.rt_measured ? (double)r->gs.rt_gap_ns / 1e3 /
                                                         (double)r->gs.rt_measured : 0.0) &&
             add_num(o, "rt_overhead_us", rt_overhead_us(&r->gs)) &&
             add_num(o, "rt_gpu_us", r->gs.rt_measured ? (double)r->gs.rt_gpu_ns / 1e3 /
                                                         (double)r->gs.rt_measured : 0.0) &&
             add_num(o, "rt_gpu_later_pct", r->gs.rt_measured ? 100.0 * (double)r->gs.rt_gpu_later /
                                                                (double)r->gs.rt_measured : 0.0) &&
             add_num(o, "rt_warm_pct", r->gs.rt_measured ? 100.0 * (double)r->gs.rt_warm /
                                                           (double)r->gs.rt_measured : 0.0) &&
             add_num(o, "rt_warm_gpu_us", r->gs.rt_warm ? (double)r->gs.rt_warm_gpu_ns / 1e3 /
                                                          (double)r->gs.rt_warm : 0.0) &&
             add_num(o, "cpu_expert_us", r->gs.hybrid_layers ? (double)r->gs.cpu_expert_ns / 1e3 /
                                                               (double)r->gs.hybrid_layers : 0.0) &&
             add_num(o, "cpu_expert_gbs", c->gpu ? cpu_expert_gbs(c, &r->gs) : 0.0) &&
             add_num(o, "graph_launch_us", r->gs.steps ? (double)r->gs.graph_launch_ns / 1e3 /
                                                         (double)r->gs.steps : 0.0) &&
             add_stamps(o, &r->gs) &&
             add_str(o, "test", test) &&
             add_str(o, "kind", kind_name(r->kind)) && add_num(o, "n_tokens", (double)r->n) &&
             add_num(o, "n_prompt", r->kind == MP_BENCH_PP ? (double)r->n : 1.0) &&
             add_num(o, "n_gen", r->kind == MP_BENCH_TG ? (double)r->n : 0.0) &&
             add_num(o, "n_ctx", (double)c->n_ctx) && add_num(o, "seed", (double)seed) &&
             add_num(o, "warmup", 1) && add_num(o, "repetitions", reps) && mp_knobs_add_json(c->knobs, o);
        cJSON *samples = ok ? cJSON_AddArrayToObject(o, "samples_tok_s") : NULL;
        ok = ok && samples;
        for (int k = 0; ok && k < reps; k++) {
            cJSON *num = cJSON_CreateNumber(r->samples[k]);
            ok = num && cJSON_AddItemToArray(samples, num);
        }
        mp_bench_bound b;
        if (ok && row_bound(c, r, &b)) {
            cJSON *bo = cJSON_AddObjectToObject(o, "bound");
            ok = bo && add_num(bo, "host_read_gbs", c->host_gbs) &&
                 add_num(bo, "host_read_gbs_before", c->host_probe[0]) &&
                 add_num(bo, "host_read_gbs_after", c->host_probe[1]) && add_num(bo, "gpu_ms", b.gpu_ms) &&
                 add_num(bo, "warm_gpu_ms", b.warm_ms) &&
                 add_num(bo, "cpu_ms", b.cpu_ms) && add_num(bo, "sync_ms", b.sync_ms) &&
                 add_num(bo, "bound_ms", b.bound_ms) && add_num(bo, "bound_tok_s", 1e3 / b.bound_ms) &&
                 add_num(bo, "share_of_bound", r->stats.median * b.bound_ms / 1e3) &&
                 add_num(bo, "serial_bound_ms", b.serial_ms) && add_num(bo, "serial_bound_tok_s", 1e3 / b.serial_ms) &&
                 add_num(bo, "share_of_serial_bound", r->stats.median * b.serial_ms / 1e3) &&
                 add_num(bo, "host_bus_gbs_before", c->host_bus[0].cpu_gbs + c->host_bus[0].bus_gbs) &&
                 add_num(bo, "host_bus_gbs_after", c->host_bus[1].cpu_gbs + c->host_bus[1].bus_gbs) &&
                 (b.hostbus_ms > 0 ? add_num(bo, "hostbus_bound_ms", b.hostbus_ms) &&
                                         add_num(bo, "share_of_hostbus_bound", r->stats.median * b.hostbus_ms / 1e3) &&
                                         (together_gbs(c) > 0 ? add_num(bo, "hostbus_gbs", together_gbs(c))
                                                              : cJSON_AddNullToObject(bo, "hostbus_gbs") != NULL)
                                   : cJSON_AddNullToObject(bo, "hostbus_bound_ms") != NULL);
        } else if (ok) {
            ok = cJSON_AddNullToObject(o, "bound") != NULL;
        }
        ok = ok && add_num(o, "median_tok_s", r->stats.median) &&
             add_num(o, "min_tok_s", r->stats.min) && add_num(o, "max_tok_s", r->stats.max) &&
             add_num(o, "mean_tok_s", r->stats.mean) && add_num(o, "stddev_tok_s", r->stats.stddev);
    }
    char *text = ok ? cJSON_Print(root) : NULL;
    cJSON_Delete(root);
    if (!text)
        return mp_fail(err, MP_ERR_NOMEM, "out of memory building the JSON output");
    printf("%s\n", text);
    cJSON_free(text);
    return MP_OK;
}

typedef struct progress_ctx {
    const bench_row *row;
    mp_session *s;
} progress_ctx;

static void progress(void *ctx, int rep, int reps)
{
    const bench_row *r = ((progress_ctx *)ctx)->row;
    mp_gpu *g = mp_session_gpu(((progress_ctx *)ctx)->s);
    if (g && rep == 0) /* the row's GPU statistics cover the timed repetitions */
        mp_gpu_stats_reset(g);
    if (rep < 0)
        fprintf(stderr, "moeplan bench: %s%" PRId64 ": warm-up\n", kind_name(r->kind), r->n);
    else
        fprintf(stderr, "moeplan bench: %s%" PRId64 ": repetition %d/%d\n", kind_name(r->kind),
                r->n, rep + 1, reps);
}

/* --dry-run: the plan that bench would run with, one line (md) or one object (json). */
static mp_status print_plan(const bench_opts *o, const mp_model *m, const bench_ctx *c, int64_t n_ctx,
                            mp_error *err)
{
    char line[1024];
    mp_placement_summary(c->pl, line, sizeof line);
    const char *executor = c->gpu ? "gpu" : "cpu";
    if (!o->json) {
        printf("plan: executor %s; context %" PRId64 "; %s\n", executor, n_ctx, line);
        return MP_OK;
    }
    const mp_placement *p = c->pl;
    cJSON *root = cJSON_CreateObject();
    bool ok = root && cJSON_AddStringToObject(root, "model", o->model) &&
              cJSON_AddStringToObject(root, "executor", executor) &&
              cJSON_AddStringToObject(root, "placement", p->desc) &&
              (o->pl.budget_text ? cJSON_AddStringToObject(root, "gpu_budget", o->pl.budget_text) != NULL
                                 : cJSON_AddNullToObject(root, "gpu_budget") != NULL) &&
              add_num(root, "gpu_budget_bytes", (double)p->budget.budget_bytes) &&
              add_num(root, "n_ctx", (double)n_ctx) &&
              add_num(root, "gpu_dense_bytes", (double)p->budget.dense_bytes) &&
              add_num(root, "gpu_kv_bytes", (double)p->budget.kv_bytes) &&
              add_num(root, "gpu_scratch_bytes", (double)p->budget.scratch_bytes) &&
              add_num(root, "gpu_expert_bytes", (double)p->gpu_expert_bytes) &&
              add_num(root, "host_expert_bytes", (double)p->host_expert_bytes) &&
              add_num(root, "experts_resident", (double)p->n_resident_total) &&
              add_num(root, "experts", (double)(m->hp.n_layer * m->hp.n_expert)) &&
              cJSON_AddStringToObject(root, "summary", line);
    cJSON *per = ok ? cJSON_AddArrayToObject(root, "resident_per_layer") : NULL;
    ok = ok && per;
    for (int64_t il = 0; ok && il < p->n_layer; il++) {
        cJSON *num = cJSON_CreateNumber((double)p->n_resident[il]);
        ok = num && cJSON_AddItemToArray(per, num);
    }
    char *text = ok ? cJSON_Print(root) : NULL;
    cJSON_Delete(root);
    if (!text)
        return mp_fail(err, MP_ERR_NOMEM, "out of memory for the JSON plan");
    puts(text);
    cJSON_free(text);
    return MP_OK;
}

static mp_status bench(const bench_opts *o, const mp_route_replay_api *replay, const mp_knobs *knobs,
                       mp_error *err)
{
    mp_engine e = {0};
    mp_session *s = NULL;
    float *logits = NULL;
    bench_ctx c = {0};
    const int n_rows = o->n_pp + o->n_tg;
    bench_row rows[2 * MAX_SIZES] = {{0}};
    mp_status st;

    for (int i = 0; i < n_rows; i++) {
        rows[i].kind = i < o->n_pp ? MP_BENCH_PP : MP_BENCH_TG;
        rows[i].n = i < o->n_pp ? o->pp[i] : o->tg[i - o->n_pp];
    }
    if ((st = mp_engine_load(&e, o->model, err)))
        goto done;
    const mp_model *m = e.model;
    /* the context: --ctx, or what the largest test needs, which must fit the trained context, and
     * at least the rows from which the GPU executor stages (mp_gpu_staging) where the trained
     * context has them: a short tg test then decodes with the page-locked host copy and far routes,
     * as a run of any length does (tg16's 17 positions had neither) */
    int64_t need = 0;
    int worst = 0;
    for (int i = 0; i < n_rows; i++) {
        const int64_t p = mp_bench_positions(rows[i].kind, rows[i].n);
        if (p > need) {
            need = p;
            worst = i;
        }
    }
    const int64_t staged = MP_GPU_COPY_MIN_ROWS < m->hp.n_ctx_train ? MP_GPU_COPY_MIN_ROWS : m->hp.n_ctx_train;
    const int64_t n_ctx = o->ctx ? o->ctx : need > staged ? need : staged;
    if (need > n_ctx || (!o->ctx && need > m->hp.n_ctx_train)) {
        const bool user = o->ctx != 0;
        st = mp_fail(err, MP_ERR_LIMIT, "%s: %s%" PRId64 " needs %" PRId64 " positions, more than "
                     "the %s of %" PRId64 " (%s)", o->model, kind_name(rows[worst].kind),
                     rows[worst].n, need, user ? "--ctx context" : "model's trained context",
                     user ? o->ctx : m->hp.n_ctx_train,
                     user ? "raise --ctx or use smaller -p/-n" :
                            "use smaller -p/-n, or --ctx N to go past it");
        goto done;
    }
    e.params = (mp_session_params){.n_ctx = n_ctx, .n_threads = (int)o->threads, .n_batch = 0, .knobs = knobs};
    /* the executor and placement are decided before any work, against the session's sizes */
    if ((st = mp_engine_plan(&e, &o->pl, o->route_replay, replay, err)))
        goto done;
    c.pl = &e.placement;
    c.gpu = e.gpu;
    if (o->dry_run) {
        st = print_plan(o, m, &c, n_ctx, err);
        goto done;
    }
    if ((st = mp_engine_start(&e, err)))
        goto done;
    s = e.session;
    if (c.gpu) {
        mp_gpu *g = mp_session_gpu(s);
        snprintf(c.device, sizeof c.device, "%s", mp_gpu_device_name(g));
        mp_gpu_host_report(g, c.host, sizeof c.host);
        mp_gpu_get_memory(g, &c.mem);
        mp_gpu_set_measure(g, true);
        c.far_layers = mp_gpu_far_layers(g);
        snprintf(c.costs_machine, sizeof c.costs_machine, "%s", mp_gpu_costs_machine(g));
    }
    if (c.gpu && c.pl->host_expert_bytes > 0 && o->n_tg > 0) { /* for the decode bound */
        fprintf(stderr, "moeplan bench: host read bandwidth (1 GiB, %d threads)...\n", mp_session_n_threads(s));
        c.host_probe[0] = mp_bench_host_read_gbs(mp_bench_host_probe_bytes(false), mp_session_n_threads(s), 3);
        fprintf(stderr, "moeplan bench: host read bandwidth %.1f GB/s\n", c.host_probe[0]);
        host_bus_probe(&c, s, 0);
    }
    const char *slash = strrchr(o->model, '/');
    c.file = slash ? slash + 1 : o->model;
    c.size_bytes = mp_gguf_file_size(m->gguf);
    c.arch = mp_arch_get(m->hp.arch)->name;
    uint32_t ftype;
    mp_error ignored;
    c.file_type = mp_gguf_get_u32(m->gguf, "general.file_type", &ftype, &ignored) ? -1 : (int64_t)ftype;
    quant_mix(m, c.quant, sizeof c.quant);
    c.threads = mp_session_n_threads(s);
    c.costs = o->pl.costs;
    c.threads_pinned = mp_session_n_pinned(s);
    c.isa = mp_kernels_isa();
    c.placement = c.pl->desc;
    c.budget = o->pl.budget_text;
    c.n_ctx = mp_session_n_ctx(s);
    c.replay = o->route_replay;
    c.knobs = knobs;

    logits = malloc((size_t)m->hp.n_vocab * sizeof *logits);
    if (!logits) {
        st = mp_fail(err, MP_ERR_NOMEM, "out of memory for the logits");
        goto done;
    }
    for (int i = 0; i < n_rows; i++) {
        if (!(rows[i].samples = calloc((size_t)o->reps, sizeof *rows[i].samples))) {
            st = mp_fail(err, MP_ERR_NOMEM, "out of memory");
            goto done;
        }
        progress_ctx pc = {&rows[i], s};
        if ((st = mp_bench_run_test(s, rows[i].kind, rows[i].n, o->seed,
                                    m->hp.n_vocab, (int)o->reps, logits, rows[i].samples,
                                    progress, &pc, err))) {
            mp_engine_step_error(&e, err);
            mp_error_prefix(err, "%s%" PRId64, kind_name(rows[i].kind), rows[i].n);
            goto done;
        }
        mp_bench_stats_compute(rows[i].samples, (int)o->reps, &rows[i].stats);
        if (c.gpu)
            mp_gpu_get_stats(mp_session_gpu(s), &rows[i].gs);
        fprintf(stderr, "moeplan bench: %s%" PRId64 ": median %.2f tok/s\n",
                kind_name(rows[i].kind), rows[i].n, rows[i].stats.median);
    }
    /* The host's bandwidth drifts by 10-20 % within a minute on shared machines (the H200 host:
     * 72-110 GB/s between probes of one call), so a second probe after the tests; the bound takes
     * the larger, the rate the host has shown it can give. */
    if (c.host_probe[0] > 0) {
        c.host_probe[1] = mp_bench_host_read_gbs(mp_bench_host_probe_bytes(false), mp_session_n_threads(s), 3);
        c.host_gbs = c.host_probe[1] > c.host_probe[0] ? c.host_probe[1] : c.host_probe[0];
        fprintf(stderr, "moeplan bench: host read bandwidth after the tests %.1f GB/s; the bound uses %.1f\n",
                c.host_probe[1], c.host_gbs);
        host_bus_probe(&c, s, 1);
        drift_warning(&c);
    }
    if (e.replay_state)
        e.replay->describe(e.replay_state, c.replay_desc, sizeof c.replay_desc);
    if (o->json)
        st = print_json(&c, rows, n_rows, (int)o->reps, o->seed, err);
    else
        print_md(&c, rows, n_rows);
done:
    for (int i = 0; i < n_rows; i++)
        free(rows[i].samples);
    free(logits);
    char profile[512]; /* MP_MOE_CPU_PROFILE=1 */
    mp_engine_profile_line(&e, profile, sizeof profile);
    if (profile[0])
        fprintf(stderr, "moeplan bench: %s\n", profile);
    mp_engine_close(&e);
    return st;
}

int mp_cmd_bench(int argc, char **argv)
{
    mp_knobs defaults;
    mp_knobs_defaults(&defaults);
    return mp_cmd_bench_with(argc, argv, NULL, &defaults);
}

int mp_cmd_bench_with(int argc, char **argv, const mp_route_replay_api *replay, const mp_knobs *knobs)
{
    bench_opts o;
    const int rc = parse_args(argc, argv, &o);
    if (rc == 1)
        return 0;
    if (rc == 2)
        return 2;
    mp_error err = {0};
    mp_knobs k = *knobs;
    if (mp_knobs_of_flags(&k, o.no_simd, o.pl.costs, &err)) {
        fprintf(stderr, "moeplan bench: error: %s\n", err.msg);
        return 1;
    }
    if (bench(&o, replay, &k, &err) != MP_OK) {
        fflush(stdout);
        fprintf(stderr, "moeplan bench: error: %s\n", err.msg);
        return 1;
    }
    return 0;
}
