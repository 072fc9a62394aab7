/* collector/trace_read.h — the trace reader used by the analyzer and the simulator.
 *
 * A reader opens a trace read-only (never modifies it, never creates -wal/-shm beside a finished
 * trace) and checks only what it must to interpret the file: that it is a SQLite database with
 * application_id "MPTR" and user_version 1 or MP_TRACE_SCHEMA_VERSION (2). Everything else — status,
 * footer counts, order, blob sizes, id ranges, weight values — is reported as stored, for the
 * analyzer to validate; the reader never drops or repairs a record.
 *
 * Memory: run metadata, nodes and requests are loaded at open (bounded by nodes + requests, not by
 * trace length); steps, routing and timing are streamed one row at a time (sqlite3_step), so
 * iterating a trace of any length uses constant memory. Routing is handed out as one record per
 * (request, step, node) whatever the schema version: version 2 stores one row per step holding
 * every node's block, which the iterator slices by the nodes table (see trace_read_routing.c).
 *
 * Usage:
 *   mp_trace_reader *r; mp_trace_reader_open("t.db", &r, &err);
 *   const mp_trace_run *run = mp_trace_reader_run(r);
 *   mp_trace_routing_iter *it; mp_trace_routing_begin(r, &it, &err);
 *   mp_trace_routing_rec rec; int rc;
 *   while ((rc = mp_trace_routing_next(it, &rec, &err)) == 1) { ... rec.expert_ids ... }
 *   mp_trace_routing_end(it);  // rc < 0: an mp_status, err filled
 *   mp_trace_reader_close(r);
 */
#ifndef MP_COLLECTOR_TRACE_READ_H
#define MP_COLLECTOR_TRACE_READ_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "collector/trace.h"
#include "base/error.h"

/* Run metadata. Strings are NULL and integers -1 where the trace stores NULL. Owned by the reader. */
typedef struct mp_trace_run {
    const char *moeplan_version, *source, *source_path, *model_path, *model_sha256, *architecture;
    int64_t n_layers, n_moe_layers, n_experts, top_k, n_embd, n_ff_expert, n_vocab;
    const char *quant_types, *device, *gpu_name, *cpu_model;
    int64_t threads;
    const char *profile_sha256;
    int64_t budget_bytes;
    const char *config_json, *start_time, *end_time;
    const char *status; /* 'running', 'complete' or 'aborted' as stored (or anything else) */
    const char *error;
    bool has_footer;    /* the footer row exists; the counts below are valid only then */
    int64_t footer_n_requests, footer_n_steps, footer_n_routing, footer_n_timing, footer_n_cupti;
} mp_trace_run;

typedef struct mp_trace_node_info {
    int64_t node_index;
    const char *node_type, *node_name;
    int64_t layer, n_experts, top_k;
    int64_t expert_bytes; /* -1 if NULL */
    int64_t id_bytes;     /* as stored (1 or 2 if valid) */
    const char *weight_format; /* as stored ('f16' or 'f32' if valid) */
} mp_trace_node_info;

typedef struct mp_trace_request_info {
    int64_t request_id, ord;
    const char *external_id;           /* NULL if none */
    int64_t n_prompt_tokens, n_gen_tokens, start_ns, end_ns; /* -1 if NULL */
    const char *prompt_sha256;         /* NULL if none */
    const char *prompt_text;           /* NULL unless stored */
} mp_trace_request_info;

typedef struct mp_trace_reader mp_trace_reader;

/* Open read-only. Fails (MP_ERR_FORMAT naming the file and the version) if it is not a moeplan
 * trace of schema version 1 or 2, or MP_ERR_IO if it cannot be opened. */
mp_status mp_trace_reader_open(const char *path, mp_trace_reader **out, mp_error *err);
/* The trace's schema version (PRAGMA user_version): 1 or 2. */
int64_t mp_trace_reader_version(const mp_trace_reader *r);
void mp_trace_reader_close(mp_trace_reader *r);
const char *mp_trace_reader_path(const mp_trace_reader *r);
const mp_trace_run *mp_trace_reader_run(const mp_trace_reader *r);

/* Nodes in node_index order. */
int64_t mp_trace_reader_n_nodes(const mp_trace_reader *r);
const mp_trace_node_info *mp_trace_reader_nodes(const mp_trace_reader *r);
/* The node with this index, or NULL if the node table has none. */
const mp_trace_node_info *mp_trace_reader_node(const mp_trace_reader *r, int64_t node_index);

/* Requests in ord order (then request_id). */
int64_t mp_trace_reader_n_requests(const mp_trace_reader *r);
const mp_trace_request_info *mp_trace_reader_requests(const mp_trace_reader *r);

/* Rows of table "timing" or "cupti" (a table the schema version lacks: 0), for the footer. */
mp_status mp_trace_reader_count_rows(mp_trace_reader *r, const char *table, int64_t *out,
                                     mp_error *err);
/* PRAGMA quick_check: MP_ERR_FORMAT naming the first problem SQLite finds in the file's pages
 * (a page that reads as valid records can still be one another page also claims). */
mp_status mp_trace_reader_quick_check(mp_trace_reader *r, mp_error *err);

/* ---- streaming iterators: next returns 1 (a record), 0 (end), or a negative mp_status ---- */

typedef struct mp_trace_step_rec {
    int64_t request_id, step;
    const char *phase; /* as stored; valid until the next call */
    int64_t n_rows, pos, duration_ns; /* -1 if NULL */
} mp_trace_step_rec;
typedef struct mp_trace_step_iter mp_trace_step_iter;
/* Steps in (request_id, step) order. */
mp_status mp_trace_steps_begin(mp_trace_reader *r, mp_trace_step_iter **out, mp_error *err);
int mp_trace_steps_next(mp_trace_step_iter *it, mp_trace_step_rec *rec, mp_error *err);
void mp_trace_steps_end(mp_trace_step_iter *it);

/* One routing record: the raw blobs as stored (version 2: the node's slice of the step's
 * BLOBs). Pointers are valid until the next call to next or end. A blob that is NULL in the
 * database (schema forbids it) or an empty slice reads as size 0, pointer NULL; a value of the
 * wrong SQL type reads through SQLite's conversion: validate the sizes. */
typedef struct mp_trace_routing_rec {
    int64_t key; /* request_id << 36 | step << 12 | node_index (version 1's stored key; version 2:
                  * computed, so keys increase through a trace in either version) */
    int64_t request_id, step, node_index;
    int64_t n_rows;
    const void *expert_ids;   /* (n_rows, top_k) × node id_bytes, LE unsigned */
    size_t expert_ids_bytes;
    const void *weights;      /* (n_rows, top_k) × 2 (f16) or 4 (f32) bytes, LE */
    size_t weights_bytes;
} mp_trace_routing_rec;
typedef struct mp_trace_routing_iter mp_trace_routing_iter;
/* Routing in key order: (request_id, step, node_index); request_id order is request order. */
mp_status mp_trace_routing_begin(mp_trace_reader *r, mp_trace_routing_iter **out, mp_error *err);
/* Same, restricted to request_id in [first_request_id, last_request_id]. */
mp_status mp_trace_routing_begin_range(mp_trace_reader *r, int64_t first_request_id,
                                       int64_t last_request_id, mp_trace_routing_iter **out,
                                       mp_error *err);
int mp_trace_routing_next(mp_trace_routing_iter *it, mp_trace_routing_rec *rec, mp_error *err);
void mp_trace_routing_end(mp_trace_routing_iter *it);

/* t.served points at the row's served codes as stored (served_bytes of them, possibly 0; valid
 * until the next call to next or end), NULL where the row has none: NULL in the database, or a
 * trace written before the column. Their size and values are unchecked here (trace_check.h). */
typedef struct mp_trace_timing_rec {
    int64_t request_id, step, node_index;
    mp_moe_timing t;
    size_t served_bytes;
} mp_trace_timing_rec;
typedef struct mp_trace_timing_iter mp_trace_timing_iter;
/* Timing in (request_id, step, node_index) order. */
mp_status mp_trace_timing_begin(mp_trace_reader *r, mp_trace_timing_iter **out, mp_error *err);
/* The same rows with only what checking them needs (trace_check.h): t.hits, t.misses, the tier's
 * counts (t.tier_*: NULL, or a trace from before their columns, reads 0) and t.served; the times
 * read 0. */
mp_status mp_trace_timing_begin_counts(mp_trace_reader *r, mp_trace_timing_iter **out, mp_error *err);
int mp_trace_timing_next(mp_trace_timing_iter *it, mp_trace_timing_rec *rec, mp_error *err);
void mp_trace_timing_end(mp_trace_timing_iter *it);

/* ---- decoding helpers (they check sizes, never values: ranges are the analyzer's job) ---- */

/* Decode n ids of id_bytes (1 or 2) each from blob (blob_bytes long) into out[n].
 * MP_ERR_FORMAT if blob_bytes != n * id_bytes or id_bytes is not 1 or 2. */
mp_status mp_trace_decode_ids(const void *blob, size_t blob_bytes, int64_t id_bytes, int64_t n,
                              int32_t *out, mp_error *err);
/* Decode n weights of format ("f16" or "f32") into out[n]; NaN/Inf are passed through.
 * MP_ERR_FORMAT if the size or format is wrong. */
mp_status mp_trace_decode_weights(const void *blob, size_t blob_bytes, const char *format,
                                  int64_t n, float *out, mp_error *err);
/* Bytes per weight of a format: 2, 4, or 0 if the format is unknown. */
int mp_trace_weight_bytes(const char *format);

#endif
