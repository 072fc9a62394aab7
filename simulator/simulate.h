/* simulator/simulate.h — `moeplan simulate` as a library call: load the traces and the cost model,
 * replay every chosen policy at every budget (and the sweep, the llama.cpp command's whole layers,
 * the sensitivity re-runs), write the outputs asked for (JSON, SVG, the STRP profile and its
 * manifest), and hand every result back as values. `moeplan simulate` (cmd_simulate.c) and
 * `moeplan plan` (cmd_plan.c) both call it; neither builds the other's command line.
 *
 * Fail closed, nothing half-written: the outputs are checked against the inputs and each other
 * before any work (base/atomic_file.h: mp_output_check), every input is validated before any
 * output is written, and each output is written atomically. Nothing here prints: the notes a run
 * makes (what its predictions rest on) come back as text in the result.
 */
#ifndef MP_SIMULATOR_SIMULATE_H
#define MP_SIMULATOR_SIMULATE_H

#include <stdbool.h>
#include <stdint.h>

#include "runtime/costs.h"
#include "runtime/strp.h"
#include "simulator/llamacpp.h"
#include "simulator/report.h"
#include "simulator/sim.h"
#include "simulator/sim_load.h"

#define MP_SIMULATE_MAX_BUDGETS 16 /* the sensitivity table holds 16 budgets */
#define MP_SIMULATE_MAX_TRACES 16  /* shards of one model's collection */
#define MP_SIMULATE_MAX_NOTES 8

/* Where a simulation stands: the routing decisions replayed and the replays finished, of all
 * its replays (every policy at every budget, the sweep, the llama.cpp command's layers, the
 * sensitivity re-runs). */
typedef struct mp_simulate_progress {
    uint64_t decisions, decisions_total;
    int replays, replays_total;
} mp_simulate_progress;
typedef void (*mp_simulate_progress_fn)(void *user, const mp_simulate_progress *p);

typedef struct mp_simulate_options {
    const char *traces[MP_SIMULATE_MAX_TRACES]; /* (n_traces) replayed as one, in this order */
    int n_traces;
    const char *costs;             /* the cost file (runtime/costs.h) */
    /* The budget's fixed part (weights, KV cache, scratch), expert sizes and a shape check come
     * from the model; without one cfg.non_expert_bytes must be given (non_expert_given). */
    const char *model;
    bool non_expert_given;         /* cfg.non_expert_bytes is given: the model does not set it */
    int64_t ctx, batch;            /* the session's context and prefill rows (0: the runtime's) */
    int64_t max_rows;              /* replay the trace's first max_rows routing rows (0: all) */
    uint64_t budgets[MP_SIMULATE_MAX_BUDGETS]; /* (n_budgets) GPU bytes, as --gpu-budget counts */
    int n_budgets;
    /* The policies to replay at every budget; all-gpu and all-cpu always run, profile_policy runs
     * when a profile is written, MP_POL_PROFILE when placement_profile is given. */
    bool policies[MP_POL_COUNT];
    mp_sim_policy profile_policy;  /* the static policy whose placement `profile` gets */
    const char *expert_quant;      /* the cost entries of this quant (NULL: the trace's) */
    int threads;                   /* the CPU entry of this many threads (INT_MAX: the most) */
    bool as_decode;                /* every row as its own one-row step */
    bool llamacpp;                 /* the llama.cpp command at every budget (needs model) */
    uint64_t llamacpp_compute_bytes; /* llama.cpp's compute buffers as it printed them (0: the estimate) */
    bool sensitivity;              /* re-rank with each cost x0.8 and x1.2 */
    bool force;                    /* outputs may replace existing files (never an input) */
    const char *json, *svg;        /* outputs, or NULL */
    const char *profile;           /* the STRP profile at the first budget (+ PROFILE.json), or NULL */
    const char *placement_profile; /* an STRP profile replayed as policy 'profile', or NULL */
    mp_sim_sweep sweep;            /* n_values 0: no sweep (res is the result's) */
    /* --adaptive POLICY [--adaptive-slots N | P%] [--adaptive-inflight K]: every static policy
     * replayed again with an adaptive tier of N slots, or P % of each budget's (default 10 %: the
     * runtime's grammar and default, mp_tier_size_parse), beside its placement, as the runtime runs
     * one (mp_sim_config.adaptive; MP_TIER_OFF: none) */
    mp_tier_policy adaptive;
    uint64_t adaptive_slots;
    double adaptive_share;
    uint32_t adaptive_inflight;    /* 0: 2 x top_k, the runtime's default */
    /* train_frac, the online policies' parameters, pageable, host_read_gbs, non_moe_source and
     * (with non_expert_given) non_expert_bytes; the rest is set from the inputs. */
    mp_sim_config cfg;
    /* Told where the replays stand, during them (NULL: never): every few thousand steps of a
     * replay and after each. */
    mp_simulate_progress_fn progress;
    void *progress_user;
} mp_simulate_options;

/* Defaults: cfg as mp_sim_config_init, profile_policy plan, threads INT_MAX, nothing else set. */
void mp_simulate_options_init(mp_simulate_options *o);

typedef struct mp_simulate_result {
    bool checked;                  /* the options and outputs passed their checks (mp_simulate_refused) */
    mp_sim_trace trace;            /* the routing replayed (after max_rows) */
    mp_sim_trace_facts facts;
    char trace_names[4096];        /* the traces, " + " between them */
    const char *costs_path;        /* the options' */
    mp_costs costs;
    mp_cost_expert gpu;            /* the GPU entry, its expert size the trace's where it has one */
    /* With a model: each block's expert type as calibrate names it ("Q4_K/Q6_K"; n_blocks of them),
     * and, where the trace's layers differ in it, each trace layer's cost entries (cfg's) */
    char (*block_quant)[MP_EXPERT_QUANT_MAX];
    int64_t n_blocks;
    mp_sim_layer_experts *layer_experts;
    mp_sim_config cfg;             /* as replayed (costs, entries, fixed part, slot bytes) */
    int64_t ctx, batch;            /* with a model: the sizes the session resolves them to */
    mp_strp placed;                /* placement_profile, read */
    int n_budgets;
    mp_sim_budget_run runs[MP_SIMULATE_MAX_BUDGETS]; /* (n_budgets) every policy replayed */
    mp_sim_sweep sweep;            /* the options' sweep with its results (res: value-major) */
    uint64_t adaptive_slots;       /* the options' (0: no --adaptive; the runs' adaptive results) */
    mp_sim_sensitivity sens;
    mp_llamacpp_gpu llamacpp_gpu;  /* llama.cpp's own GPU memory for the model */
    char *llamacpp_text[MP_SIMULATE_MAX_BUDGETS]; /* (n_budgets) the table's lines, or NULL */
    mp_sim_llamacpp llamacpp[MP_SIMULATE_MAX_BUDGETS];
    /* the profile written (options' profile), the manifest beside it, and both said in one line
     * ("profile P (POLICY, N resident of M ranked) and manifest P.json written"; empty: none) */
    char manifest[4096];
    char profile_line[8400];
    /* What the predictions rest on, one line each, without the command's name: the budget's
     * fixed part, the expert size the trace gave, the CPU level, the far routes, floored steps. */
    char notes[MP_SIMULATE_MAX_NOTES][512];
    int n_notes;
} mp_simulate_result;

/* Run the simulation: check, load, replay, write. r is filled as far as it got (free it in any
 * case); it points into itself (cfg to its costs, entries and placed profile), so it is used where
 * it was filled, never copied. */
mp_status mp_simulate(const mp_simulate_options *o, mp_simulate_result *r, mp_error *err);
void mp_simulate_result_free(mp_simulate_result *r);

/* Whether mp_simulate's failure st was the caller's: options or outputs refused before any work
 * (MP_ERR_ARG), which a command reports as a usage error. */
static inline bool mp_simulate_refused(mp_status st, const mp_simulate_result *r)
{
    return st == MP_ERR_ARG && !r->checked;
}

/* Whether p can be the profile's policy: a static one (an online cache has no fixed placement to
 * export). MP_ERR_ARG naming it otherwise. */
mp_status mp_simulate_check_profile_policy(int p, mp_error *err);

/* What the table, JSON and SVG show of r (points into r: valid while r is). */
mp_sim_report mp_simulate_report(const mp_simulate_result *r);

/* Predicted ms per token of policy p at budget b over the whole trace (in-sample and held out
 * together); 0 when it did not run or has no tokens. */
double mp_simulate_ms_per_token(const mp_simulate_result *r, int b, mp_sim_policy p);
/* The CPU experts' share of it (mp_sim_metrics.cpu_ns per token, ms), likewise; 0 also when no
 * route ran on the CPU. */
double mp_simulate_cpu_ms_per_token(const mp_simulate_result *r, int b, mp_sim_policy p);

#endif
