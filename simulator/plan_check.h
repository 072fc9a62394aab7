/* simulator/plan_check.h — the cause `moeplan plan` names when its measured check misses the
 * prediction by more than 10 % (cmd_plan.c), as a function of what the check measured, so that the
 * rule is tested without a GPU. */
#ifndef MP_SIMULATOR_PLAN_CHECK_H
#define MP_SIMULATOR_PLAN_CHECK_H

#include <stdbool.h>
#include <stddef.h>

typedef struct mp_plan_miss {
    const char *cal_kernels, *run_kernels; /* the CPU kernels the calibration ran and this process runs,
                                            * when they differ (else NULL) */
    bool level_made;        /* the check's rows were predicted again at the level its CPU experts ran */
    double level_err;       /* that prediction's error against the measured, in % */
    double cpu_ms, pred_cpu_ms; /* the check's CPU experts, measured and predicted (ms/token) */
    double level_gbs;       /* the host level the CPU experts ran at (what `simulate --host-read-gbs` takes) */
    double cal_gbs, now_gbs; /* the host's read bandwidth at calibration and now, by the probe */
    bool by_window;         /* the calibration's probe is the windowed one (comparable with now_gbs) */
    const char *other_machine; /* what differs from the machine the costs measured (NULL: nothing) */
    const char *other_knobs;   /* knobs that differ from the calibration's (NULL: none) */
} mp_plan_miss;

/* The likely cause, in words, into cause (cap bytes): the CPU kernels when the calibration's are
 * not this process's; when the prediction at the CPU experts' level holds and their time moved
 * more than 10 %, the host's memory — unless the probe read it as calibrated (within
 * MP_DECIDE_HOST_MOVED), when the cores' time beyond the bytes is named instead (small experts'
 * fixed cost per call, threads the system took); another machine; other knobs; the host's read
 * bandwidth when the probe moved; else an uncosted path or a stale calibration. */
void mp_plan_miss_cause(const mp_plan_miss *m, char *cause, size_t cap);

#endif
