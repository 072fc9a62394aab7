/* simulator/sim_load.h — from a moeplan trace (SQLite, collector/trace_read.h) to the in-memory
 * routing trace the replay walks. */
#ifndef MP_SIMULATOR_SIM_LOAD_H
#define MP_SIMULATOR_SIM_LOAD_H

#include <stdbool.h>
#include <stdint.h>

#include "simulator/sim.h"

typedef struct mp_sim_load_options {
    bool as_decode; /* split every step into one-row steps (replay prefill routing as decode) */
    /* Also load each step's measured non-MoE time into mp_sim_trace.non_moe_ns (for
     * MP_NON_MOE_TRACE): steps.duration_ns minus the MoE time of the step's nodes from the timing
     * table, per node max(gpu_expert_ns, d2h_ns + cpu_expert_ns + h2d_ns) + merge_ns (sync_ns is
     * left out: see sim_load.c). With as_decode, the one-row steps of a prefill step (or of any
     * step of more than one row) each get the median of the decode steps' values. Fails closed
     * (MP_ERR_FORMAT naming the file and the (request, step)) on a NULL duration, missing or
     * negative timing, a remainder below 0, or as_decode with no decode step. */
    bool non_moe;
} mp_sim_load_options;

/* What the trace says about the model, for choosing the cost entries (-1 / "" when unknown). */
typedef struct mp_sim_trace_facts {
    int64_t expert_bytes, n_embd, n_ff;
    char model_sha256[65];
    char quant[64]; /* the run's expert types as cost files name them (mp_expert_quant_from_types), else
                       its quant_types text */
} mp_sim_trace_facts;

/* Loads the whole routing of a complete trace (memory: 2 bytes per routing decision). */
mp_status mp_sim_load_trace(const char *path, const mp_sim_load_options *opt, mp_sim_trace *out,
                            mp_sim_trace_facts *facts, mp_error *err);

/* Several complete traces of one model as one (n_paths >= 1; one is mp_sim_load_trace): refused,
 * naming both files and what differs, unless they pass the analyzer's merge checks (same model
 * SHA-256, shapes and node table; not the same run twice, by file, run id or import source);
 * then their steps in the order given, each trace's requests renumbered after the previous
 * traces' so that they stay distinct. facts are the first trace's (the others' model agrees). */
mp_status mp_sim_load_traces(const char *const *paths, int n_paths, const mp_sim_load_options *opt,
                             mp_sim_trace *out, mp_sim_trace_facts *facts, mp_error *err);

#endif
