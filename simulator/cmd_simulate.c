/* simulator/cmd_simulate.c — `moeplan simulate TRACE.db --costs costs.json --budget 8GiB,...`.
 *
 * Loads the trace and the cost model, replays every chosen policy at every budget (plus the
 * all-GPU and all-CPU baselines), prints a table, and optionally writes JSON, SVG, an STRP
 * profile with its manifest, and the llama.cpp whole-layer override. Everything is validated
 * before anything is written; outputs are written atomically.
 */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/args.h"
#include "cli/commands.h"
#include "collector/sha256.h"
#include "runtime/atomic_file.h"
#include "runtime/costs.h"
#include "runtime/model.h"
#include "runtime/numparse.h"
#include "runtime/placement.h"
#include "runtime/session.h"
#include "runtime/strp.h"
#include "simulator/llamacpp.h"
#include "simulator/report.h"
#include "simulator/sim.h"
#include "simulator/sim_load.h"

#define MAX_BUDGETS 16
#define MAX_TRACES 16 /* TRACE.db arguments: shards of one model's collection */

static void usage(FILE *f)
{
    fprintf(f,
            "usage: moeplan simulate TRACE.db [TRACE.db...] --costs costs.json --budget SIZE[,SIZE...] [options]\n\n"
            "Replay the trace's routing under each GPU memory budget and placement policy with the\n"
            "cost model, and predict hit rates, transfers and decode speed (docs/simulator.md).\n"
            "Several traces of one model (collected on several machines) replay as one, in the order\n"
            "given, their requests distinct (docs/collect.md).\n\n"
            "  --costs FILE          cost model (schemas/costs.schema.json, from moeplan calibrate)\n"
            "  --budget LIST         GPU memory for the model, e.g. 8GiB,16GiB,24GiB (B, KB MB GB TB,\n"
            "                        KiB MiB GiB TiB, case-insensitive): the same meaning as\n"
            "                        run/bench/collect --gpu-budget, so a profile made for B runs\n"
            "                        under --gpu-budget B: weights + KV cache for --ctx-size +\n"
            "                        scratch for --batch-size + resident experts\n"
            "  -m, --model GGUF      the traced model: the budget's fixed part (weights, KV cache,\n"
            "                        scratch), expert sizes, and a check that its shape is the trace's\n"
            "  -c, --ctx-size, --ctx N  context the runtime will hold (default: the runtime's, the\n"
            "                        model's trained context up to 4096)\n"
            "  -b, --batch-size N    rows per prefill chunk (default: the runtime's, 512 up to --ctx-size)\n"
            "  --non-expert-bytes N  the GPU bytes besides the expert pool, instead of -m's estimate\n"
            "                        (weights + KV cache + scratch, as bench reports gpu_fixed_bytes)\n"
            "  --policy LIST         policies, comma-separated, or 'all' (default): %s",
            "");
    for (int p = 0; p < MP_POL_COUNT; p++)
        fprintf(f, "%s%s", p ? ", " : "", mp_sim_policy_name(p));
    fprintf(f,
            "\n  --train-frac F        share of requests (in trace order) used to plan (default 0.7, and\n"
            "                        at least one request); the rest is held out and every result is\n"
            "                        shown for both parts\n"
            "  --as-decode           replay every row as its own one-row step (prefill routing as decode)\n"
            "  --max-rows N          replay only the trace's first N routing rows (per layer)\n"
            "  --non-moe costs|trace non-MoE time per step (attention, norms, router, head): the cost\n"
            "                        file's curve by the step's rows (costs, default), or the trace's\n"
            "                        measured step duration minus its MoE time from the timing table\n"
            "                        (trace; with --as-decode a prefill step's rows each take the median\n"
            "                        of the decode steps); a trace without durations or timing is refused\n"
            "  --expert QUANT        choose the cost entries of this quant type (default: the trace's,\n"
            "                        or the cost file's only GPU entry)\n"
            "  -t, --threads N       CPU entry with N threads (default: the most threads in the file)\n"
            "  --pageable            host buffers are pageable (default pinned)\n"
            "  --host-read-gbs GBS   predict for a host that reads its memory at GBS GB/s now (a busy or\n"
            "                        another host; default: the cost file's host_read): the CPU's expert\n"
            "                        costs scale by host_read / GBS\n"
            "  --alpha A --beta B --epsilon E   decayed LFU (defaults 0.9, 1, 0.1)\n"
            "  --window W            windowed LFU: invocations per layer (default 64)\n"
            "  --json OUT.json       write every result as JSON\n"
            "  --svg OUT.svg         write a chart of tok/s by budget and policy\n"
            "  --force               replace existing output files (never an input)\n"
            "  --emit-profile OUT.strp  write the STRP profile (+ OUT.strp.json manifest) of\n"
            "                        --profile-policy (default plan) at the first budget\n"
            "  --profile-policy P    a static policy for --emit-profile\n"
            "  --placement-profile P.strp  also replay this STRP profile's placement (policy\n"
            "                        'profile': its resident set, or as much of it as the budget's\n"
            "                        slots hold), e.g. a profile made from another trace\n"
            "  --emit-llamacpp       print, per budget, the llama-server command (needs -m) whose -ot or\n"
            "                        --n-cpu-moe keeps the best whole layers' experts on the GPU under the\n"
            "                        budget less llama.cpp's weights, KV cache and compute buffers, with its\n"
            "                        predicted ms/token beside the per-expert plan's\n"
            "  --llamacpp-compute-buffer SIZE  llama.cpp's compute buffers for --emit-llamacpp as\n"
            "                        llama-server printed them (\"CUDA0 compute buffer size\"),\n"
            "                        instead of the estimate (an upper bound)\n"
            "  --sensitivity         re-rank the policies with each cost x0.8 and x1.2\n"
            "  --sweep PARAM=V,V,..  run one online policy over values of a parameter at every\n"
            "                        budget: alpha, beta, epsilon (decayed-lfu) or window\n"
            "                        (window-lfu); e.g. --sweep alpha=0.5,0.8,0.9,0.99\n");
}

static int parse_num(const char *s, double *out)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (end == s || *end || errno || !isfinite(v))
        return -1;
    *out = v;
    return 0;
}


typedef struct opts {
    const char *trace, *costs, *json, *svg, *profile; /* trace: the first of traces */
    const char *traces[MAX_TRACES];
    int n_traces;
    const char *placement_profile; /* --placement-profile: replayed as policy 'profile' */
    const char *model; /* --model: the budget's fixed part, expert sizes and a shape check */
    bool non_expert_given;
    int64_t ctx, batch; /* --ctx-size, --batch-size (0: the runtime's defaults) */
    int64_t max_rows;   /* --max-rows (0: all) */
    uint64_t budgets[MAX_BUDGETS];
    int n_budgets;
    bool policies[MP_POL_COUNT];
    int profile_policy;
    const char *expert_quant;
    int threads;
    bool llamacpp, sensitivity, as_decode;
    uint64_t llamacpp_compute_bytes; /* --llamacpp-compute-buffer (0: the estimate) */
    bool force; /* --force: replace existing outputs */
    mp_sim_sweep sweep; /* n_values 0: no --sweep */
    mp_llamacpp_gpu lc; /* --emit-llamacpp: llama.cpp's GPU memory for -m at --ctx-size */
} opts;

/* --budget LIST: comma-separated sizes in the runtime's grammar (mp_parse_bytes, as --gpu-budget);
 * an empty item is an error. Returns 0, or 2 after saying what is wrong. */
static int parse_budgets(const char *v, opts *o)
{
    const char *p = v;
    for (;;) {
        const char *comma = strchr(p, ',');
        const size_t len = comma ? (size_t)(comma - p) : strlen(p);
        char item[64];
        mp_error perr;
        if (len == 0 || len >= sizeof item) {
            fprintf(stderr, "moeplan simulate: error: --budget '%s': %s at offset %zu: expected SIZE[,SIZE...] like "
                            "8GiB,16GiB\n", v, len ? "an item too long" : "an empty item", (size_t)(p - v));
            return 2;
        }
        memcpy(item, p, len);
        item[len] = 0;
        if (o->n_budgets == MAX_BUDGETS) {
            fprintf(stderr, "moeplan simulate: error: --budget '%s': more than %d sizes\n", v, MAX_BUDGETS);
            return 2;
        }
        if (mp_parse_bytes(item, &o->budgets[o->n_budgets], &perr)) {
            fprintf(stderr, "moeplan simulate: error: --budget: %s\n", perr.msg);
            return 2;
        }
        o->n_budgets++;
        if (!comma)
            return 0;
        p = comma + 1;
    }
}

/* --sweep PARAM=V1,V2,...: the parameter, its policy, and values checked as --alpha etc. are */
static int parse_sweep(const char *v, mp_sim_sweep *sw)
{
    static const char *const params[] = {"alpha", "beta", "epsilon", "window"};
    const char *eq = strchr(v, '=');
    size_t plen = eq ? (size_t)(eq - v) : 0;
    int which = -1;
    for (int i = 0; eq && i < 4; i++)
        if (strlen(params[i]) == plen && !strncmp(v, params[i], plen))
            which = i;
    if (which < 0) {
        fprintf(stderr, "moeplan simulate: error: --sweep '%s': expected PARAM=V1,V2,... with PARAM alpha, beta, "
                        "epsilon (decayed-lfu) or window (window-lfu)\n", v);
        return 2;
    }
    sw->param = params[which];
    sw->policy = which == 3 ? MP_POL_WINDOW_LFU : MP_POL_DECAYED_LFU;
    char buf[1024];
    snprintf(buf, sizeof buf, "%s", eq + 1);
    for (char *save, *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        double num = NAN;
        const bool parsed = !parse_num(tok, &num);
        const char *range = mp_sim_param_range(sw->param, num);
        if (!parsed || range || sw->n_values == MP_SIM_SWEEP_MAX) {
            fprintf(stderr, "moeplan simulate: error: --sweep %s: value '%s': expected %s (at most %d values)\n",
                    sw->param, tok, range ? range : mp_sim_param_range(sw->param, NAN), MP_SIM_SWEEP_MAX);
            return 2;
        }
        sw->values[sw->n_values++] = num;
    }
    if (!sw->n_values) {
        fprintf(stderr, "moeplan simulate: error: --sweep %s: no values\n", sw->param);
        return 2;
    }
    return -1;
}

static const mp_cli_opt simulate_flags[] = {
    {"costs", 0, true, 1, NULL}, {"budget", 0, true, 1, NULL}, {"model", 'm', true, 1, NULL},
    {"ctx-size", 'c', true, 1, NULL}, {"ctx", 0, true, 1, NULL}, {"batch-size", 'b', true, 1, NULL},
    {"non-expert-bytes", 0, true, 1, NULL}, {"policy", 0, true, 1, NULL},
    {"train-frac", 0, true, 1, NULL}, {"as-decode", 0, false, 1, NULL},
    {"max-rows", 0, true, 1, NULL}, {"non-moe", 0, true, 1, NULL}, {"expert", 0, true, 1, NULL},
    {"threads", 't', true, 1, NULL}, {"pageable", 0, false, 1, NULL},
    {"host-read-gbs", 0, true, 1, NULL}, {"alpha", 0, true, 1, NULL}, {"beta", 0, true, 1, NULL},
    {"epsilon", 0, true, 1, NULL}, {"window", 0, true, 1, NULL}, {"json", 0, true, 1, NULL},
    {"svg", 0, true, 1, NULL}, {"force", 0, false, 1, NULL}, {"emit-profile", 0, true, 1, NULL},
    {"profile-policy", 0, true, 1, NULL}, {"placement-profile", 0, true, 1, NULL},
    {"emit-llamacpp", 0, false, 1, NULL}, {"sensitivity", 0, false, 1, NULL}, {"llamacpp-compute-buffer", 0, true, 1, NULL},
    {"sweep", 0, true, 1, NULL}, {"help", 'h', false, 'h', NULL}, {0},
};

static int parse_args(int argc, char **argv, opts *o, mp_sim_config *cfg)
{
    memset(o, 0, sizeof *o);
    o->profile_policy = MP_POL_PLAN;
    o->threads = INT_MAX;
    bool any_policy = false;
    mp_cli c;
    mp_cli_init(&c, "simulate", simulate_flags, argc, argv);
    const char *v;
    for (int id; (id = mp_cli_next(&c, &v)) != MP_CLI_END;) {
        if (id == MP_CLI_ERROR)
            return mp_cli_usage_error("simulate", c.err.msg);
        if (id == 'h') {
            usage(stdout);
            return MP_EXIT_OK;
        }
        if (id == MP_CLI_POSITIONAL) {
            if (o->n_traces == MAX_TRACES) {
                fprintf(stderr, "moeplan simulate: error: '%s': more than %d traces\n", v, MAX_TRACES);
                return 2;
            }
            o->traces[o->n_traces++] = v;
            o->trace = o->traces[0];
            continue;
        }
        /* the option by its canonical spelling ("--ctx-size" for -c and --ctx too) */
        const char *a = c.flag;
        double num;
        if (!strcmp(a, "--costs")) {
            o->costs = v;
        } else if (!strcmp(a, "--json")) {
            o->json = v;
        } else if (!strcmp(a, "--svg")) {
            o->svg = v;
        } else if (!strcmp(a, "--emit-profile")) {
            o->profile = v;
        } else if (!strcmp(a, "--placement-profile")) {
            o->placement_profile = v;
        } else if (!strcmp(a, "--expert")) {
            o->expert_quant = v;
        } else if (!strcmp(a, "--non-moe")) {
            if (!strcmp(v, "costs")) {
                cfg->non_moe_source = MP_NON_MOE_COSTS;
            } else if (!strcmp(v, "trace")) {
                cfg->non_moe_source = MP_NON_MOE_TRACE;
            } else {
                fprintf(stderr, "moeplan simulate: error: --non-moe '%s': expected costs or trace\n", v);
                return 2;
            }
        } else if (!strcmp(a, "--budget")) {
            if (parse_budgets(v, o))
                return 2;
        } else if (!strcmp(a, "--sweep")) {
            if (o->sweep.n_values) {
                fprintf(stderr, "moeplan simulate: error: --sweep given twice: one parameter per run\n");
                return 2;
            }
            int r = parse_sweep(v, &o->sweep);
            if (r >= 0)
                return r;
        } else if (!strcmp(a, "--model")) {
            o->model = v;
        } else if (!strcmp(a, "--non-expert-bytes")) {
            o->non_expert_given = true;
            mp_error perr;
            if (mp_parse_bytes(v, &cfg->non_expert_bytes, &perr)) {
                fprintf(stderr, "moeplan simulate: error: --non-expert-bytes: %s\n", perr.msg);
                return 2;
            }
        } else if (!strcmp(a, "--ctx-size") || !strcmp(a, "--batch-size")) {
            const bool ctx = !strcmp(a, "--ctx-size");
            if (!mp_parse_i64(v, 1, ctx ? (int64_t)1 << 22 : 65536, ctx ? &o->ctx : &o->batch)) {
                fprintf(stderr, "moeplan simulate: error: %s '%s': expected an integer 1..%d\n", c.given, v,
                        ctx ? 1 << 22 : 65536);
                return 2;
            }
        } else if (!strcmp(a, "--policy") || !strcmp(a, "--profile-policy")) {
            char buf[1024];
            if ((size_t)snprintf(buf, sizeof buf, "%s", v) >= sizeof buf) {
                fprintf(stderr, "moeplan simulate: error: %s: a list longer than %zu characters\n", a, sizeof buf - 1);
                return 2;
            }
            for (char *tok = buf, *next; tok; tok = next) { /* every item, empty ones too */
                next = strchr(tok, ',');
                if (next)
                    *next++ = 0;
                if (!*tok) {
                    fprintf(stderr, "moeplan simulate: error: %s '%s': an empty item at offset %zu: expected "
                                    "P[,P...] (try --help)\n", a, v, (size_t)(tok - buf));
                    return 2;
                }
                int p = mp_sim_policy_from_name(tok);
                if (!strcmp(a, "--policy") && !strcmp(tok, "all")) {
                    for (int q = 0; q < MP_POL_COUNT; q++)
                        o->policies[q] = q != MP_POL_PROFILE; /* with --placement-profile only */
                    any_policy = true;
                    continue;
                }
                if (p < 0) {
                    fprintf(stderr, "moeplan simulate: error: %s '%s': unknown policy (try --help)\n", a, tok);
                    return 2;
                }
                if (!strcmp(a, "--policy")) {
                    o->policies[p] = true;
                    any_policy = true;
                } else {
                    if (mp_sim_policy_is_online(p)) {
                        fprintf(stderr, "moeplan simulate: error: --profile-policy %s: expected a static policy "
                                        "(an online cache has no fixed placement to export)\n", tok);
                        return 2;
                    }
                    o->profile_policy = p;
                }
            }
        } else if (!strcmp(a, "--max-rows")) {
            if (!mp_parse_i64(v, 1, INT64_MAX, &o->max_rows)) {
                fprintf(stderr, "moeplan simulate: error: --max-rows '%s': expected a row count >= 1\n", v);
                return 2;
            }
        } else if (!strcmp(a, "--host-read-gbs")) {
            if (parse_num(v, &num) || !(num > 0) || num > 1e6) {
                fprintf(stderr, "moeplan simulate: error: --host-read-gbs '%s': expected a bandwidth > 0 in GB/s\n", v);
                return 2;
            }
            cfg->host_read_gbs = num;
        } else if (!strcmp(a, "--train-frac") || !strcmp(a, "--alpha") || !strcmp(a, "--beta") ||
                   !strcmp(a, "--epsilon") || !strcmp(a, "--window") || !strcmp(a, "--threads")) {
            if (parse_num(v, &num)) {
                fprintf(stderr, "moeplan simulate: error: %s '%s': expected a number\n", a, v);
                return 2;
            }
            if (!strcmp(a, "--train-frac")) {
                if (!(num > 0 && num <= 1)) {
                    fprintf(stderr, "moeplan simulate: error: --train-frac %s: expected a share > 0 and <= 1 "
                                    "(the static policies are planned from it)\n", v);
                    return 2;
                }
                cfg->train_frac = num;
            } else if (!strcmp(a, "--alpha")) {
                cfg->alpha = num;
            } else if (!strcmp(a, "--beta")) {
                cfg->beta = num;
            } else if (!strcmp(a, "--epsilon")) {
                cfg->epsilon = num;
            } else if (!strcmp(a, "--window")) {
                if (num < 1 || num > 65536 || num != floor(num)) {
                    fprintf(stderr, "moeplan simulate: error: --window %s: expected an integer 1..65536\n", v);
                    return 2;
                }
                cfg->window = (uint32_t)num;
            } else {
                if (num < 1 || num > 4096 || num != floor(num)) {
                    fprintf(stderr, "moeplan simulate: error: --threads %s: expected an integer 1..4096\n", v);
                    return 2;
                }
                o->threads = (int)num;
            }
        } else if (!strcmp(a, "--as-decode")) {
            o->as_decode = true;
        } else if (!strcmp(a, "--pageable")) {
            cfg->pageable = true;
        } else if (!strcmp(a, "--emit-llamacpp")) {
            o->llamacpp = true;
        } else if (!strcmp(a, "--llamacpp-compute-buffer")) {
            mp_error perr;
            if (mp_parse_bytes(v, &o->llamacpp_compute_bytes, &perr)) {
                fprintf(stderr, "moeplan simulate: error: --llamacpp-compute-buffer: %s\n", perr.msg);
                return 2;
            }
        } else if (!strcmp(a, "--sensitivity")) {
            o->sensitivity = true;
        } else if (!strcmp(a, "--force")) {
            o->force = true;
        } else {
            fprintf(stderr, "moeplan simulate: error: internal: option %s not handled\n", a);
            return MP_EXIT_FAILURE;
        }
    }
    if (!o->trace || !o->costs || !o->n_budgets) {
        fprintf(stderr, "moeplan simulate: error: needs TRACE.db, --costs and --budget (try --help)\n");
        return 2;
    }
    if (o->llamacpp_compute_bytes && !o->llamacpp) {
        fprintf(stderr, "moeplan simulate: error: --llamacpp-compute-buffer applies to --emit-llamacpp\n");
        return 2;
    }
    if (o->llamacpp && !o->model) {
        fprintf(stderr, "moeplan simulate: error: --emit-llamacpp needs -m MODEL: the command names the GGUF, and "
                        "its metadata sizes llama.cpp's KV cache and weights\n");
        return 2;
    }
    if (!any_policy)
        for (int q = 0; q < MP_POL_COUNT; q++)
            o->policies[q] = q != MP_POL_PROFILE;
    if (o->placement_profile)
        o->policies[MP_POL_PROFILE] = true;
    if (o->policies[MP_POL_PROFILE] && !o->placement_profile) {
        fprintf(stderr, "moeplan simulate: error: --policy profile needs --placement-profile P.strp\n");
        return 2;
    }
    o->policies[MP_POL_ALL_GPU] = o->policies[MP_POL_ALL_CPU] = true; /* baselines, always */
    if (o->profile)
        o->policies[o->profile_policy] = true;
    return -1; /* go on */
}

/* The cost entries for the trace's experts (see --expert, --threads). */
static mp_status choose_entries(const mp_costs *c, const mp_sim_trace_facts *facts, const opts *o,
                                const mp_cost_expert **gpu, const mp_cost_expert **cpu, mp_error *err)
{
    *gpu = NULL;
    const char *quant = o->expert_quant ? o->expert_quant : facts->quant[0] ? facts->quant : NULL;
    int matches = 0;
    for (int i = 0; i < c->n_gpu_expert; i++) {
        const mp_cost_expert *e = &c->gpu_expert[i];
        if (quant && strcmp(e->quant, quant) && (o->expert_quant || c->n_gpu_expert > 1))
            continue;
        if (facts->n_embd > 0 && facts->n_ff > 0 && (e->n_embd != facts->n_embd || e->n_ff != facts->n_ff))
            continue;
        if (!*gpu)
            *gpu = e;
        matches++;
    }
    if (matches != 1)
        return mp_fail(err, MP_ERR_ARG,
                       "costs %s: %d GPU expert entries match (quant %s, shape %lldx%lld): expected exactly one "
                       "(choose with --expert QUANT)",
                       o->costs, matches, quant ? quant : "any", (long long)facts->n_embd, (long long)facts->n_ff);
    *cpu = mp_costs_find_cpu(c, (*gpu)->quant, (*gpu)->n_embd, (*gpu)->n_ff, o->threads);
    if (!*cpu)
        return mp_fail(err, MP_ERR_ARG, "costs %s: no CPU expert entry for %s %lldx%lld: expected one beside the GPU entry",
                       o->costs, (*gpu)->quant, (long long)(*gpu)->n_embd, (long long)(*gpu)->n_ff);
    return MP_OK;
}

/* --emit-llamacpp at one budget: the whole-layer placement llama.cpp can express (best-layers,
 * replayed with llama.cpp's own GPU memory as the budget's fixed part and its expert tensors as
 * the slots), its command, what the GPU then holds, and its prediction beside the per-expert
 * plan's in the same memory (what an STRP profile would give llama.cpp) and all-CPU's. Returns the
 * table's text (malloc'd; NULL with *st set on failure) and fills *out (out->command malloc'd,
 * NULL when llama.cpp's own needs exceed the budget). */
static char *llamacpp_block(const mp_sim_trace *t, const mp_sim_config *cfg, const opts *o,
                            const mp_sim_budget_run *run, mp_sim_llamacpp *out, mp_error *err, mp_status *st)
{
    const mp_llamacpp_gpu *x = &o->lc;
    const size_t cap = 16384;
    char *text = malloc(cap), *cmd = malloc(cap);
    bool *cpu_block = calloc(x->n_blocks, sizeof *cpu_block);
    uint32_t *per_block = calloc(x->n_blocks, sizeof *per_block);
    *out = (mp_sim_llamacpp){.weights_bytes = x->weights_bytes, .kv_bytes = x->kv_bytes,
                             .compute_bytes = x->compute_bytes, .kv_cells = x->n_ctx};
    *st = MP_OK;
    if (!text || !cmd || !cpu_block || !per_block) {
        free(text), free(cmd), free(cpu_block), free(per_block);
        *st = mp_fail(err, MP_ERR_NOMEM, "simulate: out of memory for the llama.cpp command");
        return NULL;
    }
    char budget[32], weights[32], kv[32], compute[32], fixed[32], experts[32], total[32];
    mp_format_bytes(run->budget_bytes, budget, sizeof budget);
    mp_format_bytes(x->weights_bytes, weights, sizeof weights);
    mp_format_bytes(x->kv_bytes, kv, sizeof kv);
    mp_format_bytes(x->compute_bytes, compute, sizeof compute);
    mp_format_bytes(x->fixed_bytes, fixed, sizeof fixed);
    if (run->budget_bytes < x->fixed_bytes) {
        snprintf(text, cap, "no command: llama.cpp's own GPU memory (weights %s + KV cache %s at -c %lld + compute "
                 "buffers %s, estimated) = %s exceeds the budget %s", weights, kv, (long long)o->ctx, compute,
                 fixed, budget);
        free(cmd), free(cpu_block), free(per_block);
        return text;
    }
    /* one slot = the largest per-expert share of a layer's expert tensors, so that any whole
     * layers the policy picks fit */
    uint64_t slot = 0;
    for (uint32_t l = 0; l < t->n_layers; l++) {
        const uint64_t b = (x->expert_bytes[t->model_layer[l]] + t->n_experts - 1) / t->n_experts;
        slot = b > slot ? b : slot;
    }
    mp_sim_config c = *cfg;
    c.budget_bytes = run->budget_bytes;
    c.non_expert_bytes = x->fixed_bytes;
    c.slot_bytes = slot;
    mp_sim_result r, plan;
    memset(&r, 0, sizeof r);
    memset(&plan, 0, sizeof plan);
    if ((*st = mp_sim_run(t, &c, MP_POL_BEST_LAYERS, &r, err)) || (*st = mp_sim_run(t, &c, MP_POL_PLAN, &plan, err))) {
        mp_sim_result_free(&r);
        free(text), free(cmd), free(cpu_block), free(per_block);
        return NULL;
    }
    for (uint32_t i = 0; i < mp_strp_resident(&r.profile); i++)
        per_block[r.profile.ranked[i].layer]++;
    uint64_t gpu_expert_bytes = 0;
    size_t n = 0;
    char cpu_list[4096] = "";
    uint32_t n_cpu = 0;
    for (uint32_t l = 0; l < t->n_layers; l++) {
        const uint32_t b = t->model_layer[l];
        cpu_block[b] = per_block[b] < t->n_experts;
        if (!cpu_block[b])
            gpu_expert_bytes += x->expert_bytes[b];
        else if (n < sizeof cpu_list)
            n += (size_t)snprintf(cpu_list + n, sizeof cpu_list - n, "%s%u", n_cpu++ ? "," : "", b);
        else
            n_cpu++;
    }
    mp_format_bytes(gpu_expert_bytes, experts, sizeof experts);
    mp_format_bytes(x->fixed_bytes + gpu_expert_bytes, total, sizeof total);
    const mp_sim_metrics *ml = mp_sim_rank_metrics(&r), *mp = mp_sim_rank_metrics(&plan),
                         *mc = mp_sim_rank_metrics(&run->res[MP_POL_ALL_CPU]);
    const double ms_layers = ml->tokens ? ml->time_ns / 1e6 / (double)ml->tokens : 0,
                 ms_plan = mp->tokens ? mp->time_ns / 1e6 / (double)mp->tokens : 0,
                 ms_cpu = mc->tokens ? mc->time_ns / 1e6 / (double)mc->tokens : 0;
    char kept[96] = "";
    if (ms_cpu > ms_plan)
        snprintf(kept, sizeof kept, ": it keeps %.0f %% of the plan's gain over all-CPU",
                 100.0 * (ms_cpu - ms_layers) / (ms_cpu - ms_plan));
    if (!mp_llamacpp_command(o->model, o->ctx, x, cpu_block, cmd, cap)) {
        snprintf(cmd, cap, "(the command is longer than %zu bytes)", cap - 1);
    }
    snprintf(text, cap,
             "%s\n"
             "                experts on the CPU: %s%s (%u of %u MoE layers); GPU: weights %s + KV cache %s (-c %lld "
             "as %lld cells, F16) + compute buffers %s (estimate, docs/simulator.md) + experts %s = %s of %s\n"
             "                predicted %.4f ms/token for these whole layers, %.4f for the per-expert plan in "
             "the same memory, %.4f all-CPU%s; llama.cpp places whole tensors (all experts of a layer): per-expert placement needs "
             "the STRP profile (--emit-profile, schemas/strp.md)",
             cmd, n_cpu ? "blocks " : "none", cpu_list, n_cpu, t->n_layers, weights, kv, (long long)o->ctx,
             (long long)x->n_ctx, compute, experts, total, budget, ms_layers, ms_plan, ms_cpu, kept);
    mp_sim_result_free(&r);
    mp_sim_result_free(&plan);
    free(cpu_block), free(per_block);
    out->command = cmd;
    out->gpu_expert_bytes = gpu_expert_bytes;
    out->ms_layers = ms_layers, out->ms_plan = ms_plan, out->ms_all_cpu = ms_cpu;
    return text;
}

static void free_runs(mp_sim_budget_run *runs, int n)
{
    for (int b = 0; b < n; b++)
        for (int p = 0; p < MP_POL_COUNT; p++)
            if (runs[b].ran[p])
                mp_sim_result_free(&runs[b].res[p]);
}

/* Run every chosen policy at every budget; fills runs. */
static mp_status run_all(const mp_sim_trace *t, const mp_sim_config *cfg, const opts *o, mp_sim_budget_run *runs,
                         mp_error *err)
{
    for (int b = 0; b < o->n_budgets; b++) {
        mp_sim_config c = *cfg;
        c.budget_bytes = o->budgets[b];
        runs[b].budget_bytes = o->budgets[b];
        mp_status st = mp_sim_slots(t, &c, &runs[b].slots, err);
        if (st)
            return st;
        for (int p = 0; p < MP_POL_COUNT; p++) {
            if (!o->policies[p])
                continue;
            if ((st = mp_sim_run(t, &c, (mp_sim_policy)p, &runs[b].res[p], err)))
                return st;
            runs[b].ran[p] = true;
        }
    }
    return MP_OK;
}

/* --sweep: o->sweep.policy at every budget for every value of o->sweep.param, the other
 * parameters as in cfg; fills o->sweep.res (value-major, freed by the caller). */
static mp_status run_sweep(const mp_sim_trace *t, const mp_sim_config *cfg, opts *o, mp_error *err)
{
    mp_sim_sweep *sw = &o->sweep;
    sw->res = calloc((size_t)sw->n_values * (size_t)o->n_budgets, sizeof *sw->res);
    if (!sw->res)
        return mp_fail(err, MP_ERR_NOMEM, "simulate: out of memory for the sweep");
    for (int v = 0; v < sw->n_values; v++) {
        mp_sim_config c = *cfg;
        const double x = sw->values[v];
        if (!strcmp(sw->param, "alpha"))
            c.alpha = x;
        else if (!strcmp(sw->param, "beta"))
            c.beta = x;
        else if (!strcmp(sw->param, "epsilon"))
            c.epsilon = x;
        else
            c.window = (uint32_t)x;
        for (int b = 0; b < o->n_budgets; b++) {
            c.budget_bytes = o->budgets[b];
            mp_status st = mp_sim_run(t, &c, sw->policy, &sw->res[(size_t)v * o->n_budgets + b], err);
            if (st)
                return st;
        }
    }
    return MP_OK;
}

/* Policies ordered by tok/s (held-out where it exists); returns the best. rank[p] = position. */
static int rank_policies(const mp_sim_budget_run *run, int rank[MP_POL_COUNT])
{
    int order[MP_POL_COUNT], n = 0;
    for (int p = 0; p < MP_POL_COUNT; p++)
        if (run->ran[p] && p != MP_POL_ALL_GPU && p != MP_POL_BELADY) /* unattainable references */
            order[n++] = p;
    for (int i = 1; i < n; i++)
        for (int j = i; j > 0; j--) {
            double a = mp_sim_tok_s(mp_sim_rank_metrics(&run->res[order[j - 1]]));
            double b = mp_sim_tok_s(mp_sim_rank_metrics(&run->res[order[j]]));
            if (b > a) {
                int x = order[j];
                order[j] = order[j - 1];
                order[j - 1] = x;
            }
        }
    for (int p = 0; p < MP_POL_COUNT; p++)
        rank[p] = -1;
    for (int i = 0; i < n; i++)
        rank[order[i]] = i;
    return n ? order[0] : -1;
}

/* --emit-llamacpp: the model's expert tensors must sit in the blocks of the trace's MoE layers. */
static mp_status llamacpp_check_blocks(const mp_llamacpp_gpu *x, const mp_sim_trace *t, const opts *o, mp_error *err)
{
    uint32_t n = 0;
    for (uint32_t b = 0; b < x->n_blocks; b++)
        n += x->expert_bytes[b] > 0;
    for (uint32_t l = 0; l < t->n_layers; l++)
        if (t->model_layer[l] >= x->n_blocks || !x->expert_bytes[t->model_layer[l]])
            n = UINT32_MAX;
    if (n != t->n_layers)
        return mp_fail(err, MP_ERR_ARG, "%s: its expert tensors (blk.N.ffn_*_exps) are not in the blocks of trace "
                       "%s's %u MoE layers: expected the traced model", o->model, o->trace, t->n_layers);
    return MP_OK;
}

/* --model: checks that its expert shape is the trace's; then what the runtime will hold on the GPU
 * besides experts, as run/bench/collect --gpu-budget count it (weights, KV cache for the context,
 * scratch for the batch: mp_gpu_budget_compute, the runtime's own estimate; unless
 * --non-expert-bytes gave it), the largest layer's expert size (the slots a budget holds, so that
 * they fit in whichever layers the policy puts them, as the runtime places them), and whether the
 * runtime will have the staging buffers that prefill weight copies need. o->ctx and o->batch get
 * the sizes the session resolves them to. */
static mp_status apply_model(const char *path, const char *trace_path, const mp_sim_trace_facts *facts, opts *o,
                             mp_sim_config *cfg, uint64_t *slot_bytes, mp_error *err)
{
    mp_model *m = NULL;
    mp_status st = mp_model_load(path, &m, err);
    if (st)
        return st;
    mp_placement_geom g = {0};
    const int64_t bytes = (int64_t)mp_model_expert_bytes(m, 0);
    if ((facts->expert_bytes > 0 && facts->expert_bytes != bytes) || (facts->n_embd > 0 && facts->n_embd != m->hp.n_embd) ||
        (facts->n_ff > 0 && facts->n_ff != m->hp.n_ff_exp)) { /* <= 0: the trace does not say */
        st = mp_fail(err, MP_ERR_ARG,
                     "%s: experts of %lld bytes (hidden %lld, FFN %lld) do not match trace %s "
                     "(%lld bytes, hidden %lld, FFN %lld)",
                     path, (long long)bytes, (long long)m->hp.n_embd, (long long)m->hp.n_ff_exp, trace_path,
                     (long long)facts->expert_bytes, (long long)facts->n_embd, (long long)facts->n_ff);
        goto out;
    }
    const mp_session_params sp = {.n_ctx = o->ctx, .n_batch = o->batch};
    mp_gpu_budget b;
    if ((st = mp_session_resolve_sizes(m, &sp, &o->ctx, &o->batch, err)) ||
        (st = mp_placement_geom_from_model(m, &g, err)) ||
        (st = mp_gpu_budget_compute(&g, 0, o->ctx, o->batch, &b, err)))
        goto out;
    if (!o->non_expert_given)
        cfg->non_expert_bytes = b.fixed_bytes;
    if (o->llamacpp && (st = mp_llamacpp_gpu_from_gguf(m->gguf, o->ctx, &o->lc, err)))
        goto out;
    if (o->llamacpp && o->llamacpp_compute_bytes)
        mp_llamacpp_gpu_set_compute_bytes(&o->lc, o->llamacpp_compute_bytes);
    *slot_bytes = 0;
    for (int64_t il = 0; il < g.n_layer; il++)
        *slot_bytes = g.expert_bytes[il] > *slot_bytes ? g.expert_bytes[il] : *slot_bytes;
    cfg->no_copies = o->batch < MP_GPU_COPY_MIN_ROWS;
out:
    mp_placement_geom_free(&g);
    mp_model_free(m);
    return st;
}

/* What the run's predictions rest on, said once they exist (errors stay one line): the budget's
 * fixed part, the CPU level, the far routes decided, and any layer step held to the floor. */
static void notes(const opts *o, const mp_sim_config *cfg, const mp_sim_budget_run *runs, const mp_sim_trace *t)
{
    char fixed[32];
    mp_format_bytes(cfg->non_expert_bytes, fixed, sizeof fixed);
    if (o->model)
        fprintf(stderr, "moeplan simulate: note: each budget holds %s besides experts (%s at --ctx-size %lld, "
                        "--batch-size %lld, as --gpu-budget counts it)\n", fixed,
                o->non_expert_given ? "--non-expert-bytes" : "weights, KV cache and scratch",
                (long long)o->ctx, (long long)o->batch);
    const double f = mp_sim_cpu_anchor(cfg->costs, cfg->cpu);
    if (f != 1.0)
        fprintf(stderr, "moeplan simulate: note: CPU expert curves x %.3f: the decode grid's all-cold step (%d CPU "
                        "experts, far routes off) measured in the runtime, over the %d-thread microbenchmark\n",
                f, cfg->costs->decode.top_k, cfg->cpu->threads);
    uint64_t floored = 0, far = 0, routes = 0;
    for (int b = 0; b < o->n_budgets; b++)
        for (int p = 0; p < MP_POL_COUNT; p++)
            if (runs[b].ran[p]) {
                const mp_sim_metrics *m[2] = {&runs[b].res[p].train, &runs[b].res[p].test};
                for (int k = 0; k < 2; k++)
                    floored += m[k]->floored, far += m[k]->routes_far, routes += m[k]->decisions;
            }
    if (far)
        fprintf(stderr, "moeplan simulate: note: far routes (the GPU reading cold experts over the bus, as the "
                        "runtime decides them from the decode grid): %.1f %% of all routes simulated\n",
                100.0 * (double)far / (double)(routes ? routes : 1));
    if (floored)
        fprintf(stderr, "moeplan simulate: note: %llu layer steps were charged the floor of reading their cold "
                        "experts from host memory (%s's costs are below it: calibrate this model again)\n",
                (unsigned long long)floored, o->costs);
    (void)t;
}

/* Every output against every input and the outputs before it, before any work: none may
 * replace an input (compared by device and inode) or another output, and an existing one is
 * replaced only with --force (runtime/atomic_file.h). manifest gets OUT.strp.json. */
static mp_status check_outputs(const opts *o, char *manifest, size_t cap, mp_error *err)
{
    if (o->profile && (size_t)snprintf(manifest, cap, "%s.json", o->profile) >= cap)
        return mp_fail(err, MP_ERR_ARG, "--emit-profile %s: path too long", o->profile);
    mp_file_ref known[8 + MAX_TRACES] = {{o->costs, "--costs"}, {o->model, "--model"},
                                         {o->placement_profile, "--placement-profile"}};
    int n = 3;
    for (int t = 0; t < o->n_traces; t++)
        known[n++] = (mp_file_ref){o->traces[t], o->n_traces == 1 ? "the trace" : "a trace"};
    const mp_file_ref outputs[] = {{o->json, "--json"}, {o->svg, "--svg"}, {o->profile, "--emit-profile"},
                                   {o->profile ? manifest : NULL, "the profile's manifest"}};
    for (int i = 0; i < 4; i++) {
        if (!outputs[i].path)
            continue;
        mp_status st = mp_output_check(outputs[i].path, outputs[i].role, o->force, known, n, err);
        if (st)
            return st;
        known[n++] = outputs[i];
    }
    return MP_OK;
}

int mp_cmd_simulate(int argc, char **argv)
{
    mp_sim_config cfg;
    mp_sim_config_init(&cfg);
    opts o;
    int rc = parse_args(argc, argv, &o, &cfg);
    if (rc >= 0)
        return rc;
    mp_error err;
    mp_costs costs;
    mp_sim_trace trace;
    mp_strp placed = {0}; /* --placement-profile */
    mp_sim_trace_facts facts;
    mp_sim_load_options lo = {.as_decode = o.as_decode, .non_moe = cfg.non_moe_source == MP_NON_MOE_TRACE};
    mp_sim_budget_run runs[MAX_BUDGETS];
    memset(runs, 0, sizeof runs);
    char *ot[MAX_BUDGETS] = {0};
    mp_sim_llamacpp lc[MAX_BUDGETS];
    memset(lc, 0, sizeof lc);
    mp_cost_expert gpu_entry;
    const mp_cost_expert *gpu, *cpu;
    char manifest[4096];
    mp_status ost = check_outputs(&o, manifest, sizeof manifest, &err);
    if (ost) {
        fprintf(stderr, "moeplan simulate: error: %s\n", err.msg);
        return ost == MP_ERR_ARG ? 2 : 1;
    }
    rc = 1;
    if (mp_costs_load(o.costs, &costs, &err)) {
        fprintf(stderr, "moeplan simulate: error: %s\n", err.msg);
        return 1;
    }
    if (mp_costs_require_gpu(&costs, o.costs, &err)) { /* every budget places experts on a GPU */
        fprintf(stderr, "moeplan simulate: error: %s\n", err.msg);
        mp_costs_free(&costs);
        return 1;
    }
    if (mp_sim_load_traces(o.traces, o.n_traces, &lo, &trace, &facts, &err)) {
        fprintf(stderr, "moeplan simulate: error: %s\n", err.msg);
        mp_costs_free(&costs);
        return 1;
    }
    if (o.max_rows)
        mp_sim_trace_keep_rows(&trace, (uint64_t)o.max_rows);
    if (!o.model && !o.non_expert_given) {
        mp_fail(&err, MP_ERR_ARG, "--budget counts everything the runtime holds on the GPU (weights, KV cache, "
                "scratch, experts), as --gpu-budget does: expected -m MODEL (or --non-expert-bytes N)");
        goto fail;
    }
    if (o.model && apply_model(o.model, o.trace, &facts, &o, &cfg, &cfg.slot_bytes, &err))
        goto fail;
    if (o.llamacpp && llamacpp_check_blocks(&o.lc, &trace, &o, &err))
        goto fail;
    if (o.placement_profile) { /* the reader refuses a profile of another geometry */
        const mp_strp_geometry geo = {mp_sim_trace_blocks(&trace), trace.n_experts};
        if (mp_strp_read_file(o.placement_profile, &geo, &placed, &err))
            goto fail;
        cfg.profile = &placed;
    }
    if (choose_entries(&costs, &facts, &o, &gpu, &cpu, &err))
        goto fail;
    gpu_entry = *gpu;
    if (facts.expert_bytes > 0 && (uint64_t)facts.expert_bytes != gpu_entry.expert_bytes) {
        /* the trace measured the real model: its expert size wins over the calibration's */
        fprintf(stderr, "moeplan simulate: note: expert size %lld bytes from the trace (cost file says %llu)\n",
                (long long)facts.expert_bytes, (unsigned long long)gpu_entry.expert_bytes);
        gpu_entry.expert_bytes = (uint64_t)facts.expert_bytes;
    }
    cfg.costs = &costs;
    cfg.costs_name = o.costs;
    cfg.gpu = &gpu_entry;
    cfg.cpu = cpu;
    if (run_all(&trace, &cfg, &o, runs, &err))
        goto fail;
    if (o.sweep.n_values && run_sweep(&trace, &cfg, &o, &err))
        goto fail;
    notes(&o, &cfg, runs, &trace);
    char trace_names[4096] = "";
    for (int t = 0, n = 0; t < o.n_traces && n < (int)sizeof trace_names; t++)
        n += snprintf(trace_names + n, sizeof trace_names - (size_t)n, "%s%s", t ? " + " : "", o.traces[t]);
    mp_sim_report rep = {trace_names, o.costs, &cfg, &trace, runs, o.n_budgets, {0}, NULL, NULL,
                         o.sweep.n_values ? &o.sweep : NULL};
    if (o.llamacpp) {
        for (int b = 0; b < o.n_budgets; b++) {
            mp_status st;
            ot[b] = llamacpp_block(&trace, &cfg, &o, &runs[b], &lc[b], &err, &st);
            if (st)
                goto fail;
        }
        rep.llamacpp_ot = ot;
        rep.llamacpp = lc;
    }
    if (o.sensitivity) {
        int base_rank[MAX_BUDGETS][MP_POL_COUNT];
        for (int b = 0; b < o.n_budgets; b++)
            rank_policies(&runs[b], base_rank[b]);
        for (int c = 0; c < MP_COST_PARTS; c++)
            for (int k = 0; k < 2; k++) {
                mp_sim_config sc = cfg;
                sc.scale[c] = k ? 1.2 : 0.8;
                mp_sim_budget_run alt[MAX_BUDGETS];
                memset(alt, 0, sizeof alt);
                mp_status st = run_all(&trace, &sc, &o, alt, &err);
                for (int b = 0; !st && b < o.n_budgets && b < 16; b++) {
                    int rank[MP_POL_COUNT];
                    rep.sens.best[c][k][b] = rank_policies(&alt[b], rank);
                    int moved = 0;
                    for (int p = 0; p < MP_POL_COUNT; p++)
                        moved += rank[p] != base_rank[b][p];
                    rep.sens.rank_changes[c][k][b] = moved;
                }
                free_runs(alt, o.n_budgets);
                if (st)
                    goto fail;
            }
        rep.sens.done = true;
    }
    mp_sim_report_table(stdout, &rep);
    if (o.json && mp_sim_report_json(o.json, &rep, &err))
        goto fail;
    if (o.svg && mp_sim_report_svg(o.svg, &rep, &err))
        goto fail;
    if (o.profile) {
        const mp_sim_result *r = &runs[0].res[o.profile_policy];
        char costs_hex[65], trace_hex[65];
        if (mp_sha256_file(o.costs, "costs", costs_hex, NULL, &err) ||
            (o.n_traces == 1 && mp_sha256_file(o.trace, "trace", trace_hex, NULL, &err)))
            goto fail;
        mp_strp_manifest m;
        mp_strp_manifest_init(&m);
        m.model_sha256 = facts.model_sha256[0] ? facts.model_sha256 : NULL;
        m.budget_bytes = runs[0].budget_bytes;
        m.policy = mp_sim_policy_name(o.profile_policy);
        m.params[m.n_params++] = (mp_strp_param){"non_expert_bytes", (double)cfg.non_expert_bytes};
        m.params[m.n_params++] = (mp_strp_param){"expert_bytes", (double)gpu_entry.expert_bytes};
        m.costs_sha256 = costs_hex;
        m.trace_sha256 = o.n_traces == 1 ? trace_hex : NULL; /* null: made from several traces */
        m.train_frac = cfg.train_frac;
        m.predicted_tok_s = mp_sim_tok_s(mp_sim_rank_metrics(r));
        /* coverage: the share of held-out routes the profile's resident experts serve */
        if (r->test.decisions)
            m.heldout_coverage = mp_sim_hit_rate(&r->test);
        if (mp_strp_write_file(o.profile, &r->profile, &err) || mp_strp_manifest_write(manifest, &m, &r->profile, &err))
            goto fail;
        printf("\nprofile %s (%s, %u resident of %u ranked) and manifest %s written\n", o.profile,
               m.policy, mp_strp_resident(&r->profile), mp_strp_ranking_len(&r->profile), manifest);
    }
    rc = 0;
    goto done;
fail:
    fprintf(stderr, "moeplan simulate: error: %s\n", err.msg);
    rc = 1;
done:
    for (int b = 0; b < MAX_BUDGETS; b++)
        free(ot[b]), free(lc[b].command);
    mp_llamacpp_gpu_free(&o.lc);
    free_runs(runs, o.n_budgets);
    for (int i = 0; o.sweep.res && i < o.sweep.n_values * o.n_budgets; i++)
        mp_sim_result_free(&o.sweep.res[i]);
    free(o.sweep.res);
    mp_sim_trace_free(&trace);
    mp_costs_free(&costs);
    mp_strp_free(&placed);
    return rc;
}
