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

#include "cli/commands.h"
#include "collector/sha256.h"
#include "runtime/atomic_file.h"
#include "runtime/model.h"
#include "runtime/strp.h"
#include "simulator/costs.h"
#include "simulator/report.h"
#include "simulator/sim.h"
#include "simulator/sim_load.h"

#define MAX_BUDGETS 16

static void usage(FILE *f)
{
    fprintf(f,
            "usage: moeplan simulate TRACE.db --costs costs.json --budget SIZE[,SIZE...] [options]\n\n"
            "Replay the trace's routing under each GPU memory budget and placement policy with the\n"
            "cost model, and predict hit rates, transfers and decode speed (docs/simulator.md).\n\n"
            "  --costs FILE          cost model (schemas/costs.schema.json, from moeplan calibrate)\n"
            "  --budget LIST         GPU memory for the model, e.g. 8GiB,16GiB,24GiB (B, KiB, MiB,\n"
            "                        GiB, KB, MB, GB); holds the non-expert weights + resident experts\n"
            "  -m, --model GGUF      the traced model: its non-expert bytes (unless given below)\n"
            "                        and a check that its expert shape is the trace's\n"
            "  --non-expert-bytes N  bytes of the model's non-expert weights (default: from\n"
            "                        --model, else 0)\n"
            "  --policy LIST         policies, comma-separated, or 'all' (default): %s",
            "");
    for (int p = 0; p < MP_POL_COUNT; p++)
        fprintf(f, "%s%s", p ? ", " : "", mp_sim_policy_name(p));
    fprintf(f,
            "\n  --train-frac F        share of requests (in trace order) used to plan (default 0.7);\n"
            "                        the rest is held out and every result is shown for both parts\n"
            "  --as-decode           replay every row as its own one-row step (prefill routing as decode)\n"
            "  --non-moe costs|trace non-MoE time per step (attention, norms, router, head): the cost\n"
            "                        file's curve by the step's rows (costs, default), or the trace's\n"
            "                        measured step duration minus its MoE time from the timing table\n"
            "                        (trace; with --as-decode a prefill step's rows each take the median\n"
            "                        of the decode steps); a trace without durations or timing is refused\n"
            "  --expert QUANT        choose the cost entries of this quant type (default: the trace's,\n"
            "                        or the cost file's only GPU entry)\n"
            "  --threads N           CPU entry with N threads (default: the most threads in the file)\n"
            "  --pageable            host buffers are pageable (default pinned)\n"
            "  --alpha A --beta B --epsilon E   decayed LFU (defaults 0.9, 1, 0.1)\n"
            "  --window W            windowed LFU: invocations per layer (default 64)\n"
            "  --json OUT.json       write every result as JSON\n"
            "  --svg OUT.svg         write a chart of tok/s by budget and policy\n"
            "  --force               replace existing output files (never an input)\n"
            "  --emit-profile OUT.strp  write the STRP profile (+ OUT.strp.json manifest) of\n"
            "                        --profile-policy (default plan) at the first budget\n"
            "  --profile-policy P    a static policy for --emit-profile\n"
            "  --placement-profile P.strp  also replay this STRP profile's placement (policy\n"
            "                        'profile': its first min(its slots, the budget's) ranked experts\n"
            "                        resident), e.g. a profile made from another trace\n"
            "  --emit-llamacpp       print, per budget, the llama.cpp -ot override that keeps the best\n"
            "                        whole layers on the GPU, with its simulated speed\n"
            "  --sensitivity         re-rank the policies with each cost x0.8 and x1.2\n"
            "  --sweep PARAM=V,V,..  run one online policy over values of a parameter at every\n"
            "                        budget: alpha, beta, epsilon (decayed-lfu) or window\n"
            "                        (window-lfu); e.g. --sweep alpha=0.5,0.8,0.9,0.99\n");
}

/* "16GiB", "512MiB", "1e9" (bytes), "24GB". */
static int parse_size(const char *s, uint64_t *out)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (end == s || errno || !(v >= 0) || !isfinite(v))
        return -1;
    double mult = 1;
    if (!*end || !strcmp(end, "B"))
        mult = 1;
    else if (!strcmp(end, "KiB"))
        mult = 1024.0;
    else if (!strcmp(end, "MiB"))
        mult = 1024.0 * 1024;
    else if (!strcmp(end, "GiB"))
        mult = 1024.0 * 1024 * 1024;
    else if (!strcmp(end, "TiB"))
        mult = 1024.0 * 1024 * 1024 * 1024;
    else if (!strcmp(end, "KB"))
        mult = 1e3;
    else if (!strcmp(end, "MB"))
        mult = 1e6;
    else if (!strcmp(end, "GB"))
        mult = 1e9;
    else
        return -1;
    double b = v * mult;
    if (b > 1.8e19)
        return -1;
    *out = (uint64_t)llround(b);
    return 0;
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
    const char *trace, *costs, *json, *svg, *profile;
    const char *placement_profile; /* --placement-profile: replayed as policy 'profile' */
    const char *model; /* --model: non-expert bytes and a shape check from the GGUF */
    bool non_expert_given;
    uint64_t budgets[MAX_BUDGETS];
    int n_budgets;
    bool policies[MP_POL_COUNT];
    int profile_policy;
    const char *expert_quant;
    int threads;
    bool llamacpp, sensitivity, as_decode;
    bool force; /* --force: replace existing outputs */
    mp_sim_sweep sweep; /* n_values 0: no --sweep */
} opts;

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

static int parse_args(int argc, char **argv, opts *o, mp_sim_config *cfg)
{
    memset(o, 0, sizeof *o);
    o->profile_policy = MP_POL_PLAN;
    o->threads = INT_MAX;
    bool any_policy = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            return 0;
        }
        bool flag = !strcmp(a, "--as-decode") || !strcmp(a, "--pageable") || !strcmp(a, "--emit-llamacpp") ||
                    !strcmp(a, "--sensitivity") || !strcmp(a, "--force");
        if (a[0] == '-' && !flag && i + 1 >= argc) {
            fprintf(stderr, "moeplan simulate: error: %s needs a value (try --help)\n", a);
            return 2;
        }
        const char *v = flag || a[0] != '-' ? NULL : argv[i + 1];
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
            char buf[1024];
            snprintf(buf, sizeof buf, "%s", v);
            for (char *save, *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
                if (o->n_budgets == MAX_BUDGETS || parse_size(tok, &o->budgets[o->n_budgets])) {
                    fprintf(stderr, "moeplan simulate: error: --budget '%s': expected up to %d sizes like 16GiB\n",
                            tok, MAX_BUDGETS);
                    return 2;
                }
                o->n_budgets++;
            }
        } else if (!strcmp(a, "--sweep")) {
            if (o->sweep.n_values) {
                fprintf(stderr, "moeplan simulate: error: --sweep given twice: one parameter per run\n");
                return 2;
            }
            int r = parse_sweep(v, &o->sweep);
            if (r >= 0)
                return r;
        } else if (!strcmp(a, "-m") || !strcmp(a, "--model")) {
            o->model = v;
        } else if (!strcmp(a, "--non-expert-bytes")) {
            o->non_expert_given = true;
            if (parse_size(v, &cfg->non_expert_bytes)) {
                fprintf(stderr, "moeplan simulate: error: --non-expert-bytes '%s': expected a size\n", v);
                return 2;
            }
        } else if (!strcmp(a, "--policy") || !strcmp(a, "--profile-policy")) {
            char buf[1024];
            snprintf(buf, sizeof buf, "%s", v);
            for (char *save, *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
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
        } else if (!strcmp(a, "--train-frac") || !strcmp(a, "--alpha") || !strcmp(a, "--beta") ||
                   !strcmp(a, "--epsilon") || !strcmp(a, "--window") || !strcmp(a, "--threads")) {
            if (parse_num(v, &num)) {
                fprintf(stderr, "moeplan simulate: error: %s '%s': expected a number\n", a, v);
                return 2;
            }
            if (!strcmp(a, "--train-frac")) {
                if (!(num >= 0 && num <= 1)) {
                    fprintf(stderr, "moeplan simulate: error: --train-frac %s: expected 0..1\n", v);
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
        } else if (!strcmp(a, "--sensitivity")) {
            o->sensitivity = true;
        } else if (!strcmp(a, "--force")) {
            o->force = true;
        } else if (a[0] == '-') {
            fprintf(stderr, "moeplan simulate: error: unknown option '%s' (try --help)\n", a);
            return 2;
        } else if (!o->trace) {
            o->trace = a;
        } else {
            fprintf(stderr, "moeplan simulate: error: unexpected argument '%s'\n", a);
            return 2;
        }
        if (v)
            i++;
    }
    if (!o->trace || !o->costs || !o->n_budgets) {
        fprintf(stderr, "moeplan simulate: error: needs TRACE.db, --costs and --budget (try --help)\n");
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
    if (o->llamacpp)
        o->policies[MP_POL_BEST_LAYERS] = o->policies[MP_POL_PLAN] = true;
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

/* -ot override for llama.cpp from a whole-layer placement: the layers not fully resident on CPU. */
static char *llamacpp_override(const mp_sim_trace *t, const mp_sim_result *r, double tok_s_layers,
                               double tok_s_plan)
{
    size_t cap = 128 + (size_t)t->n_layers * 8;
    char *s = malloc(cap + 128);
    uint32_t *per_layer = calloc(mp_sim_trace_blocks(t), sizeof *per_layer);
    if (!s || !per_layer) {
        free(s);
        free(per_layer);
        return NULL;
    }
    for (uint32_t i = 0; i < r->profile.slots; i++)
        per_layer[r->profile.ranked[i].layer]++;
    size_t n = (size_t)snprintf(s, cap, "-ot 'blk\\.(");
    int n_cpu = 0;
    for (uint32_t l = 0; l < t->n_layers; l++)
        if (per_layer[t->model_layer[l]] < t->n_experts)
            n += (size_t)snprintf(s + n, cap - n, "%s%u", n_cpu++ ? "|" : "", t->model_layer[l]);
    if (!n_cpu)
        n = (size_t)snprintf(s, cap, "(every layer fits: no override needed)");
    else
        n += (size_t)snprintf(s + n, cap - n, ")\\.ffn_.*_exps\\.=CPU'");
    snprintf(s + n, cap + 128 - n, "  [%.1f tok/s; per-expert plan %.1f tok/s]", tok_s_layers, tok_s_plan);
    free(per_layer);
    return s;
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

/* --model: the GGUF's non-expert bytes, after checking that its expert shape is the trace's. */
static mp_status apply_model(const char *path, const char *trace_path, const mp_sim_trace_facts *facts,
                             bool set_non_expert, mp_sim_config *cfg, mp_error *err)
{
    mp_model *m = NULL;
    mp_status st = mp_model_load(path, &m, err);
    if (st)
        return st;
    const int64_t bytes = (int64_t)mp_model_expert_bytes(m, 0);
    if ((facts->expert_bytes > 0 && facts->expert_bytes != bytes) || (facts->n_embd > 0 && facts->n_embd != m->hp.n_embd) ||
        (facts->n_ff > 0 && facts->n_ff != m->hp.n_ff_exp)) /* <= 0: the trace does not say */
        st = mp_fail(err, MP_ERR_ARG,
                     "%s: experts of %lld bytes (hidden %lld, FFN %lld) do not match trace %s "
                     "(%lld bytes, hidden %lld, FFN %lld)",
                     path, (long long)bytes, (long long)m->hp.n_embd, (long long)m->hp.n_ff_exp, trace_path,
                     (long long)facts->expert_bytes, (long long)facts->n_embd, (long long)facts->n_ff);
    else if (set_non_expert)
        cfg->non_expert_bytes = mp_model_dense_bytes(m);
    mp_model_free(m);
    return st;
}

/* Every output against every input and the outputs before it, before any work: none may
 * replace an input (compared by device and inode) or another output, and an existing one is
 * replaced only with --force (runtime/atomic_file.h). manifest gets OUT.strp.json. */
static mp_status check_outputs(const opts *o, char *manifest, size_t cap, mp_error *err)
{
    if (o->profile && (size_t)snprintf(manifest, cap, "%s.json", o->profile) >= cap)
        return mp_fail(err, MP_ERR_ARG, "--emit-profile %s: path too long", o->profile);
    mp_file_ref known[8] = {{o->trace, "the trace"}, {o->costs, "--costs"}, {o->model, "--model"},
                            {o->placement_profile, "--placement-profile"}};
    int n = 4;
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
    if (mp_sim_load_trace(o.trace, &lo, &trace, &facts, &err)) {
        fprintf(stderr, "moeplan simulate: error: %s\n", err.msg);
        mp_costs_free(&costs);
        return 1;
    }
    if (o.model && apply_model(o.model, o.trace, &facts, !o.non_expert_given, &cfg, &err))
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
    cfg.gpu = &gpu_entry;
    cfg.cpu = cpu;
    if (run_all(&trace, &cfg, &o, runs, &err))
        goto fail;
    if (o.sweep.n_values && run_sweep(&trace, &cfg, &o, &err))
        goto fail;
    if (costs.cpu_decode_layer_experts > 0) {
        const double f = mp_sim_cpu_anchor(&costs, cpu);
        if (f != 1.0)
            fprintf(stderr, "moeplan simulate: note: CPU expert costs x %.3f: the runtime's decode layer of %lld "
                            "CPU experts measured %.1f us (cpu_decode_layer), the %d-thread curves give %.1f\n",
                    f, (long long)costs.cpu_decode_layer_experts, costs.cpu_decode_layer.median_ns / 1e3,
                    cpu->threads, costs.cpu_decode_layer.median_ns / f / 1e3);
        else if (cpu->threads != costs.cpu_decode_layer_threads)
            fprintf(stderr, "moeplan simulate: note: cpu_decode_layer was measured on %d threads, the CPU entry "
                            "used has %d: its costs are the microbenchmark's, unscaled\n",
                    costs.cpu_decode_layer_threads, cpu->threads);
    }
    if (costs.far_decode_layer_far > 0) {
        if (costs.far_decode_layer_threads != cpu->threads || costs.far_decode_layer_experts != (int64_t)trace.top_k)
            fprintf(stderr, "moeplan simulate: note: far_decode_layer was measured for top-%lld on %d threads, the "
                            "trace is top-%u and the CPU entry used has %d threads: no far routes simulated\n",
                    (long long)costs.far_decode_layer_experts, costs.far_decode_layer_threads, trace.top_k,
                    cpu->threads);
        else
            fprintf(stderr, "moeplan simulate: note: far routes as the runtime runs them: floor(%d x c / %lld) of a "
                            "decode layer step's c cold routes on the GPU over the bus, the CPU's rest at the "
                            "level of far_decode_layer (%.1f us for %lld experts)\n",
                    costs.far_decode_layer_far, (long long)costs.far_decode_layer_experts,
                    costs.far_decode_layer.median_ns / 1e3,
                    (long long)(costs.far_decode_layer_experts - costs.far_decode_layer_far));
    }
    if (!costs.has_hybrid_layer) /* said once the run succeeded: errors stay one line */
        fprintf(stderr, "moeplan simulate: note: %s has no hybrid_layer (calibrated before it existed): a layer "
                        "holding any expert off the GPU is charged only its round trip, which under-predicts "
                        "per-expert placements (docs/simulator.md); a new `moeplan calibrate` measures it\n",
                o.costs);
    mp_sim_report rep = {o.trace, o.costs, &cfg, &trace, runs, o.n_budgets, {0}, NULL,
                         o.sweep.n_values ? &o.sweep : NULL};
    if (o.llamacpp) {
        for (int b = 0; b < o.n_budgets; b++)
            ot[b] = llamacpp_override(&trace, &runs[b].res[MP_POL_BEST_LAYERS],
                                      mp_sim_tok_s(mp_sim_rank_metrics(&runs[b].res[MP_POL_BEST_LAYERS])),
                                      mp_sim_tok_s(mp_sim_rank_metrics(&runs[b].res[MP_POL_PLAN])));
        rep.llamacpp_ot = ot;
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
            mp_sha256_file(o.trace, "trace", trace_hex, NULL, &err))
            goto fail;
        mp_strp_manifest m;
        mp_strp_manifest_init(&m);
        m.model_sha256 = facts.model_sha256[0] ? facts.model_sha256 : NULL;
        m.budget_bytes = runs[0].budget_bytes;
        m.policy = mp_sim_policy_name(o.profile_policy);
        m.params[m.n_params++] = (mp_strp_param){"non_expert_bytes", (double)cfg.non_expert_bytes};
        m.params[m.n_params++] = (mp_strp_param){"expert_bytes", (double)gpu_entry.expert_bytes};
        m.costs_sha256 = costs_hex;
        m.trace_sha256 = trace_hex;
        m.train_frac = cfg.train_frac;
        m.predicted_tok_s = mp_sim_tok_s(mp_sim_rank_metrics(r));
        /* coverage: the share of held-out routes the profile's resident experts serve */
        if (r->test.decisions)
            m.heldout_coverage = mp_sim_hit_rate(&r->test);
        if (mp_strp_write_file(o.profile, &r->profile, &err) || mp_strp_manifest_write(manifest, &m, &r->profile, &err))
            goto fail;
        printf("\nprofile %s (%s, %u resident of %u ranked) and manifest %s written\n", o.profile,
               m.policy, r->profile.slots, r->profile.n_ranked, manifest);
    }
    rc = 0;
    goto done;
fail:
    fprintf(stderr, "moeplan simulate: error: %s\n", err.msg);
    rc = 1;
done:
    for (int b = 0; b < MAX_BUDGETS; b++)
        free(ot[b]);
    free_runs(runs, o.n_budgets);
    for (int i = 0; o.sweep.res && i < o.sweep.n_values * o.n_budgets; i++)
        mp_sim_result_free(&o.sweep.res[i]);
    free(o.sweep.res);
    mp_sim_trace_free(&trace);
    mp_costs_free(&costs);
    mp_strp_free(&placed);
    return rc;
}
