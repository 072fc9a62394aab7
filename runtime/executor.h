/* runtime/executor.h — which executor runs a session (CPU or GPU) and with which placement: the
 * one decision `run`, `bench` and `collect` share (docs/runtime.md, "Choosing the executor").
 *
 *   --executor cpu   the CPU forward pass; placement flags are still built, checked against the
 *                    budget and reported, but every expert runs on the CPU.
 *   --executor gpu   the GPU executor; needs a CUDA device. Without --placement/--placement-file/
 *                    --profile the placement is `fill` under --gpu-budget, or under the device's
 *                    free memory minus MP_EXECUTOR_RESERVE_BYTES when no budget is given.
 *   --executor auto  (default) gpu when a CUDA device is usable, else cpu. Without a device, any
 *                    placement other than `cpu` is refused (it would silently mean nothing).
 */
#ifndef MP_RUNTIME_EXECUTOR_H
#define MP_RUNTIME_EXECUTOR_H

#include <stdbool.h>
#include <stddef.h>

#include "base/error.h"
#include "runtime/placement.h"
#include "runtime/session.h"

#define MP_EXECUTOR_RESERVE_BYTES ((uint64_t)1 << 30) /* left free on the device by default */

/* Decide the executor for a session of model m with params sp (its sizes are resolved here) and
 * build the placement (always: `cpu` when no flag names one and the CPU executor runs); *use_gpu
 * says which executor runs. On success the caller sets
 * sp->placement = *use_gpu ? pl : NULL before mp_session_new. */
mp_status mp_executor_plan(const mp_model *m, mp_executor_kind kind, const mp_placement_opts *o,
                           const mp_session_params *sp, mp_placement *pl, bool *use_gpu,
                           mp_error *err);

/* True when any of --placement, --placement-file, --profile, --gpu-budget was given. */
bool mp_placement_opts_given(const mp_placement_opts *o);

#endif
