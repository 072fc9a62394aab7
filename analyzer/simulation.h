/* analyzer/simulation.h — a `moeplan simulate --json` document read for the report
 * (`analyze --simulation FILE`): the predicted speed of every policy at every budget, so that the
 * report can say whether the routing's skew is worth a per-expert placement, and at which budget.
 *
 * The reader is strict about what it takes: the file must be one JSON object (no repeated key at
 * any depth, nothing after it), "format" "moeplan-simulation" and "version" 1, a "trace" string,
 * "trace_geometry" with the layers, experts and top-k, and 1..MP_AN_SIM_MAX_BUDGETS budgets of
 * distinct byte counts, each with 1..MP_AN_SIM_MAX_POLICIES policies of distinct names, each with
 * "in_sample" and "held_out" metrics whose decisions, tok/s and ms/token are what simulate writes
 * (tok/s and ms/token > 0, or null where the split has no tokens). Each violation is one line
 * naming the file and the JSON path ($.budgets[1].policies[3].held_out.tok_s) and what was
 * expected. Members it does not read are ignored (simulate's per-layer hit rates, sweeps, ...),
 * so that a simulation that carries more still reads.
 *
 * The speed reported for a (budget, policy) is the held-out split's where it has decisions, else
 * the in-sample one's: the split simulate itself ranks policies by.
 */
#ifndef MP_ANALYZER_SIMULATION_H
#define MP_ANALYZER_SIMULATION_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/error.h"

#define MP_AN_SIM_MAX_BUDGETS 64
#define MP_AN_SIM_MAX_POLICIES 32
#define MP_AN_SIM_NAME_MAX 32 /* a policy name, NUL included */

typedef struct mp_an_sim_point {
    bool ran;              /* the policy was simulated at this budget */
    bool held_out;         /* tok_s and ms_per_token are the held-out split's (else in-sample) */
    double tok_s, ms_per_token;
} mp_an_sim_point;

typedef struct mp_an_simulation {
    char trace[256];       /* $.trace as simulate recorded it (cut to fit) */
    int64_t moe_layers, experts, top_k;
    int n_budgets, n_policies;
    int order[MP_AN_SIM_MAX_BUDGETS]; /* budget indices by increasing budget_bytes */
    double budget_bytes[MP_AN_SIM_MAX_BUDGETS];
    char policy[MP_AN_SIM_MAX_POLICIES][MP_AN_SIM_NAME_MAX]; /* in order of first appearance */
    mp_an_sim_point pt[MP_AN_SIM_MAX_BUDGETS][MP_AN_SIM_MAX_POLICIES]; /* [budget][policy] */
} mp_an_simulation;

/* Read the file at path (at most 64 MiB). */
mp_status mp_an_simulation_load(const char *path, mp_an_simulation *out, mp_error *err);
/* The same from text (n bytes); name is the file in messages. */
mp_status mp_an_simulation_parse(const char *text, size_t n, const char *name,
                                 mp_an_simulation *out, mp_error *err);
/* The policy's index, or -1. */
int mp_an_simulation_policy(const mp_an_simulation *s, const char *name);

#endif
