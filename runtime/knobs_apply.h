/* runtime/knobs_apply.h — the knobs (base/knobs.h) where they reach the kernels: the CPU kernels'
 * process-wide ISA cap and the thread pools' spin, set once when a program starts and again when a
 * flag changes them. */
#ifndef MP_RUNTIME_KNOBS_APPLY_H
#define MP_RUNTIME_KNOBS_APPLY_H

#include <stdbool.h>

#include "base/knobs.h"

/* Set the CPU kernels' process-wide ISA cap, prefetch distance and AMX rows (MP_AMX_ROWS' types at its
 * rows, every other type at the table's; its types checked by mp_knobs_check_amx_rows) and the spin
 * of the pools made after it from k.
 * Called by a program after reading its knobs, before any kernel runs, and again when a flag
 * changes it (run/bench --no-simd). */
void mp_knobs_apply_kernels(const mp_knobs *k);
/* MP_AMX_ROWS' types (text: an allowed list, base/knobs.h) against the kernels: MP_ERR_ARG, one line
 * naming the first that is not a weight type or has no AMX tile GEMM and listing those that do. */
mp_status mp_knobs_check_amx_rows(const char *text, mp_error *err);
/* A program's start: mp_knobs_read_env and mp_knobs_check_amx_rows, then mp_knobs_apply_kernels (moeplan's main and every
 * benchmark program). */
mp_status mp_knobs_start(mp_knobs *k, mp_error *err);
/* The cost file at path's values ($.device.knobs) of the tuned knobs (MP_KNOB_COSTS_TUNED: calibrate
 * chose them on its host) that k has at their defaults: taken (source MP_KNOB_CALIBRATED,
 * mp_knobs_take_calibrated), then mp_knobs_apply_kernels; a line on stderr for each taken value
 * that is not the default. For the commands given --costs (run, bench, collect, plan), before
 * their session starts. The file's own one-line error when it does not load (flag names it), and
 * MP_ERR_FORMAT naming the file, $.device.knobs and what the knob allows when it gives such a knob
 * a value this build refuses (err non-NULL). */
mp_status mp_knobs_take_costs(mp_knobs *k, const char *flag, const char *path, mp_error *err);
/* The knobs of a command that runs the model (run, bench) from its flags: --no-simd (no_simd: the
 * flag form of MP_ISA=scalar, source MP_KNOB_FLAG), then --costs' tuned knobs (mp_knobs_take_costs;
 * costs NULL: none), each applied to the kernels. Its error: mp_knobs_take_costs's. */
mp_status mp_knobs_of_flags(mp_knobs *k, bool no_simd, const char *costs, mp_error *err);

#endif
