/* collector/trace_read_routing.c — the raw reader's steps and routing streams (see trace_read.h),
 * and the helpers that decode a routing record's BLOBs.
 *
 * Routing, schema version 2: one SQL row per (request, step) holds every node's block, in
 * node_index order; the iterator hands out one record per node, slicing the row's BLOBs by the
 * nodes table (n_rows × top_k × id_bytes, n_rows × top_k × weight bytes). Slices are never
 * longer than what is left of the BLOB, and the last node's slice takes whatever is left: a BLOB
 * that is short or long shows as a wrong-sized record at the node where it stops matching, for
 * the analyzer to report. A node whose sizes cannot be read (id_bytes not 1 or 2, unknown weight
 * format, top_k < 1) gets an empty slice. Version 1 (one SQL row per node) is read row by row.
 *
 * Memory: a step row of at most MP_TRACE_READ_DIRECT_BYTES (both BLOBs) is read as a column (SQLite
 * holds it in memory while the row is current); a larger one (a long prefill: rows × nodes ×
 * bytes per route) is not loaded (the query selects NULL for it), and each node's slice is read
 * with incremental BLOB I/O into a buffer of the largest slice, so the reader's memory is bounded
 * by one node's block, as with version 1, whatever the prompt length.
 *
 * Invariants: steps and routing come in (request_id, step[, node_index]) order, one row at a time;
 * a record's pointers are valid until the next call; the decoding helpers check sizes, never
 * values (ranges are trace_check.h's).
 */
#include "kernels/quant.h"
#include "collector/trace_read_impl.h"

#include <stdlib.h>
#include <string.h>

/* Step rows up to this size (expert_ids + weights) are read in one piece. */
#define MP_TRACE_READ_DIRECT_BYTES 1048576
#define MP_STR_(x) #x
#define MP_STR(x) MP_STR_(x)

struct mp_trace_step_iter { mp_trace_reader *r; sqlite3_stmt *st; };
struct mp_trace_routing_iter {
    mp_trace_reader *r;
    sqlite3_stmt *st;
    /* version 2: the current step row and the next node to hand out */
    bool have_row;
    int64_t node;            /* position in r->nodes of the next record */
    int64_t request_id, step, n_rows;
    const uint8_t *ids, *weights;      /* the row's BLOBs (valid until the next sqlite3_step);
                                        * NULL for a streamed row */
    size_t ids_left, weights_left;     /* bytes not yet handed out */
    /* a streamed row (larger than MP_TRACE_READ_DIRECT_BYTES): slices read at these offsets */
    bool streamed;
    sqlite3_blob *ids_blob, *weights_blob; /* open on the row, reopened per streamed row */
    int ids_off, weights_off;
    uint8_t *slice;                    /* (slice_cap) the current node's ids then weights */
    size_t slice_cap;
    int64_t *row_bytes;      /* (n_nodes, 2): id and weight bytes per row of each node, 0 if unreadable */
};

mp_status mp_trace_steps_begin(mp_trace_reader *r, mp_trace_step_iter **out, mp_error *err)
{
    *out = calloc(1, sizeof **out);
    if (!*out)
        return mp_fail(err, MP_ERR_NOMEM, "trace %s: out of memory", r->path);
    (*out)->r = r;
    mp_status s = begin_stmt(r, "SELECT request_id, step, phase, n_rows, pos, duration_ns FROM steps"
                                " ORDER BY request_id, step", &(*out)->st, err);
    if (s) {
        free(*out);
        *out = NULL;
    }
    return s;
}

int mp_trace_steps_next(mp_trace_step_iter *it, mp_trace_step_rec *rec, mp_error *err)
{
    int rc = next_row(it->r, it->st, err, "reading steps");
    if (rc != 1)
        return rc;
    rec->request_id = int_col(it->st, 0);
    rec->step = int_col(it->st, 1);
    rec->phase = (const char *)sqlite3_column_text(it->st, 2);
    rec->n_rows = int_col(it->st, 3);
    rec->pos = int_col(it->st, 4);
    rec->duration_ns = int_col(it->st, 5);
    return 1;
}

void mp_trace_steps_end(mp_trace_step_iter *it)
{
    if (it) {
        sqlite3_finalize(it->st);
        free(it);
    }
}

static void routing_iter_free(mp_trace_routing_iter *it)
{
    if (it) {
        sqlite3_blob_close(it->ids_blob);
        sqlite3_blob_close(it->weights_blob);
        sqlite3_finalize(it->st);
        free(it->row_bytes);
        free(it->slice);
        free(it);
    }
}

/* Shared by begin and begin_range: the iterator, its statement and (version 2) the per-node
 * sizes. A NULL range (first > last) means the whole table, in key order, including keys outside
 * the packed range: validation is the analyzer's, and a record it cannot see it cannot refuse. */
static mp_status routing_begin(mp_trace_reader *r, bool range, int64_t first, int64_t last,
                               mp_trace_routing_iter **out, mp_error *err)
{
    mp_trace_routing_iter *it = calloc(1, sizeof *it);
    *out = NULL;
    if (!it || (r->version >= 2 &&
                !(it->row_bytes = malloc(((size_t)r->n_nodes + 1) * 2 * sizeof *it->row_bytes)))) {
        free(it);
        return mp_fail(err, MP_ERR_NOMEM, "trace %s: out of memory", r->path);
    }
    it->r = r;
    /* A range on the integer primary key: SQLite walks the b-tree in key order, no sort.
     * Version 2 selects the BLOBs only up to the direct-read size: length() reads the record
     * header, not the value, so a large row's BLOBs are not loaded (streamed in next). */
    const char *sql =
        r->version < 2
            ? (range ? "SELECT key, n_rows, expert_ids, weights FROM routing"
                       " WHERE key >= ?1 AND key <= ?2 ORDER BY key"
                     : "SELECT key, n_rows, expert_ids, weights FROM routing ORDER BY key")
            : (range ? "SELECT key, n_rows, CASE WHEN big THEN NULL ELSE expert_ids END,"
                       " CASE WHEN big THEN NULL ELSE weights END, big, ni, nw FROM"
                       " (SELECT key, n_rows, expert_ids, weights, length(expert_ids) AS ni,"
                       " length(weights) AS nw, length(expert_ids) + length(weights) > "
                       MP_STR(MP_TRACE_READ_DIRECT_BYTES) " AS big FROM routing"
                       " WHERE key >= ?1 AND key <= ?2) ORDER BY key"
                     : "SELECT key, n_rows, CASE WHEN big THEN NULL ELSE expert_ids END,"
                       " CASE WHEN big THEN NULL ELSE weights END, big, ni, nw FROM"
                       " (SELECT key, n_rows, expert_ids, weights, length(expert_ids) AS ni,"
                       " length(weights) AS nw, length(expert_ids) + length(weights) > "
                       MP_STR(MP_TRACE_READ_DIRECT_BYTES) " AS big FROM routing) ORDER BY key");
    mp_status s = begin_stmt(r, sql, &it->st, err);
    if (s) {
        routing_iter_free(it);
        return s;
    }
    if (range) {
        if (first < 0)
            first = 0;
        if (last > MP_TRACE_MAX_REQUEST_ID)
            last = MP_TRACE_MAX_REQUEST_ID;
        const int shift = r->version >= 2 ? 24 : 36;
        sqlite3_bind_int64(it->st, 1, first << shift);
        sqlite3_bind_int64(it->st, 2, last < first ? -1 : ((last + 1) << shift) - 1);
    }
    for (int64_t i = 0; r->version >= 2 && i < r->n_nodes; i++) {
        const mp_trace_node_info *n = &r->nodes[i];
        const int64_t wb = mp_trace_weight_bytes(n->weight_format);
        const bool ok = (n->id_bytes == 1 || n->id_bytes == 2) && wb && n->top_k >= 1 &&
                        n->top_k <= 65536;
        it->row_bytes[2 * i] = ok ? n->top_k * n->id_bytes : 0;
        it->row_bytes[2 * i + 1] = ok ? n->top_k * wb : 0;
    }
    *out = it;
    return MP_OK;
}

mp_status mp_trace_routing_begin_range(mp_trace_reader *r, int64_t first, int64_t last,
                                       mp_trace_routing_iter **out, mp_error *err)
{
    return routing_begin(r, true, first, last, out, err);
}

mp_status mp_trace_routing_begin(mp_trace_reader *r, mp_trace_routing_iter **out, mp_error *err)
{
    return routing_begin(r, false, 0, -1, out, err);
}

/* min(n_rows × per_row, left): a node's slice; negative row counts take nothing, overflowing
 * ones everything. */
static size_t slice_bytes(int64_t n_rows, int64_t per_row, size_t left)
{
    if (n_rows <= 0 || per_row <= 0)
        return 0;
    if (n_rows > INT64_MAX / per_row || (uint64_t)(n_rows * per_row) > left)
        return left;
    return (size_t)(n_rows * per_row);
}

/* Point the iterator's BLOB handles at row key (opened once, then moved with reopen). */
static mp_status open_row_blobs(mp_trace_routing_iter *it, int64_t key, mp_error *err)
{
    mp_trace_reader *r = it->r;
    int rc = SQLITE_OK;
    if (!it->ids_blob)
        rc = sqlite3_blob_open(r->db, "main", "routing", "expert_ids", key, 0, &it->ids_blob);
    else
        rc = sqlite3_blob_reopen(it->ids_blob, key);
    if (rc == SQLITE_OK) {
        if (!it->weights_blob)
            rc = sqlite3_blob_open(r->db, "main", "routing", "weights", key, 0, &it->weights_blob);
        else
            rc = sqlite3_blob_reopen(it->weights_blob, key);
    }
    if (rc != SQLITE_OK)
        return mp_fail(err, MP_ERR_FORMAT, "trace %s: routing (request %lld, step %lld): reading "
                       "the BLOBs: %s", r->path, (long long)(key >> 24),
                       (long long)(key & MP_TRACE_MAX_STEP), sqlite3_errmsg(r->db));
    return MP_OK;
}

/* Read a streamed row's next ib id bytes and wb weight bytes into it->slice. */
static mp_status read_slices(mp_trace_routing_iter *it, size_t ib, size_t wb, mp_error *err)
{
    mp_trace_reader *r = it->r;
    if (ib + wb > it->slice_cap) {
        uint8_t *b = realloc(it->slice, ib + wb);
        if (!b)
            return mp_fail(err, MP_ERR_NOMEM, "trace %s: out of memory for a routing slice of %zu "
                           "bytes", r->path, ib + wb);
        it->slice = b;
        it->slice_cap = ib + wb;
    }
    if ((ib && sqlite3_blob_read(it->ids_blob, it->slice, (int)ib, it->ids_off) != SQLITE_OK) ||
        (wb && sqlite3_blob_read(it->weights_blob, it->slice + ib, (int)wb, it->weights_off) !=
                   SQLITE_OK))
        return mp_fail(err, MP_ERR_FORMAT, "trace %s: routing (request %lld, step %lld): reading "
                       "the BLOBs: %s", r->path, (long long)it->request_id, (long long)it->step,
                       sqlite3_errmsg(r->db));
    return MP_OK;
}

static int routing_next_v2(mp_trace_routing_iter *it, mp_trace_routing_rec *rec, mp_error *err)
{
    mp_trace_reader *r = it->r;
    if (!it->have_row || it->node >= r->n_nodes) {
        int rc;
        do { /* a row with no nodes to hand out (empty nodes table) yields nothing */
            rc = next_row(r, it->st, err, "reading routing");
            if (rc != 1)
                return rc;
        } while (r->n_nodes == 0);
        sqlite3_stmt *st = it->st;
        const int64_t key = sqlite3_column_int64(st, 0);
        it->request_id = key >> 24;
        it->step = key & MP_TRACE_MAX_STEP;
        it->n_rows = sqlite3_column_int64(st, 1);
        if (it->n_rows == 0 && sqlite3_column_type(st, 1) == SQLITE_NULL)
            it->n_rows = -1;
        it->streamed = sqlite3_column_int(st, 4) != 0;
        if (!it->streamed) {
            it->ids = sqlite3_column_blob(st, 2);
            it->ids_left = (size_t)sqlite3_column_bytes(st, 2);
            it->weights = sqlite3_column_blob(st, 3);
            it->weights_left = (size_t)sqlite3_column_bytes(st, 3);
        } else {
            it->ids = it->weights = NULL;
            it->ids_left = (size_t)sqlite3_column_int64(st, 5);
            it->weights_left = (size_t)sqlite3_column_int64(st, 6);
            it->ids_off = it->weights_off = 0;
            mp_status s = open_row_blobs(it, key, err);
            if (s)
                return s;
        }
        it->node = 0;
        it->have_row = true;
    }
    const int64_t p = it->node++;
    const bool last = it->node == r->n_nodes;
    const size_t ib = last ? it->ids_left : slice_bytes(it->n_rows, it->row_bytes[2 * p], it->ids_left);
    const size_t wb = last ? it->weights_left
                           : slice_bytes(it->n_rows, it->row_bytes[2 * p + 1], it->weights_left);
    rec->request_id = it->request_id;
    rec->step = it->step;
    rec->node_index = r->nodes[p].node_index;
    rec->key = (int64_t)((uint64_t)rec->request_id << 36 | (uint64_t)rec->step << 12 |
                         (uint64_t)(rec->node_index & MP_TRACE_MAX_NODE_INDEX));
    rec->n_rows = it->n_rows;
    if (it->streamed) {
        mp_status s = read_slices(it, ib, wb, err);
        if (s)
            return s;
        rec->expert_ids = ib ? it->slice : NULL;
        rec->weights = wb ? it->slice + ib : NULL;
        it->ids_off += (int)ib, it->weights_off += (int)wb;
    } else {
        rec->expert_ids = ib ? it->ids : NULL;
        rec->weights = wb ? it->weights : NULL;
        if (ib) /* an empty BLOB reads as NULL, and NULL + 0 is undefined */
            it->ids += ib;
        if (wb)
            it->weights += wb;
    }
    rec->expert_ids_bytes = ib;
    rec->weights_bytes = wb;
    it->ids_left -= ib, it->weights_left -= wb;
    return 1;
}

int mp_trace_routing_next(mp_trace_routing_iter *it, mp_trace_routing_rec *rec, mp_error *err)
{
    if (it->r->version >= 2)
        return routing_next_v2(it, rec, err);
    int rc = next_row(it->r, it->st, err, "reading routing");
    if (rc != 1)
        return rc;
    sqlite3_stmt *st = it->st;
    rec->key = sqlite3_column_int64(st, 0);
    rec->request_id = rec->key >> 36;
    rec->step = (rec->key >> 12) & MP_TRACE_MAX_STEP;
    rec->node_index = rec->key & MP_TRACE_MAX_NODE_INDEX;
    rec->n_rows = int_col(st, 1);
    rec->expert_ids = sqlite3_column_blob(st, 2);
    rec->expert_ids_bytes = (size_t)sqlite3_column_bytes(st, 2);
    rec->weights = sqlite3_column_blob(st, 3);
    rec->weights_bytes = (size_t)sqlite3_column_bytes(st, 3);
    return 1;
}

void mp_trace_routing_end(mp_trace_routing_iter *it)
{
    routing_iter_free(it);
}

int mp_trace_weight_bytes(const char *format)
{
    if (format && !strcmp(format, "f16"))
        return 2;
    if (format && !strcmp(format, "f32"))
        return 4;
    return 0;
}

mp_status mp_trace_decode_ids(const void *blob, size_t blob_bytes, int64_t id_bytes, int64_t n,
                              int32_t *out, mp_error *err)
{
    if ((id_bytes != 1 && id_bytes != 2) || n < 0 || blob_bytes != (size_t)n * (size_t)id_bytes)
        return mp_fail(err, MP_ERR_FORMAT, "expert_ids blob of %zu bytes, expected %lld ids of "
                       "%lld byte(s)", blob_bytes, (long long)n, (long long)id_bytes);
    const uint8_t *p = blob;
    if (id_bytes == 1)
        for (int64_t i = 0; i < n; i++)
            out[i] = p[i];
    else
        for (int64_t i = 0; i < n; i++)
            out[i] = (int32_t)(p[2 * i] | (uint32_t)p[2 * i + 1] << 8);
    return MP_OK;
}

mp_status mp_trace_decode_weights(const void *blob, size_t blob_bytes, const char *format,
                                  int64_t n, float *out, mp_error *err)
{
    int wb = mp_trace_weight_bytes(format);
    if (!wb || n < 0 || blob_bytes != (size_t)n * (size_t)wb)
        return mp_fail(err, MP_ERR_FORMAT, "weights blob of %zu bytes, expected %lld weights of "
                       "format %s", blob_bytes, (long long)n, format ? format : "(null)");
    const uint8_t *p = blob;
    for (int64_t i = 0; i < n; i++) {
        if (wb == 2) {
            out[i] = mp_f16_to_f32((uint16_t)(p[2 * i] | p[2 * i + 1] << 8));
        } else {
            uint32_t x = (uint32_t)p[4 * i] | (uint32_t)p[4 * i + 1] << 8 |
                         (uint32_t)p[4 * i + 2] << 16 | (uint32_t)p[4 * i + 3] << 24;
            memcpy(&out[i], &x, 4);
        }
    }
    return MP_OK;
}
