/* simulator/report.h — the outputs of `moeplan simulate`: a text table, a JSON document and an
 * SVG chart of policies × budgets. Files are written atomically (base/atomic_file.h). */
#ifndef MP_SIMULATOR_REPORT_H
#define MP_SIMULATOR_REPORT_H

#include <stdio.h>

#include "simulator/sim.h"

typedef struct mp_sim_budget_run {
    uint64_t budget_bytes;
    uint64_t slots;
    mp_sim_result res[MP_POL_COUNT];
    bool ran[MP_POL_COUNT];
    /* --adaptive: each static policy's placement with the adaptive tier beside it (its slots taken
     * from the budget's), where ran_adaptive */
    mp_sim_result adaptive[MP_POL_COUNT];
    bool ran_adaptive[MP_POL_COUNT];
} mp_sim_budget_run;

/* Sensitivity: for each cost part and factor (0.8, 1.2), the policy ranking's top at each budget
 * and how many policies changed rank. */
typedef struct mp_sim_sensitivity {
    bool done;
    int best[MP_COST_PARTS][2][16];      /* [part][0: x0.8, 1: x1.2][budget] best policy */
    int rank_changes[MP_COST_PARTS][2][16];
} mp_sim_sensitivity;

/* --sweep PARAM=V1,V2,...: one online policy's parameter over values, at every budget. */
#define MP_SIM_SWEEP_MAX 16
typedef struct mp_sim_sweep {
    const char *param;          /* "alpha", "beta", "epsilon" (decayed-lfu) or "window" (window-lfu) */
    mp_sim_policy policy;
    int n_values;
    double values[MP_SIM_SWEEP_MAX];
    mp_sim_result *res;         /* (n_values, n_runs): value-major */
} mp_sim_sweep;

/* The llama.cpp command at one budget and what it rests on (simulate --emit-llamacpp). */
typedef struct mp_sim_llamacpp {
    char *command;          /* NULL where llama.cpp's own GPU memory exceeds the budget */
    uint64_t weights_bytes, kv_bytes, compute_bytes, gpu_expert_bytes;
    int64_t kv_cells;       /* n_ctx as llama.cpp pads it */
    double ms_layers, ms_plan, ms_all_cpu; /* per token: the command's layers, the per-expert plan
                                            * in the same memory, no expert on the GPU */
} mp_sim_llamacpp;

typedef struct mp_sim_report {
    const char *trace_path, *costs_path;
    const mp_sim_config *cfg;
    const mp_sim_trace *trace;
    const mp_sim_budget_run *runs; /* (n_runs) */
    int n_runs;
    mp_sim_sensitivity sens;
    /* --emit-llamacpp per budget (NULL if not asked): the table's lines, and the numbers */
    char *const *llamacpp_ot; /* (n_runs) */
    const mp_sim_llamacpp *llamacpp; /* (n_runs) */
    const mp_sim_sweep *sweep; /* NULL without --sweep */
    uint64_t adaptive_slots;   /* --adaptive-slots (the tier's slots asked; 0: no --adaptive) */
} mp_sim_report;

/* Held-out metrics if the split has any, else in-sample: what a ranking should use. */
const mp_sim_metrics *mp_sim_rank_metrics(const mp_sim_result *r);

void mp_sim_report_table(FILE *f, const mp_sim_report *rep);
mp_status mp_sim_report_json(const char *path, const mp_sim_report *rep, mp_error *err);
mp_status mp_sim_report_svg(const char *path, const mp_sim_report *rep, mp_error *err);

#endif
