/* collector/trace.h — the trace writer: records a run into a SQLite trace (schemas/trace.sql).
 *
 * Call order (anything else is MP_ERR_ARG):
 *   open → set_run → add_node* → { request_begin → { step_begin → (add_routing | add_timing)*
 *   → step_end }* → request_end }* → finish → close
 * Each step is one transaction (committed by step_end), so a kill -9 loses at most the step in
 * flight and leaves a valid database whose run.status is 'running'. finish writes the footer and
 * sets status 'complete' in one transaction. A SQLite error (disk full, I/O) makes every later
 * call fail with the first error; the writer then tries to record status 'aborted' and the error.
 *
 * Routing is stored compactly: ids as u8 when the node has <= 256 experts (else u16), weights as
 * f16 or f32 (chosen per node). Buffers for the conversion are reused: after the first step of
 * the largest size, recording allocates nothing.
 */
#ifndef MP_COLLECTOR_TRACE_H
#define MP_COLLECTOR_TRACE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/error.h"
#include "runtime/hooks.h"

#define MP_TRACE_SCHEMA_VERSION 2 /* written; readers also read version 1 */
#define MP_TRACE_APPLICATION_ID 0x4D505452 /* "MPTR" */
#define MP_TRACE_MAX_NODE_INDEX 4095
#define MP_TRACE_MAX_STEP ((INT64_C(1) << 24) - 1)
#define MP_TRACE_MAX_REQUEST_ID ((INT64_C(1) << 27) - 1)

typedef enum mp_trace_weight_format { MP_TRACE_W_F16 = 0, MP_TRACE_W_F32 = 1 } mp_trace_weight_format;

/* Run metadata. Strings may be NULL and integers -1 where unknown (stored as NULL). */
typedef struct mp_trace_run_info {
    const char *source;        /* 'moeplan', 'onnxruntime', 'strata' or 'csv' (required) */
    const char *source_path;   /* imported file */
    const char *model_path;
    const char *model_sha256;  /* 64 hex digits */
    const char *architecture;
    int64_t n_layers, n_moe_layers, n_experts, top_k, n_embd, n_ff_expert, n_vocab;
    const char *quant_types;
    const char *device, *gpu_name, *cpu_model;
    int64_t threads;
    const char *profile_sha256;
    int64_t budget_bytes;
    const char *config_json;   /* a JSON object */
} mp_trace_run_info;

/* Fill every integer with -1 and every pointer with NULL. */
void mp_trace_run_info_init(mp_trace_run_info *info);

typedef struct mp_trace_node {
    int64_t node_index;  /* 0..4095, unique */
    const char *node_type;
    const char *node_name;
    int64_t layer;
    int64_t n_experts;   /* 1..65536 */
    int64_t top_k;       /* 1..n_experts */
    int64_t expert_bytes; /* -1 if unknown */
    mp_trace_weight_format weight_format;
} mp_trace_node;

typedef struct mp_trace_writer mp_trace_writer;

/* Create a trace at path, written in place. An existing file is refused (MP_ERR_IO naming it)
 * unless force, in which case it (and its -wal/-shm) is replaced at once. Journal: WAL,
 * synchronous=NORMAL. */
mp_status mp_trace_writer_open(const char *path, bool force, mp_trace_writer **out, mp_error *err);
/* Create a trace that appears at path only when it is complete (what commands use): the
 * database is written as path.tmp.<pid> (base/atomic_file.h), finish fsyncs it and renames it
 * over path, and close before a successful finish removes it. An existing path is refused
 * without force and, with force, survives every failure untouched. A kill -9 leaves the
 * temporary, a valid database whose status says the run is incomplete. Messages name path. */
mp_status mp_trace_writer_create(const char *path, bool force, mp_trace_writer **out,
                                 mp_error *err);
/* Cap the trace file at about max_bytes (SQLite max_page_count): a run that would grow past it
 * stops with a clear error and status 'aborted', as on a full disk. 0: no cap. */
mp_status mp_trace_writer_limit_bytes(mp_trace_writer *w, int64_t max_bytes, mp_error *err);
mp_status mp_trace_set_run(mp_trace_writer *w, const mp_trace_run_info *info, mp_error *err);
mp_status mp_trace_add_node(mp_trace_writer *w, const mp_trace_node *node, mp_error *err);

/* prompt_tokens (n_prompt_tokens int32) is hashed (SHA-256 of the int32 LE bytes), never stored;
 * NULL with n_prompt_tokens >= 0 records the count without a hash, -1 records neither.
 * prompt_text is stored only if non-NULL. start_ns/end_ns: monotonic ns, -1 if unknown. */
mp_status mp_trace_request_begin(mp_trace_writer *w, int64_t request_id, const char *external_id,
                                 const int32_t *prompt_tokens, int64_t n_prompt_tokens,
                                 const char *prompt_text, int64_t start_ns, mp_error *err);
mp_status mp_trace_request_end(mp_trace_writer *w, int64_t n_gen_tokens, int64_t end_ns,
                               mp_error *err);

/* Labels for live capture, where the hooks carry only request ids: a request begun with
 * external_id NULL and 0 <= request_id < n gets external_ids[request_id] and, if prompt_texts is
 * non-NULL, prompt_texts[request_id]. The arrays must stay valid until the last request begins. */
void mp_trace_writer_set_request_labels(mp_trace_writer *w, const char *const *external_ids,
                                        const char *const *prompt_texts, int64_t n);

/* Steps of a request are numbered 0, 1, 2, ... (enforced). pos -1 if unknown. */
mp_status mp_trace_step_begin(mp_trace_writer *w, int64_t step, mp_phase phase, int64_t n_rows,
                              int64_t pos, mp_error *err);
/* expert_ids, weights: (n_rows, top_k) row-major; top_k must equal the node's. Ids are checked
 * against [0, n_experts) of the node (a writer never records what a reader must refuse). */
mp_status mp_trace_add_routing(mp_trace_writer *w, int64_t node_index, int64_t n_rows,
                               int64_t top_k, const int32_t *expert_ids, const float *weights,
                               mp_error *err);
mp_status mp_trace_add_timing(mp_trace_writer *w, int64_t node_index, const mp_moe_timing *t,
                              mp_error *err);
/* duration_ns -1 if unknown. Commits the step. */
mp_status mp_trace_step_end(mp_trace_writer *w, int64_t duration_ns, mp_error *err);

/* CUPTI activity; request_id/step/node_index -1 where not correlated. */
typedef struct mp_trace_cupti_rec {
    const char *kind; /* 'kernel' or 'memcpy' */
    const char *name;
    int64_t start_ns, end_ns, bytes, device_id, stream_id, correlation_id;
    int64_t request_id, step, node_index;
} mp_trace_cupti_rec;
mp_status mp_trace_add_cupti(mp_trace_writer *w, const mp_trace_cupti_rec *rec, mp_error *err);

/* Write the footer and mark the run complete; the file is switched out of WAL so that it is one
 * self-contained file. No request may be open. A writer from mp_trace_writer_create is closed
 * and renamed into place here (only the counters remain usable). */
mp_status mp_trace_finish(mp_trace_writer *w, mp_error *err);
/* Mark the run aborted with a reason (best effort; returns the first error if it cannot). */
mp_status mp_trace_abort(mp_trace_writer *w, const char *reason, mp_error *err);
/* Close; an unfinished run keeps its status ('running' or 'aborted'). NULL is a no-op. */
void mp_trace_writer_close(mp_trace_writer *w);

/* Counters of what has been committed (the footer's values). */
typedef struct mp_trace_counts {
    int64_t n_requests, n_steps, n_routing, n_timing, n_cupti;
} mp_trace_counts;
mp_trace_counts mp_trace_writer_counts(const mp_trace_writer *w);

/* Live capture: hooks that record into w (request ids, steps and phases come from the runtime),
 * synchronously: SQLite runs inside the hook calls. The first error stops recording; it is kept
 * in state->status / state->error. */
typedef struct mp_trace_hooks_state {
    mp_trace_writer *w;
    mp_status status;
    mp_error error;
    int64_t clock_start_ns;
} mp_trace_hooks_state;
mp_hooks mp_trace_hooks(mp_trace_hooks_state *state, mp_trace_writer *w);

/* Live capture off the hot path: the hooks only copy what they are given into a reused step
 * buffer; at step_end (and request_end) the buffer is handed to a writer thread, which replays it
 * through the synchronous hooks above. Two buffers alternate, so the forward pass waits only if
 * the writer is a whole step behind. A kill -9 loses at most the two steps in flight.
 * Usage: mp_trace_async_start(w, &a, &hooks, &err); run with hooks; mp_trace_async_stop(a, &err)
 * (drains, joins, frees; returns the first error of the hooks or the writer); then finish. */
typedef struct mp_trace_async mp_trace_async;
mp_status mp_trace_async_start(mp_trace_writer *w, mp_trace_async **out, mp_hooks *hooks,
                               mp_error *err);
mp_status mp_trace_async_stop(mp_trace_async *a, mp_error *err);
/* Queue a CUPTI record into the step being buffered (call between the step's step_begin and
 * step_end hooks, on the hooks' thread); the writer thread stores it with mp_trace_add_cupti
 * before the step's end. rec's strings are copied. Errors surface at mp_trace_async_stop. */
void mp_trace_async_add_cupti(mp_trace_async *a, const mp_trace_cupti_rec *rec);

/* The schema text (schemas/trace.sql, embedded at build time). */
extern const char mp_trace_schema_sql[];

/* Why a write through db (a SQLite connection of a trace) failed, in the user's terms, into buf:
 * the OS error of an I/O failure ("File too large (the file-size limit, ulimit -f)", "No space
 * left on device"), else SQLite's message; the extended SQLite code after it. */
struct sqlite3;
void mp_trace_sql_cause(struct sqlite3 *db, char *buf, size_t cap);

#endif
