/* runtime/engine.h — starting the model, one way for every command that runs it (run, bench,
 * collect, plan's check; calibrate, which measures sessions of explicit placements on one loaded
 * model, makes them with mp_calib_gpu_session):
 *
 *   mp_engine_load   open the GGUF model (mmap, fail-closed)
 *   mp_engine_plan   attach the route replay, if any; decide the executor and build the placement
 *                    against the session's sizes (runtime/executor.h) — before any work, so that a
 *                    placement that cannot fit is refused at once and `bench --dry-run` can stop here
 *   mp_engine_start  make the session (and with it the GPU executor, when it runs)
 *   mp_engine_close  free all of it, in the order the parts need (the session before the replay
 *                    that feeds it)
 *
 * Invariant: the fields are filled step by step and mp_engine_close frees whatever was made, at any
 * point; a zeroed mp_engine is closed by doing nothing.
 */
#ifndef MP_RUNTIME_ENGINE_H
#define MP_RUNTIME_ENGINE_H

#include <stdbool.h>

#include "base/error.h"
#include "runtime/executor.h"
#include "runtime/hooks.h"
#include "runtime/model.h"
#include "runtime/placement.h"
#include "runtime/session.h"

typedef struct mp_engine {
    mp_model *model;
    mp_session_params params;   /* the session's: the caller sets sizes, threads, knobs, hooks
                                 * before mp_engine_plan; route_src is set there for a replay */
    mp_placement placement;     /* always built by mp_engine_plan (the CPU executor's is reported) */
    bool gpu;                   /* the GPU executor runs the session */
    mp_session *session;        /* after mp_engine_start */
    /* route replay: the implementation handed down from above the runtime, and its state */
    const mp_route_replay_api *replay;
    void *replay_state;
    mp_route_source route_src;
} mp_engine;

mp_status mp_engine_load(mp_engine *e, const char *model_path, mp_error *err);

/* replay_path: a trace whose routes replace the router's (--route-replay), NULL for none; replay
 * is its implementation (NULL where the program has none: then a replay_path is refused). */
mp_status mp_engine_plan(mp_engine *e, const mp_placement_opts *o, const char *replay_path,
                         const mp_route_replay_api *replay, mp_error *err);

mp_status mp_engine_start(mp_engine *e, mp_error *err);

/* After a failed step: the replay's reason when it stopped the run (it knows why; the runtime only
 * knows that it stopped), copied into err; else err is left alone. */
void mp_engine_step_error(const mp_engine *e, mp_error *err);

/* With MP_MOE_CPU_PROFILE=1: "CPU experts (MP_MOE_CPU_PROFILE), N calls: ..." (where the CPU
 * experts' time went, runtime/moe.h) for the command to print when it ends; "" otherwise. */
void mp_engine_profile_line(const mp_engine *e, char *buf, size_t cap);

void mp_engine_close(mp_engine *e);

#endif
