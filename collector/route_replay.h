/* collector/route_replay.h — route replay: a runtime route source (runtime/hooks.h) that feeds
 * each MoE layer's expert ids and weights from a recorded trace instead of the router.
 *
 * Mapping (docs/placement.md, "Route replay"): the trace's MoE nodes, in node_index order, are
 * the model's layers 0..n_layer-1. Each layer replays its node's routing rows in trace order
 * (request by request, step by step, row by row): a step of n rows takes the next n rows of each
 * layer's stream, whatever the step shapes were when the trace was recorded. When a layer's
 * stream runs out it starts again from the trace's first row (a wrap, counted and reported), so
 * that a run may be longer than the trace. The source's restart sets every stream back to the
 * trace's first row (bench's runs, mp_session_restart_routes); `run` and `collect` never restart.
 *
 * Invariants: open refuses a trace that is not complete or whose geometry (MoE nodes, experts,
 * top-k) differs from the model's, naming both; every row handed to the runtime has top_k ids in
 * [0, n_experts) and finite weights (a record that breaks this stops the run with an error naming
 * the trace, request, step and node: at open, which reads and checks the whole trace's routing
 * into memory, 8 bytes per route, at most 2^27 routes). A step's routes are copies out of it.
 */
#ifndef MP_COLLECTOR_ROUTE_REPLAY_H
#define MP_COLLECTOR_ROUTE_REPLAY_H

#include <stdint.h>

#include "base/error.h"
#include "runtime/hooks.h"

typedef struct mp_route_replay mp_route_replay;

mp_status mp_route_replay_open(const char *trace_path, int64_t n_layer, int64_t n_expert,
                               int64_t top_k, mp_route_replay **out, mp_error *err);
void mp_route_replay_close(mp_route_replay *rr);

/* The source to put into mp_session_params.route_src (valid while rr is open). */
mp_route_source mp_route_replay_source(mp_route_replay *rr);
/* Why the source stopped a run; code MP_OK if it has not. */
const mp_error *mp_route_replay_error(const mp_route_replay *rr);
/* Rows replayed so far by layer 0 (every layer replays as many), and how often the streams wrapped. */
int64_t mp_route_replay_rows(const mp_route_replay *rr);
int64_t mp_route_replay_wraps(const mp_route_replay *rr);
/* SHA-256 (hex) of the trace file, for run metadata. */
const char *mp_route_replay_sha256(const mp_route_replay *rr);

/* The same, as the function table `moeplan run` receives from the CLI. */
extern const mp_route_replay_api mp_route_replay_ops;

#endif
