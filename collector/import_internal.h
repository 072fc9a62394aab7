/* collector/import_internal.h — what the format parsers share: a record stream and the context
 * that turns records into requests, steps and nodes (collector/import_common.c; the driver of the
 * two passes is collector/import.c).
 *
 * A parser calls mp_import_emit once per (request, node) routing record, in file order. The
 * context assigns request ids 0, 1, 2, ... in order of first appearance (the foreign id is kept
 * as requests.external_id), and starts a new step whenever a record's node_index is not greater
 * than the previous one of the same request (each step visits nodes in increasing order).
 */
#ifndef MP_COLLECTOR_IMPORT_INTERNAL_H
#define MP_COLLECTOR_IMPORT_INTERNAL_H

#include "collector/import.h"

typedef struct mp_import_ctx mp_import_ctx;

typedef struct mp_import_rec {
    int64_t request_key;     /* the foreign request identity (records of one request contiguous) */
    const char *request_ext; /* its text form, stored as requests.external_id (may be NULL) */
    int64_t node_index;      /* 0..4095 */
    const char *node_name, *node_type;
    int64_t layer;           /* -1: the node's rank among the trace's nodes */
    int64_t n_rows, top_k;
    const int32_t *ids;      /* (n_rows, top_k) */
    const float *weights;    /* (n_rows, top_k) */
    int phase;               /* -1: step 0 prefill, later steps decode; else an mp_phase */
    const char *where;       /* "line 12" / "offset 345": for messages */
    size_t offset;           /* bytes of the input read up to this record: the import's progress */
} mp_import_rec;

mp_status mp_import_emit(mp_import_ctx *c, const mp_import_rec *rec, mp_error *err);
/* The --experts limit (0: none given), for parsers that check ids with a line number. */
int64_t mp_import_n_experts_limit(const mp_import_ctx *c);
/* The file's name, for parsers' messages. */
const char *mp_import_name(const mp_import_ctx *c);
/* The input has no router weights: the parser gives every choice 1/top_k, and the trace's
 * config_json and the import's result say so. */
void mp_import_note_uniform_weights(mp_import_ctx *c);

/* CSV: the bytes of a UTF-8 byte order mark at data (3 or 0); whether data starts like a routing
 * CSV's header (seq,pos,layer, plain or quoted, after a byte order mark). */
size_t mp_import_csv_bom(const char *data, size_t n);
bool mp_import_csv_looks_like(const char *data, size_t n);

typedef mp_status (*mp_import_parse_fn)(const char *data, size_t n, mp_import_ctx *c,
                                        mp_error *err);
mp_status mp_import_parse_ort_log(const char *data, size_t n, mp_import_ctx *c, mp_error *err);
mp_status mp_import_parse_strata(const char *data, size_t n, mp_import_ctx *c, mp_error *err);
mp_status mp_import_parse_csv(const char *data, size_t n, mp_import_ctx *c, mp_error *err);

/* ---- the context itself: shared by the parsers' stream (import_common.c) and the driver
 * (import.c), private to the import ---- */

#define MP_IMPORT_MAX_NODES (MP_TRACE_MAX_NODE_INDEX + 1)
#define MP_IMPORT_NAME_BYTES 128

typedef struct mp_import_node {
    char name[MP_IMPORT_NAME_BYTES], type[MP_IMPORT_NAME_BYTES];
    int64_t top_k, layer;
} mp_import_node;

struct mp_import_ctx {
    int pass;                 /* 1: check, 2: write */
    const char *name;
    mp_trace_writer *w;       /* pass 2 only */
    int64_t n_experts_given;  /* 0: infer */
    int64_t n_experts;        /* pass 2: the node table's n_experts */
    mp_trace_weight_format wf;
    bool weights_uniform;     /* the input had no weights: each choice got 1/top_k */
    mp_progress *progress;    /* NULL: none; pass 1 counts input bytes, pass 2 records */
    mp_import_node **nodes;   /* (MP_IMPORT_MAX_NODES) by node_index; NULL: not seen */
    int64_t max_id;           /* largest id seen, -1 before any */
    /* request and step being assembled */
    bool have_req;
    int64_t req_key, req_ord, step, last_node, step_rows, n_prompt_rows, n_decode_steps;
    int step_phase;
    int64_t *done_keys;       /* open-addressing set of finished request keys (cap power of 2) */
    size_t done_cap, done_n;
    int64_t n_steps, n_routing;
    /* pass 1: every step must route every node (the trace stores a step's nodes in one row);
     * a partial step is found with the step's record count against the most seen so far (and,
     * at the end, against the nodes seen): its first record's place names it */
    int64_t step_nodes, max_step_nodes, first_step_nodes;
    char step_at[96], first_step_at[96];
    bool have_partial;
    int64_t partial_nodes;
    char partial_at[96];
};

/* Close the request being assembled (its last step, its bookkeeping); MP_OK when none is open. */
mp_status mp_import_close_request(mp_import_ctx *c, mp_error *err);
/* Back to no request and no step, with the finished-request set emptied (between the passes). */
void mp_import_ctx_reset(mp_import_ctx *c);
void mp_import_free_nodes(mp_import_node **nodes); /* (MP_IMPORT_MAX_NODES); NULL: nothing */

#endif
