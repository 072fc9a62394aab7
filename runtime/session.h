/* runtime/session.h — an inference session: KV cache, scratch, threads, and the forward pass.
 *
 * mp_session_eval runs the transformer over n new tokens (a prefill batch or one decode token),
 * appending to the KV cache at positions [n_past, n_past + n). The forward pass reads top to
 * bottom in runtime/forward.c; the MoE block is one call (runtime/moe.h) whose CPU/GPU details
 * live behind it.
 *
 * Invariants: n_past + n <= n_ctx (else MP_ERR_LIMIT naming both); logits are float32 over the
 * vocabulary for the last row (or every row when all_logits is set).
 */
#ifndef MP_RUNTIME_SESSION_H
#define MP_RUNTIME_SESSION_H

#include <stdbool.h>
#include <stdint.h>

#include "base/error.h"
#include "runtime/hooks.h"
#include "base/knobs.h"
#include "runtime/model.h"

typedef struct mp_session_params {
    int64_t n_ctx;        /* KV cache length in tokens (0: min(model's n_ctx_train, 4096)) */
    int n_threads;        /* 0: the CPUs this process may use (runtime/cpus.h) */
    int64_t n_batch;      /* max rows per eval call for prefill chunks (0: 512) */
    const mp_hooks *hooks;            /* NULL: no tracing */
    const mp_route_source *route_src; /* NULL: the router decides */
    /* NULL: the CPU executor. Else the GPU executor (runtime/gpu.h) with this expert placement,
     * built for the session's n_ctx and n_batch (mp_placement_for_model); needs a CUDA device. */
    const struct mp_placement *placement;
    /* NULL: every knob at its default. Else the knobs the program read at start (the session
     * keeps a copy): its pool, CPU MoE block and GPU executor take theirs from it. */
    const mp_knobs *knobs;
} mp_session_params;

typedef struct mp_session mp_session;
typedef struct mp_gpu mp_gpu;

mp_status mp_session_new(const mp_model *m, const mp_session_params *p, mp_session **out,
                         mp_error *err);
void mp_session_free(mp_session *s);

/* Evaluate n tokens at the current position. logits: n_vocab floats (last row) or, if all_logits,
 * n × n_vocab. May be NULL when no logits are wanted (skips the output head). */
mp_status mp_session_eval(mp_session *s, const int32_t *tokens, int64_t n, bool all_logits,
                          float *logits, mp_error *err);
int64_t mp_session_n_past(const mp_session *s);
int64_t mp_session_n_ctx(const mp_session *s);
int64_t mp_session_n_batch(const mp_session *s); /* max rows per forward chunk */
void mp_session_reset(mp_session *s); /* forget the KV cache (new request) */
/* The route source's next step takes its first routes again (a replay's first row); nothing
 * without a source or where it cannot restart. */
void mp_session_restart_routes(mp_session *s);
int mp_session_n_threads(const mp_session *s);
/* Of those, the worker threads pinned to a CPU of their own (runtime/threadpool.c). */
int mp_session_n_pinned(const mp_session *s);
/* Replace the session's hooks (NULL: tracing off) between evals (calibrate times a step with and
 * without them). */
void mp_session_set_hooks(mp_session *s, const mp_hooks *hooks);
/* The GPU executor of a session made with a placement, else NULL. */
mp_gpu *mp_session_gpu(mp_session *s);
/* Sizes a session would resolve to (n_ctx, n_batch after defaults and clamping), for building a
 * placement before the session exists. */
mp_status mp_session_resolve_sizes(const mp_model *m, const mp_session_params *p, int64_t *n_ctx,
                                   int64_t *n_batch, mp_error *err);

/* Request bookkeeping for the hooks: begin resets the cache, sets the request id reported by
 * step_begin, calls hooks->request_begin, and makes positions < n_prompt_tokens count as prefill
 * (later ones as decode); step numbers restart at 0. end calls hooks->request_end. Without a
 * begun request, a step is prefill when it starts at position 0 or has more than one row. */
void mp_session_begin_request(mp_session *s, int64_t request_id, const int32_t *prompt_tokens,
                              int64_t n_prompt_tokens);
void mp_session_end_request(mp_session *s, int64_t n_generated_tokens);

#endif
