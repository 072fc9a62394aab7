/* simulator/calibrate.h — `moeplan calibrate`: microbenchmarks of this machine that become a
 * cost file (runtime/costs.h, schemas/costs.schema.json).
 *
 * What is measured, each point as the median and spread (p75 - p25) of `reps` repetitions after
 * warm-up runs that are not recorded:
 *  - cpu_expert: one expert's gate + up + SwiGLU + down over r routed rows, per distinct
 *    (expert quant types, shape) of the model and per thread count, with the runtime's kernels
 *    and task split; successive repetitions use different experts (rotating over every expert of
 *    every layer of that kind) so the weights come from memory, not from the CPU caches;
 *  - combine: the weighted sum of top_k expert outputs per row (the CPU side of the merge);
 *  - non_moe: a forward step of r tokens (mp_session_eval) minus its MoE blocks' time;
 *  - with a usable CUDA device (gpu/calibrate_cuda.c, in the GPU module): H2D/D2H by size pinned and pageable, the
 *    decode round trip per MoE layer beyond its copies (sync), and the GPU expert kernel vs rows.
 * What cannot be measured here is named in the JSON's $.missing with the reason.
 *
 * Invariants: the JSON produced always loads with mp_costs_load; lists are sorted ascending
 * without repeats; nothing is written to disk here (the command writes the file atomically).
 */
#ifndef MP_SIMULATOR_CALIBRATE_H
#define MP_SIMULATOR_CALIBRATE_H

#include <stdbool.h>
#include <stdint.h>

#include "base/error.h"
#include "base/knobs.h"
#include "base/progress.h"

#define MP_CALIB_LIST_MAX 32

typedef struct mp_calib_opts {
    const char *model_path;
    int threads[MP_CALIB_LIST_MAX]; /* (n_threads) ascending, >= 1: CPU expert thread counts */
    int n_threads;
    int rows[MP_CALIB_LIST_MAX];    /* (n_rows) ascending, >= 1: routed rows / tokens per step */
    int n_rows;
    int reps;                       /* recorded repetitions per point, >= 3 */
    bool quick;                     /* fewer copy sizes and warm-ups (CI, smoke tests) */
    int far_units;                  /* the decode grid's far units per expert, 1..mp_decide_far_split_most
                                       (0: the rule, mp_decide_far_split) */
    int64_t grid_pool;              /* the decode grid's pool: at most this many experts a layer resident,
                                       1..n_expert - top_k (0: as many as the device holds, up to that) */
    /* progress lines ("calibrate: cpu expert Q4_K/Q6_K 2048x768 t=16 rows=64 ...") */
    void (*progress)(void *user, const char *line);
    void *progress_user;
    mp_progress *hash_progress;     /* the model's SHA-256, in bytes (its own line; NULL: none) */
    const mp_knobs *knobs;          /* the sessions', pools' and CPU MoE blocks' knobs (NULL: defaults) */
} mp_calib_opts;

/* Fill o with the defaults for this machine (quick or full); model_path stays NULL. */
void mp_calib_defaults(mp_calib_opts *o, bool quick);

/* Run every benchmark and return the cost file's JSON text in *json_out (malloc'd, caller
 * frees). Errors (model load, out of memory, a CUDA failure on a usable device) name the file or
 * the step that failed. */
mp_status mp_calibrate(const mp_calib_opts *o, char **json_out, mp_error *err);

#endif
