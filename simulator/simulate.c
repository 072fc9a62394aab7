/* simulator/simulate.c — `moeplan simulate` as a library call (see simulate.h): the options are
 * checked (check_options, check_outputs), the inputs loaded (load_inputs), every replay run and
 * counted into the progress (replay_all: replay_budgets, replay_sweep, make_notes,
 * replay_llamacpp, replay_sensitivity, each replay through replay_one) and the outputs written
 * (write_outputs), in that order. */
#include "simulator/simulate.h"

#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/sha256.h"
#include "base/atomic_file.h"
#include "kernels/quant.h"
#include "runtime/decide.h"
#include "runtime/model.h"
#include "runtime/placement.h"
#include "runtime/session.h"

void mp_simulate_options_init(mp_simulate_options *o)
{
    memset(o, 0, sizeof *o);
    mp_sim_config_init(&o->cfg);
    o->profile_policy = MP_POL_PLAN;
    o->threads = INT_MAX;
}

/* ---- checks before any work ---- */

mp_status mp_simulate_check_profile_policy(int p, mp_error *err)
{
    if (p < 0 || p >= MP_POL_COUNT || mp_sim_policy_is_online(p))
        return mp_fail(err, MP_ERR_ARG, "--profile-policy %s: expected a static policy (an online cache has no "
                       "fixed placement to export)", mp_sim_policy_name(p));
    return MP_OK;
}

/* Options that contradict each other or lack what they need. */
static mp_status check_options(const mp_simulate_options *o, mp_error *err)
{
    if (o->n_traces < 1 || o->n_traces > MP_SIMULATE_MAX_TRACES || !o->costs || o->n_budgets < 1 ||
        o->n_budgets > MP_SIMULATE_MAX_BUDGETS)
        return mp_fail(err, MP_ERR_ARG, "needs TRACE.db, --costs and --budget (see moeplan simulate --help)");
    if (o->llamacpp_compute_bytes && !o->llamacpp)
        return mp_fail(err, MP_ERR_ARG, "--llamacpp-compute-buffer applies to --emit-llamacpp");
    if (o->llamacpp && !o->model)
        return mp_fail(err, MP_ERR_ARG, "--emit-llamacpp needs -m MODEL: the command names the GGUF, and its "
                       "metadata sizes llama.cpp's KV cache and weights");
    if (o->policies[MP_POL_PROFILE] && !o->placement_profile)
        return mp_fail(err, MP_ERR_ARG, "--policy profile needs --placement-profile P.strp");
    if (o->adaptive == MP_TIER_OFF && (o->adaptive_slots || o->adaptive_share > 0 || o->adaptive_inflight))
        return mp_fail(err, MP_ERR_ARG, "--adaptive-%s applies to an adaptive tier: expected --adaptive POLICY",
                       o->adaptive_slots || o->adaptive_share > 0 ? "slots" : "inflight");
    return mp_simulate_check_profile_policy(o->profile_policy, err);
}

/* Every output against every input and the outputs before it, before any work: none may
 * replace an input (compared by device and inode) or another output, and an existing one is
 * replaced only with force (base/atomic_file.h). manifest gets PROFILE.json. */
static mp_status check_outputs(const mp_simulate_options *o, char *manifest, size_t cap, mp_error *err)
{
    if (o->profile && (size_t)snprintf(manifest, cap, "%s.json", o->profile) >= cap)
        return mp_fail(err, MP_ERR_ARG, "--emit-profile %s: path too long", o->profile);
    mp_file_ref known[8 + MP_SIMULATE_MAX_TRACES] = {{o->costs, "--costs"}, {o->model, "--model"},
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

/* ---- inputs ---- */

static void add_note(mp_simulate_result *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void add_note(mp_simulate_result *r, const char *fmt, ...)
{
    if (r->n_notes == MP_SIMULATE_MAX_NOTES)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->notes[r->n_notes++], sizeof r->notes[0], fmt, ap);
    va_end(ap);
}

/* The GPU entries of c of this quant (NULL: any), these expert bytes (0: any) and this shape (n_embd
 * or n_ff <= 0: any): their count, *first the first of them (NULL when none). */
static int gpu_entries_matching(const mp_costs *c, const char *quant, uint64_t bytes, int64_t n_embd, int64_t n_ff,
                                const mp_cost_expert **first)
{
    int n = 0;
    *first = NULL;
    for (int i = 0; i < c->n_gpu_expert; i++) {
        const mp_cost_expert *e = &c->gpu_expert[i];
        if ((quant && strcmp(e->quant, quant)) || (bytes && e->expert_bytes != bytes) ||
            (n_embd > 0 && n_ff > 0 && (e->n_embd != n_embd || e->n_ff != n_ff)))
            continue;
        if (!n++)
            *first = e;
    }
    return n;
}

/* The cost entries for the trace's experts, at the options' threads: of the options' --expert
 * quant, else of the model's experts in the trace's first layer (first_quant, with -m), else the
 * one entry of the trace's expert shape, else (a cost file of several types) the one of the
 * trace's first layer's expert bytes, else of the trace's quant name. */
static mp_status choose_entries(const mp_costs *c, const mp_sim_trace_facts *facts, const mp_simulate_options *o,
                                const char *first_quant, const mp_cost_expert **gpu, const mp_cost_expert **cpu,
                                mp_error *err)
{
    const char *quant = o->expert_quant ? o->expert_quant : first_quant;
    int matches = gpu_entries_matching(c, quant, 0, facts->n_embd, facts->n_ff, gpu);
    if (matches != 1 && !quant && facts->expert_bytes > 0) /* several types: the first layer's, by its bytes */
        matches = gpu_entries_matching(c, NULL, (uint64_t)facts->expert_bytes, facts->n_embd, facts->n_ff, gpu);
    const char *named = !quant && facts->quant[0] ? facts->quant : NULL; /* the type the trace's run names */
    if (matches != 1 && named)
        matches = gpu_entries_matching(c, named, 0, facts->n_embd, facts->n_ff, gpu);
    if (matches != 1)
        return mp_fail(err, MP_ERR_ARG,
                       "costs %s: %d GPU expert entries match (quant %s%s%s, shape %lldx%lld): expected exactly one "
                       "(choose with --expert QUANT%s)",
                       o->costs, matches, quant ? quant : "any", named ? "; the trace's run names " : "",
                       named ? named : "", (long long)facts->n_embd, (long long)facts->n_ff,
                       matches > 1 && !o->model ? "; or give -m MODEL: a model whose layers' experts differ in type "
                                                  "is charged layer by layer" : "");
    *cpu = mp_costs_find_cpu(c, (*gpu)->quant, (*gpu)->n_embd, (*gpu)->n_ff, o->threads);
    if (!*cpu)
        return mp_fail(err, MP_ERR_ARG, "costs %s: no CPU expert entry for %s %lldx%lld: expected one beside the GPU entry",
                       o->costs, (*gpu)->quant, (long long)(*gpu)->n_embd, (long long)(*gpu)->n_ff);
    return MP_OK;
}

/* The model: checks that its expert shape is the trace's; then what the runtime will hold on the
 * GPU besides experts, as run/bench/collect --gpu-budget count it (weights, KV cache for the
 * context, scratch for the batch: mp_gpu_budget_compute, the runtime's own estimate; unless
 * non_expert_given), the largest layer's expert size (the slots a budget holds, so that they fit
 * in whichever layers the policy puts them, as the runtime places them), and whether the runtime
 * will have the staging buffers that prefill weight copies need. r->ctx and r->batch get the sizes
 * the session resolves them to; with llamacpp, r->llamacpp_gpu what llama.cpp would hold. */
static mp_status apply_model(const mp_simulate_options *o, mp_simulate_result *r, mp_error *err)
{
    const mp_sim_trace_facts *facts = &r->facts;
    mp_model *m = NULL;
    mp_status st = mp_model_load(o->model, &m, err);
    if (st)
        return st;
    mp_placement_geom g = {0};
    const int64_t bytes = (int64_t)mp_model_expert_bytes(m, 0);
    if ((facts->expert_bytes > 0 && facts->expert_bytes != bytes) || (facts->n_embd > 0 && facts->n_embd != m->hp.n_embd) ||
        (facts->n_ff > 0 && facts->n_ff != m->hp.n_ff_exp)) { /* <= 0: the trace does not say */
        st = mp_fail(err, MP_ERR_ARG,
                     "%s: experts of %lld bytes (hidden %lld, FFN %lld) do not match trace %s "
                     "(%lld bytes, hidden %lld, FFN %lld)",
                     o->model, (long long)bytes, (long long)m->hp.n_embd, (long long)m->hp.n_ff_exp, o->traces[0],
                     (long long)facts->expert_bytes, (long long)facts->n_embd, (long long)facts->n_ff);
        goto out;
    }
    const mp_session_params sp = {.n_ctx = r->ctx, .n_batch = r->batch};
    mp_gpu_budget b;
    if ((st = mp_session_resolve_sizes(m, &sp, &r->ctx, &r->batch, err)) ||
        (st = mp_placement_geom_from_model(m, &g, err)) ||
        (st = mp_gpu_budget_compute(&g, 0, r->ctx, r->batch, &b, err)))
        goto out;
    if (!o->non_expert_given)
        r->cfg.non_expert_bytes = b.fixed_bytes;
    if (o->llamacpp && (st = mp_llamacpp_gpu_from_gguf(m->gguf, r->ctx, &r->llamacpp_gpu, err)))
        goto out;
    if (o->llamacpp && o->llamacpp_compute_bytes)
        mp_llamacpp_gpu_set_compute_bytes(&r->llamacpp_gpu, o->llamacpp_compute_bytes);
    r->cfg.slot_bytes = 0;
    for (int64_t il = 0; il < g.n_layer; il++)
        r->cfg.slot_bytes = g.expert_bytes[il] > r->cfg.slot_bytes ? g.expert_bytes[il] : r->cfg.slot_bytes;
    if (!(r->block_quant = calloc((size_t)m->hp.n_layer + 1, sizeof *r->block_quant))) {
        st = mp_fail(err, MP_ERR_NOMEM, "simulate: out of memory");
        goto out;
    }
    r->n_blocks = m->hp.n_layer;
    for (int64_t il = 0; il < m->hp.n_layer; il++)
        mp_model_expert_quant(&m->layers[il], r->block_quant[il]);
    r->cfg.no_copies = !mp_gpu_staging(r->batch);
out:
    mp_placement_geom_free(&g);
    mp_model_free(m);
    return st;
}

/* llamacpp: the model's expert tensors must sit in the blocks of the trace's MoE layers. */
static mp_status llamacpp_check_blocks(const mp_simulate_options *o, const mp_simulate_result *r, mp_error *err)
{
    const mp_llamacpp_gpu *x = &r->llamacpp_gpu;
    const mp_sim_trace *t = &r->trace;
    uint32_t n = 0;
    for (uint32_t b = 0; b < x->n_blocks; b++)
        n += x->expert_bytes[b] > 0;
    for (uint32_t l = 0; l < t->n_layers; l++)
        if (t->model_layer[l] >= x->n_blocks || !x->expert_bytes[t->model_layer[l]])
            n = UINT32_MAX;
    if (n != t->n_layers)
        return mp_fail(err, MP_ERR_ARG, "%s: its expert tensors (blk.N.ffn_*_exps) are not in the blocks of trace "
                       "%s's %u MoE layers: expected the traced model", o->model, o->traces[0], t->n_layers);
    return MP_OK;
}

/* Trace layer l's experts: their type from the model (NULL without one). */
static const char *layer_quant(const mp_simulate_result *r, uint32_t l)
{
    const uint32_t b = r->trace.model_layer ? r->trace.model_layer[l] : l;
    return r->block_quant && (int64_t)b < r->n_blocks ? r->block_quant[b] : NULL;
}

/* Their bytes from the trace's node table (0: not given). */
static uint64_t layer_bytes(const mp_simulate_result *r, uint32_t l)
{
    return r->trace.expert_bytes ? r->trace.expert_bytes[l] : 0;
}

/* Whether trace layer l's experts are of layer 0's kind: by the model's types (by_quant), else by
 * the trace's bytes (a layer whose bytes are not given counts as layer 0's). */
static bool same_kind_as_first(const mp_simulate_result *r, bool by_quant, uint32_t l)
{
    if (by_quant)
        return !strcmp(layer_quant(r, l), layer_quant(r, 0));
    return !layer_bytes(r, l) || !layer_bytes(r, 0) || layer_bytes(r, l) == layer_bytes(r, 0);
}

/* A model whose traced layers' experts differ in type (llama.cpp's Q4_K_M: the down tensors of
 * about half its layers in Q6_K, the rest in Q4_K): each trace layer's GPU and CPU entries, of its
 * own type, shape and the run's threads (the first layer's type: the chosen gpu and cpu, with the
 * trace's expert size). The type is the model's (-m); without a model, the trace's node table's
 * expert bytes tell the layers apart. A type the cost file has no entry for is an error naming it
 * (calibrate measures every type of the model). Nothing when every layer has one type, or with
 * --expert (every layer that type). */
static mp_status layer_entries(const mp_simulate_options *o, mp_simulate_result *r, const mp_cost_expert *gpu,
                               const mp_cost_expert *cpu, mp_error *err)
{
    const mp_sim_trace *t = &r->trace;
    if (o->expert_quant || !t->n_layers)
        return MP_OK;
    const bool by_quant = r->block_quant != NULL;
    bool mixed = false;
    for (uint32_t l = 1; l < t->n_layers; l++)
        mixed |= !same_kind_as_first(r, by_quant, l);
    if (!mixed)
        return MP_OK;
    if (!(r->layer_experts = calloc(t->n_layers, sizeof *r->layer_experts)))
        return mp_fail(err, MP_ERR_NOMEM, "simulate: out of memory");
    for (uint32_t l = 0; l < t->n_layers; l++) {
        mp_sim_layer_experts *le = &r->layer_experts[l];
        if (same_kind_as_first(r, by_quant, l)) {
            le->gpu = &r->gpu, le->cpu = cpu;
            continue;
        }
        if (gpu_entries_matching(&r->costs, by_quant ? layer_quant(r, l) : NULL, by_quant ? 0 : layer_bytes(r, l),
                                 gpu->n_embd, gpu->n_ff, &le->gpu) != 1)
            le->gpu = NULL;
        le->cpu = le->gpu ? mp_costs_find_cpu(&r->costs, le->gpu->quant, gpu->n_embd, gpu->n_ff, o->threads) : NULL;
        if (!le->gpu || !le->cpu) {
            char what[64];
            if (by_quant)
                snprintf(what, sizeof what, "%s experts", layer_quant(r, l));
            else
                snprintf(what, sizeof what, "experts of %llu bytes", (unsigned long long)layer_bytes(r, l));
            return mp_fail(err, MP_ERR_ARG,
                           "costs %s: no single %s expert entry for trace layer %u's %s (the model's layers have "
                           "several expert types): expected a cost file from `moeplan calibrate` of this model",
                           o->costs, le->gpu ? "CPU" : "GPU", l, what);
        }
    }
    r->cfg.layer_experts = r->layer_experts;
    char kinds[400] = "";
    size_t at = 0;
    for (uint32_t l = 0; l < t->n_layers; l++) { /* each kind once, with its count of layers */
        const mp_cost_expert *g = r->layer_experts[l].gpu;
        bool seen = false;
        for (uint32_t j = 0; j < l; j++)
            seen |= r->layer_experts[j].gpu == g;
        if (seen)
            continue;
        uint32_t n = 0;
        for (uint32_t j = l; j < t->n_layers; j++)
            n += r->layer_experts[j].gpu == g;
        if (at < sizeof kinds)
            at += (size_t)snprintf(kinds + at, sizeof kinds - at, "%s%u layers of %s (%.2f MB)", at ? ", " : "", n,
                                   g->quant, (double)g->expert_bytes / 1e6);
    }
    add_note(r, "the model's layers have several expert types (%s): each layer is charged its own type's costs, "
             "and its share of the decode grid's cold-route time by its expert bytes over the layers' mean",
             kinds);
    return MP_OK;
}

/* The cost model, the traces, the model's sizes, the placement profile and the cost entries, all
 * checked against each other; r->cfg is then the replay's. */
static mp_status load_inputs(const mp_simulate_options *o, mp_simulate_result *r, mp_error *err)
{
    mp_status st = mp_costs_load(o->costs, &r->costs, err);
    if (st)
        return st;
    if ((st = mp_costs_require_gpu(&r->costs, o->costs, err))) /* every budget places experts on a GPU */
        return st;
    const mp_sim_load_options lo = {.as_decode = o->as_decode, .non_moe = o->cfg.non_moe_source == MP_NON_MOE_TRACE};
    if ((st = mp_sim_load_traces(o->traces, o->n_traces, &lo, &r->trace, &r->facts, err)))
        return st;
    for (int t = 0, n = 0; t < o->n_traces && n < (int)sizeof r->trace_names; t++)
        n += snprintf(r->trace_names + n, sizeof r->trace_names - (size_t)n, "%s%s", t ? " + " : "", o->traces[t]);
    if (o->max_rows)
        mp_sim_trace_keep_rows(&r->trace, (uint64_t)o->max_rows);
    if (!o->model && !o->non_expert_given)
        return mp_fail(err, MP_ERR_ARG, "--budget counts everything the runtime holds on the GPU (weights, KV cache, "
                       "scratch, experts), as --gpu-budget does: expected -m MODEL (or --non-expert-bytes N)");
    if (o->model && (st = apply_model(o, r, err)))
        return st;
    if (o->llamacpp && (st = llamacpp_check_blocks(o, r, err)))
        return st;
    if (o->placement_profile) { /* the reader refuses a profile of another geometry */
        const mp_strp_geometry geo = {mp_sim_trace_blocks(&r->trace), r->trace.n_experts};
        if ((st = mp_strp_read_file(o->placement_profile, &geo, &r->placed, err)))
            return st;
        r->cfg.profile = &r->placed;
    }
    const mp_cost_expert *gpu, *cpu;
    const char *first_quant = r->trace.n_layers ? layer_quant(r, 0) : NULL;
    if ((st = choose_entries(&r->costs, &r->facts, o, first_quant, &gpu, &cpu, err)))
        return st;
    r->gpu = *gpu;
    if ((st = layer_entries(o, r, gpu, cpu, err)))
        return st;
    if (r->facts.expert_bytes > 0 && (uint64_t)r->facts.expert_bytes != r->gpu.expert_bytes) {
        /* the trace measured the real model: its expert size wins over the calibration's */
        add_note(r, "expert size %lld bytes from the trace (cost file says %llu)", (long long)r->facts.expert_bytes,
                 (unsigned long long)r->gpu.expert_bytes);
        r->gpu.expert_bytes = (uint64_t)r->facts.expert_bytes;
    }
    const char *cal_isa = r->costs.cpu_kernels, *isa = mp_kernels_isa();
    if (cal_isa[0] && strcmp(cal_isa, isa) != 0) {
        if (strcmp(mp_kernels_isa_one_row(cal_isa), mp_kernels_isa_one_row(isa)) != 0)
            add_note(r, "the costs were calibrated with the %s CPU kernels, this process dispatches %s (its CPU or "
                     "MP_ISA): the CPU experts are charged the calibration's times", cal_isa, isa);
        else if (!o->as_decode) /* one-row steps run the same kernels at both levels */
            add_note(r, "the costs were calibrated with the %s CPU kernels, this process dispatches %s: their one-row "
                     "(decode) kernels are the same; CPU experts of several rows are charged the calibration's "
                     "times", cal_isa, isa);
    }
    r->cfg.costs = &r->costs;
    r->cfg.costs_name = o->costs;
    r->cfg.gpu = &r->gpu;
    r->cfg.cpu = cpu;
    return MP_OK;
}

/* ---- replays ---- */

/* The progress of the replays: the options' callback, what is done, and one replay's decisions
 * (every replay walks every step of the trace). mp_sim_config.progress_user of the replays. */
typedef struct progress_tracker {
    mp_simulate_progress_fn fn;
    void *user;
    mp_simulate_progress done;
    uint64_t per_replay;
} progress_tracker;

static void on_decisions(void *user, uint64_t decisions)
{
    progress_tracker *tr = user;
    mp_simulate_progress now = tr->done;
    now.decisions += decisions;
    tr->fn(tr->user, &now);
}

/* One replay (mp_sim_run), counted into the progress when c has one. */
static mp_status replay_one(const mp_sim_trace *t, const mp_sim_config *c, mp_sim_policy policy, mp_sim_result *out,
                            mp_error *err)
{
    const mp_status st = mp_sim_run(t, c, policy, out, err);
    if (!st && c->progress == on_decisions) {
        progress_tracker *tr = c->progress_user;
        tr->done.replays++;
        tr->done.decisions += tr->per_replay;
        tr->fn(tr->user, &tr->done);
    }
    return st;
}

static void free_runs(mp_sim_budget_run *runs, int n)
{
    for (int b = 0; b < n; b++)
        for (int p = 0; p < MP_POL_COUNT; p++) {
            if (runs[b].ran[p])
                mp_sim_result_free(&runs[b].res[p]);
            if (runs[b].ran_adaptive[p])
                mp_sim_result_free(&runs[b].adaptive[p]);
        }
}

/* Whether policy p gets a run with the adaptive tier beside it: a static placement that leaves
 * experts off the GPU (all-gpu leaves none). */
static bool adaptive_beside(const mp_simulate_options *o, int p)
{
    return o->adaptive != MP_TIER_OFF && !mp_sim_policy_is_online(p) && p != MP_POL_ALL_GPU;
}

/* The policies replayed at every budget: the options' and the ones always added. */
static void policies_run(const mp_simulate_options *o, bool run[MP_POL_COUNT])
{
    memcpy(run, o->policies, sizeof o->policies);
    run[MP_POL_ALL_GPU] = run[MP_POL_ALL_CPU] = true; /* baselines, always */
    if (o->placement_profile)
        run[MP_POL_PROFILE] = true;
    if (o->profile)
        run[o->profile_policy] = true;
}

/* Every policy at every budget under cfg; fills runs (n_budgets). */
static mp_status replay_budgets(const mp_simulate_options *o, const mp_sim_trace *t, const mp_sim_config *cfg,
                                mp_sim_budget_run *runs, mp_error *err)
{
    bool run[MP_POL_COUNT];
    policies_run(o, run);
    for (int b = 0; b < o->n_budgets; b++) {
        mp_sim_config c = *cfg;
        c.budget_bytes = o->budgets[b];
        runs[b].budget_bytes = o->budgets[b];
        mp_status st = mp_sim_slots(t, &c, &runs[b].slots, err);
        if (st)
            return st;
        for (int p = 0; p < MP_POL_COUNT; p++) {
            if (!run[p])
                continue;
            if ((st = replay_one(t, &c, (mp_sim_policy)p, &runs[b].res[p], err)))
                return st;
            runs[b].ran[p] = true;
        }
    }
    return MP_OK;
}

/* --adaptive: every static policy that ran at a budget, again with the adaptive tier beside its
 * placement (runs[b].adaptive). */
static mp_status replay_adaptive(const mp_simulate_options *o, mp_simulate_result *r, mp_error *err)
{
    for (int b = 0; b < o->n_budgets; b++)
        for (int p = 0; p < MP_POL_COUNT; p++) {
            if (!r->runs[b].ran[p] || !adaptive_beside(o, p))
                continue;
            mp_sim_config c = r->cfg;
            c.budget_bytes = o->budgets[b];
            c.adaptive = o->adaptive;
            c.adaptive_slots = o->adaptive_slots;
            c.adaptive_share = o->adaptive_share;
            c.adaptive_inflight = o->adaptive_inflight;
            mp_status st = replay_one(&r->trace, &c, (mp_sim_policy)p, &r->runs[b].adaptive[p], err);
            if (st)
                return st;
            r->runs[b].ran_adaptive[p] = true;
        }
    return MP_OK;
}

/* The sweep: its policy at every budget for every value of its parameter, the other parameters as
 * configured; fills r->sweep.res (value-major). */
static mp_status replay_sweep(const mp_simulate_options *o, mp_simulate_result *r, mp_error *err)
{
    mp_sim_sweep *sw = &r->sweep;
    sw->res = calloc((size_t)sw->n_values * (size_t)o->n_budgets, sizeof *sw->res);
    if (!sw->res)
        return mp_fail(err, MP_ERR_NOMEM, "simulate: out of memory for the sweep");
    for (int v = 0; v < sw->n_values; v++) {
        mp_sim_config c = r->cfg;
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
            mp_status st = replay_one(&r->trace, &c, sw->policy, &sw->res[(size_t)v * o->n_budgets + b], err);
            if (st)
                return st;
        }
    }
    return MP_OK;
}

/* Whether llama.cpp's own GPU memory (weights, KV cache, compute buffers) fits the budget: only
 * then is there a command, and its layers to replay. */
static bool llamacpp_fits(const mp_simulate_result *r, uint64_t budget_bytes)
{
    return budget_bytes >= r->llamacpp_gpu.fixed_bytes;
}

static double ms_per_token(const mp_sim_result *res)
{
    const mp_sim_metrics *m = mp_sim_rank_metrics(res);
    return m->tokens ? m->time_ns / 1e6 / (double)m->tokens : 0;
}

/* The whole layers llama.cpp can keep on the GPU at a budget: best-layers, replayed with
 * llama.cpp's own GPU memory as the budget's fixed part and its expert tensors as the slots;
 * cpu_block (n_blocks, zeroed) gets the blocks whose experts stay on the CPU, *ms_layers its
 * prediction and *ms_plan the per-expert plan's in the same memory (what an STRP profile would
 * give llama.cpp). */
static mp_status llamacpp_layers(const mp_simulate_result *r, uint64_t budget_bytes, bool *cpu_block,
                                 double *ms_layers, double *ms_plan, mp_error *err)
{
    const mp_llamacpp_gpu *x = &r->llamacpp_gpu;
    const mp_sim_trace *t = &r->trace;
    /* one slot = the largest per-expert share of a layer's expert tensors, so that any whole
     * layers the policy picks fit */
    uint64_t slot = 0;
    for (uint32_t l = 0; l < t->n_layers; l++) {
        const uint64_t b = (x->expert_bytes[t->model_layer[l]] + t->n_experts - 1) / t->n_experts;
        slot = b > slot ? b : slot;
    }
    mp_sim_config c = r->cfg;
    c.budget_bytes = budget_bytes;
    c.non_expert_bytes = x->fixed_bytes;
    c.slot_bytes = slot;
    uint32_t *per_block = calloc(x->n_blocks, sizeof *per_block); /* (n_blocks) resident experts */
    if (!per_block)
        return mp_fail(err, MP_ERR_NOMEM, "simulate: out of memory for the llama.cpp command");
    mp_sim_result layers, plan;
    memset(&layers, 0, sizeof layers);
    memset(&plan, 0, sizeof plan);
    mp_status st = replay_one(t, &c, MP_POL_BEST_LAYERS, &layers, err);
    if (!st)
        st = replay_one(t, &c, MP_POL_PLAN, &plan, err);
    if (!st) {
        for (uint32_t i = 0; i < mp_strp_resident(&layers.profile); i++)
            per_block[layers.profile.ranked[i].layer]++;
        for (uint32_t l = 0; l < t->n_layers; l++)
            cpu_block[t->model_layer[l]] = per_block[t->model_layer[l]] < t->n_experts;
        *ms_layers = ms_per_token(&layers);
        *ms_plan = ms_per_token(&plan);
    }
    mp_sim_result_free(&layers);
    mp_sim_result_free(&plan);
    free(per_block);
    return st;
}

/* The llama.cpp command at one budget (llamacpp_layers), what the GPU then holds, and its
 * prediction beside the per-expert plan's and all-CPU's. *text_out gets the table's lines
 * (malloc'd) and *out the numbers (out->command malloc'd, NULL when llama.cpp's own needs exceed
 * the budget). */
static mp_status llamacpp_at(const mp_simulate_options *o, const mp_simulate_result *r, const mp_sim_budget_run *run,
                             char **text_out, mp_sim_llamacpp *out, mp_error *err)
{
    const mp_llamacpp_gpu *x = &r->llamacpp_gpu;
    const mp_sim_trace *t = &r->trace;
    const size_t cap = 16384;
    char *text = malloc(cap), *cmd = malloc(cap);
    bool *cpu_block = calloc(x->n_blocks, sizeof *cpu_block);
    *text_out = NULL;
    *out = (mp_sim_llamacpp){.weights_bytes = x->weights_bytes, .kv_bytes = x->kv_bytes,
                             .compute_bytes = x->compute_bytes, .kv_cells = x->n_ctx};
    if (!text || !cmd || !cpu_block) {
        free(text), free(cmd), free(cpu_block);
        return mp_fail(err, MP_ERR_NOMEM, "simulate: out of memory for the llama.cpp command");
    }
    char budget[32], weights[32], kv[32], compute[32], fixed[32], experts[32], total[32];
    mp_format_bytes(run->budget_bytes, budget, sizeof budget);
    mp_format_bytes(x->weights_bytes, weights, sizeof weights);
    mp_format_bytes(x->kv_bytes, kv, sizeof kv);
    mp_format_bytes(x->compute_bytes, compute, sizeof compute);
    mp_format_bytes(x->fixed_bytes, fixed, sizeof fixed);
    if (!llamacpp_fits(r, run->budget_bytes)) {
        snprintf(text, cap, "no command: llama.cpp's own GPU memory (weights %s + KV cache %s at -c %lld + compute "
                 "buffers %s, estimated) = %s exceeds the budget %s", weights, kv, (long long)r->ctx, compute,
                 fixed, budget);
        free(cmd), free(cpu_block);
        *text_out = text;
        return MP_OK;
    }
    double ms_layers = 0, ms_plan = 0;
    mp_status st = llamacpp_layers(r, run->budget_bytes, cpu_block, &ms_layers, &ms_plan, err);
    if (st) {
        free(text), free(cmd), free(cpu_block);
        return st;
    }
    uint64_t gpu_expert_bytes = 0;
    size_t n = 0;
    char cpu_list[4096] = "";
    uint32_t n_cpu = 0;
    for (uint32_t l = 0; l < t->n_layers; l++) {
        const uint32_t b = t->model_layer[l];
        if (!cpu_block[b])
            gpu_expert_bytes += x->expert_bytes[b];
        else if (n < sizeof cpu_list)
            n += (size_t)snprintf(cpu_list + n, sizeof cpu_list - n, "%s%u", n_cpu++ ? "," : "", b);
        else
            n_cpu++;
    }
    mp_format_bytes(gpu_expert_bytes, experts, sizeof experts);
    mp_format_bytes(x->fixed_bytes + gpu_expert_bytes, total, sizeof total);
    const double ms_cpu = ms_per_token(&run->res[MP_POL_ALL_CPU]);
    char kept[96] = "";
    if (ms_cpu > ms_plan)
        snprintf(kept, sizeof kept, ": it keeps %.0f %% of the plan's gain over all-CPU",
                 100.0 * (ms_cpu - ms_layers) / (ms_cpu - ms_plan));
    if (!mp_llamacpp_command(o->model, r->ctx, x, cpu_block, cmd, cap)) {
        snprintf(cmd, cap, "(the command is longer than %zu bytes)", cap - 1);
    }
    snprintf(text, cap,
             "%s\n"
             "                experts on the CPU: %s%s (%u of %u MoE layers); GPU: weights %s + KV cache %s (-c %lld "
             "as %lld cells, F16) + compute buffers %s (estimate, docs/simulator.md) + experts %s = %s of %s\n"
             "                predicted %.4f ms/token for these whole layers, %.4f for the per-expert plan in "
             "the same memory, %.4f all-CPU%s; llama.cpp places whole tensors (all experts of a layer): per-expert placement needs "
             "the STRP profile (--emit-profile, schemas/strp.md)",
             cmd, n_cpu ? "blocks " : "none", cpu_list, n_cpu, t->n_layers, weights, kv, (long long)r->ctx,
             (long long)x->n_ctx, compute, experts, total, budget, ms_layers, ms_plan, ms_cpu, kept);
    free(cpu_block);
    out->command = cmd;
    out->gpu_expert_bytes = gpu_expert_bytes;
    out->ms_layers = ms_layers, out->ms_plan = ms_plan, out->ms_all_cpu = ms_cpu;
    *text_out = text;
    return MP_OK;
}

static mp_status replay_llamacpp(const mp_simulate_options *o, mp_simulate_result *r, mp_error *err)
{
    for (int b = 0; b < o->n_budgets; b++) {
        mp_status st = llamacpp_at(o, r, &r->runs[b], &r->llamacpp_text[b], &r->llamacpp[b], err);
        if (st)
            return st;
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

/* Sensitivity: everything again with each cost x0.8 and x1.2; per budget the best policy and how
 * many policies changed rank against r->runs. */
static mp_status replay_sensitivity(const mp_simulate_options *o, mp_simulate_result *r, mp_error *err)
{
    int base_rank[MP_SIMULATE_MAX_BUDGETS][MP_POL_COUNT];
    for (int b = 0; b < o->n_budgets; b++)
        rank_policies(&r->runs[b], base_rank[b]);
    for (int c = 0; c < MP_COST_PARTS; c++)
        for (int k = 0; k < 2; k++) {
            mp_sim_config sc = r->cfg;
            sc.scale[c] = k ? 1.2 : 0.8;
            mp_sim_budget_run alt[MP_SIMULATE_MAX_BUDGETS];
            memset(alt, 0, sizeof alt);
            mp_status st = replay_budgets(o, &r->trace, &sc, alt, err);
            for (int b = 0; !st && b < o->n_budgets; b++) {
                int rank[MP_POL_COUNT];
                r->sens.best[c][k][b] = rank_policies(&alt[b], rank);
                int moved = 0;
                for (int p = 0; p < MP_POL_COUNT; p++)
                    moved += rank[p] != base_rank[b][p];
                r->sens.rank_changes[c][k][b] = moved;
            }
            free_runs(alt, o->n_budgets);
            if (st)
                return st;
        }
    r->sens.done = true;
    return MP_OK;
}

/* How many replays the options make (for the progress): what replay_budgets, replay_sweep,
 * replay_llamacpp and replay_sensitivity run. */
static int count_replays(const mp_simulate_options *o, const mp_simulate_result *r)
{
    bool run[MP_POL_COUNT];
    policies_run(o, run);
    int per_budget = 0, adaptive = 0;
    for (int p = 0; p < MP_POL_COUNT; p++) {
        per_budget += run[p];
        adaptive += run[p] && adaptive_beside(o, p);
    }
    int n = per_budget * o->n_budgets * (1 + (o->sensitivity ? 2 * MP_COST_PARTS : 0)) + adaptive * o->n_budgets;
    n += r->sweep.n_values * o->n_budgets;
    for (int b = 0; o->llamacpp && b < o->n_budgets; b++)
        n += llamacpp_fits(r, o->budgets[b]) ? 2 : 0; /* best-layers and plan */
    return n;
}

static void make_notes(const mp_simulate_options *o, mp_simulate_result *r);

/* Every replay the options ask for, and the notes on what they rest on. */
static mp_status replay_all(const mp_simulate_options *o, mp_simulate_result *r, mp_error *err)
{
    r->n_budgets = o->n_budgets;
    mp_status st = replay_budgets(o, &r->trace, &r->cfg, r->runs, err);
    if (st)
        return st;
    if (o->adaptive != MP_TIER_OFF && (st = replay_adaptive(o, r, err)))
        return st;
    if (r->sweep.n_values && (st = replay_sweep(o, r, err)))
        return st;
    make_notes(o, r);
    if (o->llamacpp && (st = replay_llamacpp(o, r, err)))
        return st;
    if (o->sensitivity && (st = replay_sensitivity(o, r, err)))
        return st;
    return MP_OK;
}

/* ---- notes and outputs ---- */

/* What the predictions rest on, said once they exist: the budget's fixed part, the CPU level, the
 * far routes decided, and any layer step held to the floor. */
static void make_notes(const mp_simulate_options *o, mp_simulate_result *r)
{
    const mp_sim_config *cfg = &r->cfg;
    char fixed[32];
    mp_format_bytes(cfg->non_expert_bytes, fixed, sizeof fixed);
    if (o->model)
        add_note(r, "each budget holds %s besides experts (%s at --ctx-size %lld, --batch-size %lld, as --gpu-budget "
                 "counts it)", fixed, o->non_expert_given ? "--non-expert-bytes" : "weights, KV cache and scratch",
                 (long long)r->ctx, (long long)r->batch);
    const double f = mp_decide_cpu_anchor(cfg->costs, cfg->cpu, 1.0);
    if (f != 1.0)
        add_note(r, "CPU expert curves x %.3f: the decode grid's all-cold step (%d CPU experts, far routes off) "
                 "measured in the runtime, over the %d-thread microbenchmark", f, cfg->costs->decode.top_k,
                 cfg->cpu->threads);
    uint64_t floored = 0, far = 0, split = 0, routes = 0;
    for (int b = 0; b < r->n_budgets; b++)
        for (int p = 0; p < MP_POL_COUNT; p++)
            if (r->runs[b].ran[p]) {
                const mp_sim_metrics *m[2] = {&r->runs[b].res[p].train, &r->runs[b].res[p].test};
                for (int k = 0; k < 2; k++)
                    floored += m[k]->floored, far += m[k]->routes_far, split += m[k]->routes_split,
                    routes += m[k]->decisions;
            }
    if (far)
        add_note(r, "far routes (the GPU reading cold experts over the bus, as the runtime decides them from the "
                 "decode grid): %.1f %% of all routes simulated, %.1f %% split with the CPU along their FFN rows",
                 100.0 * (double)far / (double)(routes ? routes : 1), 100.0 * (double)split / (double)(routes ? routes : 1));
    const mp_cost_decode *dg = &cfg->costs->decode;
    const int rule = dg->n_points && dg->far_max > 0 ? mp_decide_far_split_of_grid(dg->top_k, dg->n_ff, dg->quant) : 0;
    if (far && dg->far_split < rule)
        add_note(r, "%s's decode grid counts far work in 1/%d of an expert, this build's rule in 1/%d "
                 "(runtime/decide.h, mp_decide_far_split): a calibration now may balance the cores and the bus "
                 "closer than these predictions do", o->costs, dg->far_split, rule);
    mp_decode_raised raised;
    if (mp_costs_decode_raised(cfg->costs, &raised) && raised.n)
        add_note(r, "%d far point%s of %s's decode grid measured a CPU side below its CPU experts' time alone "
                 "slowed by the cores' share beside the bus; the simulation charges that time instead (the most: %d "
                 "cold, %d far, %.1f us against %.1f; runtime/decide.h, mp_decode_costs_settle)", raised.n,
                 raised.n == 1 ? "" : "s", o->costs, raised.cold, raised.far, raised.from_ns / 1e3,
                 raised.to_ns / 1e3);
    mp_cost_spread spread;
    if (mp_cost_decode_spread(dg, &spread))
        add_note(r, "%s's decode grid spread %.1f %% of a layer's time on average while it was measured (quiet "
                 "hosts: under %.0f %%): the one-row steps it charges and the far routes it decides follow that "
                 "noise (calibrate again on a quiet machine)", o->costs, 100 * spread.mean, 100 * MP_COST_GRID_NOISY);
    mp_cost_inversion inv;
    if (mp_cost_cpu_curve_inverted(cfg->costs, &inv))
        add_note(r, "in %s a CPU call of %g %s expert%s took %.1f us and one of %g %.1f (%.1fx for less work; quiet "
                 "hosts: at most %.1fx): the CPU expert costs it charges follow the noise of a busy host (calibrate "
                 "again on a quiet machine)", o->costs, inv.k_lo, inv.entry->quant, inv.k_lo == 1 ? "" : "s",
                 inv.lo_ns / 1e3, inv.k_hi, inv.hi_ns / 1e3, inv.lo_ns / inv.hi_ns, MP_COST_CURVE_INVERTED);
    if (floored)
        add_note(r, "%llu layer steps were charged the floor of reading their cold experts from host memory (%s's "
                 "costs are below it: calibrate this model again)", (unsigned long long)floored, o->costs);
    if (cfg->host_read_gbs > 0 && !cfg->costs->host_read_window)
        add_note(r, "--host-read-gbs %.1f scales the CPU's costs from %s's level, %.1f GB/s, which an older probe "
                 "measured (each thread's one pass until the slowest finished: 20-40 %% lower on a busy host than the "
                 "window probe of mp_membw, bench and calibrate now): give a rate from that probe, or calibrate again",
                 cfg->host_read_gbs, o->costs, mp_costs_host_level_gbs(cfg->costs));
    if (!strncmp(cfg->costs->machine.gpu, "synthetic", 9))
        add_note(r, "%s's GPU is '%s': its GPU costs are made up, not measured, so these predictions say nothing "
                 "about any machine (calibrate on the one that will serve the model)", o->costs,
                 cfg->costs->machine.gpu);
    if (!(cfg->costs->absent & MP_COST_ABSENT_DECODE) && !(cfg->costs->host_bus_gbs > 0))
        add_note(r, "the floor of reading cold experts from host memory sums the cores' and the bus's rates, each "
                 "measured alone (%s has no host_bus, the two readers measured at once: calibrate again to have it)",
                 o->costs);
}

/* The profile of the profile policy at the first budget, and its manifest (r->manifest). */
static mp_status write_profile(const mp_simulate_options *o, mp_simulate_result *r, mp_error *err)
{
    const mp_sim_result *res = &r->runs[0].res[o->profile_policy];
    char costs_hex[65], trace_hex[65];
    mp_status st = mp_sha256_file(o->costs, "costs", costs_hex, NULL, err);
    if (!st && o->n_traces == 1)
        st = mp_sha256_file(o->traces[0], "trace", trace_hex, NULL, err);
    if (st)
        return st;
    mp_strp_manifest m;
    mp_strp_manifest_init(&m);
    m.model_sha256 = r->facts.model_sha256[0] ? r->facts.model_sha256 : NULL;
    m.budget_bytes = r->runs[0].budget_bytes;
    m.policy = mp_sim_policy_name(o->profile_policy);
    m.params[m.n_params++] = (mp_strp_param){"non_expert_bytes", (double)r->cfg.non_expert_bytes};
    m.params[m.n_params++] = (mp_strp_param){"expert_bytes", (double)r->gpu.expert_bytes};
    m.costs_sha256 = costs_hex;
    m.trace_sha256 = o->n_traces == 1 ? trace_hex : NULL; /* null: made from several traces */
    m.train_frac = r->cfg.train_frac;
    m.predicted_tok_s = mp_sim_tok_s(mp_sim_rank_metrics(res));
    /* coverage: the share of held-out routes the profile's resident experts serve */
    if (res->test.decisions)
        m.heldout_coverage = mp_sim_hit_rate(&res->test);
    if ((st = mp_strp_write_file(o->profile, &res->profile, err)) ||
        (st = mp_strp_manifest_write(r->manifest, &m, &res->profile, err)))
        return st;
    snprintf(r->profile_line, sizeof r->profile_line, "profile %s (%s, %u resident of %u ranked) and manifest %s written",
             o->profile, m.policy, mp_strp_resident(&res->profile), mp_strp_ranking_len(&res->profile), r->manifest);
    return MP_OK;
}

static mp_status write_outputs(const mp_simulate_options *o, mp_simulate_result *r, mp_error *err)
{
    const mp_sim_report rep = mp_simulate_report(r);
    mp_status st = MP_OK;
    if (o->json && (st = mp_sim_report_json(o->json, &rep, err)))
        return st;
    if (o->svg && (st = mp_sim_report_svg(o->svg, &rep, err)))
        return st;
    if (o->profile)
        st = write_profile(o, r, err);
    return st;
}

/* ---- the entry ---- */

mp_status mp_simulate(const mp_simulate_options *o, mp_simulate_result *r, mp_error *err)
{
    memset(r, 0, sizeof *r);
    r->costs_path = o->costs;
    r->cfg = o->cfg;
    r->cfg.adaptive = MP_TIER_OFF; /* the tier only in the adaptive runs (replay_adaptive) */
    r->ctx = o->ctx;
    r->batch = o->batch;
    r->sweep = o->sweep;
    r->sweep.res = NULL;
    r->adaptive_slots = o->adaptive != MP_TIER_OFF ? o->adaptive_slots : 0;
    mp_status st = check_options(o, err);
    if (!st)
        st = check_outputs(o, r->manifest, sizeof r->manifest, err);
    if (st)
        return st;
    r->checked = true;
    if ((st = load_inputs(o, r, err)))
        return st;
    progress_tracker tr = {o->progress, o->progress_user, {0}, r->trace.n_ids};
    if (o->progress) { /* the replays count into tr while it lives */
        tr.done.replays_total = count_replays(o, r);
        tr.done.decisions_total = (uint64_t)tr.done.replays_total * tr.per_replay;
        r->cfg.progress = on_decisions;
        r->cfg.progress_user = &tr;
    }
    st = replay_all(o, r, err);
    r->cfg.progress = NULL;
    r->cfg.progress_user = NULL;
    if (st)
        return st;
    return write_outputs(o, r, err);
}

void mp_simulate_result_free(mp_simulate_result *r)
{
    for (int b = 0; b < MP_SIMULATE_MAX_BUDGETS; b++)
        free(r->llamacpp_text[b]), free(r->llamacpp[b].command);
    mp_llamacpp_gpu_free(&r->llamacpp_gpu);
    free(r->block_quant);
    free(r->layer_experts);
    free_runs(r->runs, r->n_budgets);
    for (int i = 0; r->sweep.res && i < r->sweep.n_values * r->n_budgets; i++)
        mp_sim_result_free(&r->sweep.res[i]);
    free(r->sweep.res);
    mp_sim_trace_free(&r->trace);
    mp_costs_free(&r->costs);
    mp_strp_free(&r->placed);
    memset(r, 0, sizeof *r);
}

mp_sim_report mp_simulate_report(const mp_simulate_result *r)
{
    const bool llamacpp = r->llamacpp_text[0] != NULL; /* made at every budget or none */
    return (mp_sim_report){
        .trace_path = r->trace_names,
        .costs_path = r->costs_path,
        .cfg = &r->cfg,
        .trace = &r->trace,
        .runs = r->runs,
        .n_runs = r->n_budgets,
        .sens = r->sens,
        .llamacpp_ot = llamacpp ? r->llamacpp_text : NULL,
        .llamacpp = llamacpp ? r->llamacpp : NULL,
        .sweep = r->sweep.n_values ? &r->sweep : NULL,
        .adaptive_slots = r->adaptive_slots,
    };
}

/* ms per token of policy p at budget b, over the whole trace, of the time `of` takes from its
 * metrics; 0 when it did not run or has no tokens */
static double per_token_ms(const mp_simulate_result *r, int b, mp_sim_policy p, double (*of)(const mp_sim_metrics *))
{
    if (b < 0 || b >= r->n_budgets || p < 0 || p >= MP_POL_COUNT || !r->runs[b].ran[p])
        return 0;
    const mp_sim_result *res = &r->runs[b].res[p];
    const uint64_t tokens = res->train.tokens + res->test.tokens;
    return tokens ? (of(&res->train) + of(&res->test)) / (double)tokens / 1e6 : 0;
}

static double time_of(const mp_sim_metrics *m) { return m->time_ns; }
static double cpu_of(const mp_sim_metrics *m) { return m->cpu_ns; }

double mp_simulate_cpu_ms_per_token(const mp_simulate_result *r, int b, mp_sim_policy p)
{
    return per_token_ms(r, b, p, cpu_of);
}

double mp_simulate_ms_per_token(const mp_simulate_result *r, int b, mp_sim_policy p)
{
    return per_token_ms(r, b, p, time_of);
}
