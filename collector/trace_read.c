/* collector/trace_read.c — the trace reader (see trace_read.h).
 *
 * Invariants: the connection is SQLITE_OPEN_READONLY; every string handed out is owned by the
 * reader (copied at open) or by the iterator's current row (valid until the next call); nothing
 * read is repaired, only NULL mapped to -1 / NULL.
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
 */
#include "kernels/quant.h"
#include "collector/trace_read.h"
#include "base/input_file.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sqlite3.h>

/* Step rows up to this size (expert_ids + weights) are read in one piece. */
#define MP_TRACE_READ_DIRECT_BYTES 1048576
#define MP_STR_(x) #x
#define MP_STR(x) MP_STR_(x)

struct mp_trace_reader {
    sqlite3 *db;
    char *path;
    int64_t version;         /* schema version: 1 or 2 */
    mp_trace_run run;
    char *run_strings[24];   /* owned copies behind run's const char * fields */
    int n_run_strings;
    mp_trace_node_info *nodes; /* (n_nodes) by node_index */
    int64_t n_nodes;
    mp_trace_request_info *requests; /* (n_requests) in ord order */
    int64_t n_requests;
};

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
struct mp_trace_timing_iter {
    mp_trace_reader *r;
    sqlite3_stmt *st;
    bool counts_only; /* mp_trace_timing_begin_counts: key, hits, misses, the tier's counts, served */
};

static char *dup_col(sqlite3_stmt *st, int i)
{
    const unsigned char *t = sqlite3_column_text(st, i);
    if (!t || sqlite3_column_type(st, i) == SQLITE_NULL)
        return NULL;
    return strdup((const char *)t);
}

/* Column i as an integer, -1 where NULL. The type is asked only of a 0 (what NULL reads as): one
 * call instead of two for most values, on every timing row of a live trace. */
static int64_t int_col(sqlite3_stmt *st, int i)
{
    const int64_t v = sqlite3_column_int64(st, i);
    return v == 0 && sqlite3_column_type(st, i) == SQLITE_NULL ? -1 : v;
}

static mp_status sql_err(mp_trace_reader *r, mp_error *err, const char *what)
{
    return mp_fail(err, MP_ERR_FORMAT, "trace %s: %s: %s", r->path, what, sqlite3_errmsg(r->db));
}

/* A header pragma that fails: "not a SQLite database" only when SQLite says so; a hot journal
 * left by a writer that was killed mid-transaction reads as "attempt to write a readonly
 * database" to a read-only reader, and is named as such. */
static mp_status header_err(mp_trace_reader *r, mp_error *err)
{
    const int code = sqlite3_errcode(r->db) & 0xff;
    if (code == SQLITE_NOTADB)
        return sql_err(r, err, "not a SQLite database");
    if (code == SQLITE_READONLY)
        return sql_err(r, err, "a journal beside it holds an unfinished transaction (its writer was "
                       "killed), which a read-only reader cannot roll back");
    return sql_err(r, err, "reading the database header");
}

static mp_status pragma_int(mp_trace_reader *r, const char *sql, int64_t *out, mp_error *err)
{
    sqlite3_stmt *st = NULL;
    if (sqlite3_prepare_v2(r->db, sql, -1, &st, NULL) != SQLITE_OK)
        return header_err(r, err);
    int rc = sqlite3_step(st);
    *out = rc == SQLITE_ROW ? sqlite3_column_int64(st, 0) : -1;
    sqlite3_finalize(st);
    if (rc != SQLITE_ROW)
        return header_err(r, err);
    return MP_OK;
}

/* Keep a string owned by the reader for the run struct. */
static const char *keep(mp_trace_reader *r, char *s)
{
    if (s && r->n_run_strings < (int)(sizeof r->run_strings / sizeof r->run_strings[0]))
        r->run_strings[r->n_run_strings++] = s;
    else
        free(s), s = NULL;
    return s;
}

static mp_status load_run(mp_trace_reader *r, mp_error *err)
{
    mp_trace_run *u = &r->run;
    sqlite3_stmt *st = NULL;
    if (sqlite3_prepare_v2(r->db,
                           "SELECT moeplan_version, source, source_path, model_path, model_sha256,"
                           " architecture, n_layers, n_moe_layers, n_experts, top_k, n_embd,"
                           " n_ff_expert, n_vocab, quant_types, device, gpu_name, cpu_model,"
                           " threads, profile_sha256, budget_bytes, config_json, start_time,"
                           " end_time, status, error FROM run ORDER BY id LIMIT 1",
                           -1, &st, NULL) != SQLITE_OK)
        return sql_err(r, err, "reading the run table");
    int rc = sqlite3_step(st);
    if (rc != SQLITE_ROW) {
        sqlite3_finalize(st);
        if (rc == SQLITE_DONE)
            return mp_fail(err, MP_ERR_FORMAT, "trace %s: the run table is empty", r->path);
        return sql_err(r, err, "reading the run table");
    }
    u->moeplan_version = keep(r, dup_col(st, 0));
    u->source = keep(r, dup_col(st, 1));
    u->source_path = keep(r, dup_col(st, 2));
    u->model_path = keep(r, dup_col(st, 3));
    u->model_sha256 = keep(r, dup_col(st, 4));
    u->architecture = keep(r, dup_col(st, 5));
    u->n_layers = int_col(st, 6);
    u->n_moe_layers = int_col(st, 7);
    u->n_experts = int_col(st, 8);
    u->top_k = int_col(st, 9);
    u->n_embd = int_col(st, 10);
    u->n_ff_expert = int_col(st, 11);
    u->n_vocab = int_col(st, 12);
    u->quant_types = keep(r, dup_col(st, 13));
    u->device = keep(r, dup_col(st, 14));
    u->gpu_name = keep(r, dup_col(st, 15));
    u->cpu_model = keep(r, dup_col(st, 16));
    u->threads = int_col(st, 17);
    u->profile_sha256 = keep(r, dup_col(st, 18));
    u->budget_bytes = int_col(st, 19);
    u->config_json = keep(r, dup_col(st, 20));
    u->start_time = keep(r, dup_col(st, 21));
    u->end_time = keep(r, dup_col(st, 22));
    u->status = keep(r, dup_col(st, 23));
    u->error = keep(r, dup_col(st, 24));
    sqlite3_finalize(st);

    if (sqlite3_prepare_v2(r->db, "SELECT n_requests, n_steps, n_routing, n_timing, n_cupti FROM"
                                  " footer ORDER BY id LIMIT 1", -1, &st, NULL) != SQLITE_OK)
        return sql_err(r, err, "reading the footer");
    rc = sqlite3_step(st);
    u->has_footer = rc == SQLITE_ROW;
    if (u->has_footer) {
        u->footer_n_requests = int_col(st, 0);
        u->footer_n_steps = int_col(st, 1);
        u->footer_n_routing = int_col(st, 2);
        u->footer_n_timing = int_col(st, 3);
        u->footer_n_cupti = int_col(st, 4);
    }
    sqlite3_finalize(st);
    if (rc != SQLITE_ROW && rc != SQLITE_DONE)
        return sql_err(r, err, "reading the footer");
    return MP_OK;
}

static mp_status load_nodes(mp_trace_reader *r, mp_error *err)
{
    sqlite3_stmt *st = NULL;
    if (sqlite3_prepare_v2(r->db, "SELECT node_index, node_type, node_name, layer, n_experts,"
                                  " top_k, expert_bytes, id_bytes, weight_format FROM nodes"
                                  " ORDER BY node_index", -1, &st, NULL) != SQLITE_OK)
        return sql_err(r, err, "reading the nodes table");
    int64_t cap = 0;
    int rc;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        if (r->n_nodes == cap) {
            cap = cap ? 2 * cap : 64;
            mp_trace_node_info *n = realloc(r->nodes, (size_t)cap * sizeof *n);
            if (!n) {
                sqlite3_finalize(st);
                return mp_fail(err, MP_ERR_NOMEM, "trace %s: out of memory", r->path);
            }
            r->nodes = n;
        }
        mp_trace_node_info *n = &r->nodes[r->n_nodes++];
        n->node_index = int_col(st, 0);
        n->node_type = dup_col(st, 1);
        n->node_name = dup_col(st, 2);
        n->layer = int_col(st, 3);
        n->n_experts = int_col(st, 4);
        n->top_k = int_col(st, 5);
        n->expert_bytes = int_col(st, 6);
        n->id_bytes = int_col(st, 7);
        n->weight_format = dup_col(st, 8);
    }
    sqlite3_finalize(st);
    if (rc != SQLITE_DONE)
        return sql_err(r, err, "reading the nodes table");
    return MP_OK;
}

static mp_status load_requests(mp_trace_reader *r, mp_error *err)
{
    sqlite3_stmt *st = NULL;
    if (sqlite3_prepare_v2(r->db, "SELECT request_id, ord, external_id, n_prompt_tokens,"
                                  " n_gen_tokens, start_ns, end_ns, prompt_sha256, prompt_text"
                                  " FROM requests ORDER BY ord, request_id", -1, &st,
                           NULL) != SQLITE_OK)
        return sql_err(r, err, "reading the requests table");
    int64_t cap = 0;
    int rc;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        if (r->n_requests == cap) {
            cap = cap ? 2 * cap : 64;
            mp_trace_request_info *q = realloc(r->requests, (size_t)cap * sizeof *q);
            if (!q) {
                sqlite3_finalize(st);
                return mp_fail(err, MP_ERR_NOMEM, "trace %s: out of memory", r->path);
            }
            r->requests = q;
        }
        mp_trace_request_info *q = &r->requests[r->n_requests++];
        q->request_id = int_col(st, 0);
        q->ord = int_col(st, 1);
        q->external_id = dup_col(st, 2);
        q->n_prompt_tokens = int_col(st, 3);
        q->n_gen_tokens = int_col(st, 4);
        q->start_ns = int_col(st, 5);
        q->end_ns = int_col(st, 6);
        q->prompt_sha256 = dup_col(st, 7);
        q->prompt_text = dup_col(st, 8);
    }
    sqlite3_finalize(st);
    if (rc != SQLITE_DONE)
        return sql_err(r, err, "reading the requests table");
    return MP_OK;
}

mp_status mp_trace_reader_open(const char *path, mp_trace_reader **out, mp_error *err)
{
    *out = NULL;
    mp_trace_reader *r = calloc(1, sizeof *r);
    if (!r || !(r->path = strdup(path))) {
        free(r);
        return mp_fail(err, MP_ERR_NOMEM, "trace %s: out of memory", path);
    }
    /* SQLite's own open would block on a FIFO and call a directory "disk I/O error" */
    mp_status cs = mp_input_check(path, "trace", MP_INPUT_NO_CAP, NULL, err);
    if (cs) {
        mp_trace_reader_close(r);
        return cs;
    }
    if (sqlite3_open_v2(path, &r->db, SQLITE_OPEN_READONLY | SQLITE_OPEN_NOMUTEX, NULL) !=
        SQLITE_OK) {
        mp_fail(err, MP_ERR_IO, "trace %s: cannot open: %s", path,
                r->db ? sqlite3_errmsg(r->db) : "out of memory");
        mp_trace_reader_close(r);
        return MP_ERR_IO;
    }
    int64_t app_id, version;
    mp_status s;
    if ((s = pragma_int(r, "PRAGMA application_id", &app_id, err)) ||
        (s = pragma_int(r, "PRAGMA user_version", &version, err))) {
        mp_trace_reader_close(r);
        return s;
    }
    if (app_id != MP_TRACE_APPLICATION_ID) {
        mp_fail(err, MP_ERR_FORMAT, "trace %s: not a moeplan trace (application_id %lld, expected "
                "%d)", path, (long long)app_id, MP_TRACE_APPLICATION_ID);
        mp_trace_reader_close(r);
        return MP_ERR_FORMAT;
    }
    if (version != 1 && version != MP_TRACE_SCHEMA_VERSION) {
        mp_fail(err, MP_ERR_FORMAT, "trace %s: schema version %lld, this moeplan reads versions 1 "
                "and %d", path, (long long)version, MP_TRACE_SCHEMA_VERSION);
        mp_trace_reader_close(r);
        return MP_ERR_FORMAT;
    }
    r->version = version;
    if ((s = load_run(r, err)) || (s = load_nodes(r, err)) || (s = load_requests(r, err))) {
        mp_trace_reader_close(r);
        return s;
    }
    *out = r;
    return MP_OK;
}

void mp_trace_reader_close(mp_trace_reader *r)
{
    if (!r)
        return;
    for (int i = 0; i < r->n_run_strings; i++)
        free(r->run_strings[i]);
    for (int64_t i = 0; i < r->n_nodes; i++) {
        free((char *)r->nodes[i].node_type);
        free((char *)r->nodes[i].node_name);
        free((char *)r->nodes[i].weight_format);
    }
    for (int64_t i = 0; i < r->n_requests; i++) {
        free((char *)r->requests[i].external_id);
        free((char *)r->requests[i].prompt_sha256);
        free((char *)r->requests[i].prompt_text);
    }
    free(r->nodes);
    free(r->requests);
    sqlite3_close(r->db);
    free(r->path);
    free(r);
}

const char *mp_trace_reader_path(const mp_trace_reader *r) { return r->path; }
const mp_trace_run *mp_trace_reader_run(const mp_trace_reader *r) { return &r->run; }
int64_t mp_trace_reader_n_nodes(const mp_trace_reader *r) { return r->n_nodes; }
const mp_trace_node_info *mp_trace_reader_nodes(const mp_trace_reader *r) { return r->nodes; }
int64_t mp_trace_reader_n_requests(const mp_trace_reader *r) { return r->n_requests; }
const mp_trace_request_info *mp_trace_reader_requests(const mp_trace_reader *r)
{
    return r->requests;
}

const mp_trace_node_info *mp_trace_reader_node(const mp_trace_reader *r, int64_t node_index)
{
    int64_t lo = 0, hi = r->n_nodes; /* nodes are sorted by node_index */
    while (lo < hi) {
        int64_t mid = lo + (hi - lo) / 2;
        if (r->nodes[mid].node_index < node_index)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < r->n_nodes && r->nodes[lo].node_index == node_index ? &r->nodes[lo] : NULL;
}

mp_status mp_trace_reader_count_rows(mp_trace_reader *r, const char *table, int64_t *out,
                                     mp_error *err)
{
    *out = 0;
    const char *sql = !strcmp(table, "timing") ? "SELECT count(*) FROM timing"
                      : !strcmp(table, "cupti") ? "SELECT count(*) FROM cupti"
                                                : NULL;
    if (!sql)
        return mp_fail(err, MP_ERR_INTERNAL, "trace %s: no row count for table %s", r->path, table);
    sqlite3_stmt *st = NULL;
    if (sqlite3_prepare_v2(r->db, sql, -1, &st, NULL) != SQLITE_OK) {
        const bool missing = strstr(sqlite3_errmsg(r->db), "no such table") != NULL;
        sqlite3_finalize(st);
        return missing ? MP_OK : sql_err(r, err, "counting rows");
    }
    const int rc = sqlite3_step(st);
    if (rc == SQLITE_ROW)
        *out = sqlite3_column_int64(st, 0);
    sqlite3_finalize(st);
    return rc == SQLITE_ROW ? MP_OK : sql_err(r, err, "counting rows");
}

mp_status mp_trace_reader_quick_check(mp_trace_reader *r, mp_error *err)
{
    sqlite3_stmt *st = NULL;
    if (sqlite3_prepare_v2(r->db, "PRAGMA quick_check(1)", -1, &st, NULL) != SQLITE_OK)
        return sql_err(r, err, "checking the file's pages");
    const int rc = sqlite3_step(st);
    const char *res = rc == SQLITE_ROW ? (const char *)sqlite3_column_text(st, 0) : NULL;
    mp_status s = MP_OK;
    if (rc != SQLITE_ROW)
        s = sql_err(r, err, "checking the file's pages");
    else if (!res || strcmp(res, "ok"))
        s = mp_fail(err, MP_ERR_FORMAT, "trace %s: the file's pages fail SQLite's quick_check (%s): "
                    "expected an undamaged database", r->path, res ? res : "no result");
    sqlite3_finalize(st);
    return s;
}

static mp_status begin_stmt(mp_trace_reader *r, const char *sql, sqlite3_stmt **st, mp_error *err)
{
    if (sqlite3_prepare_v2(r->db, sql, -1, st, NULL) != SQLITE_OK)
        return sql_err(r, err, "preparing a query");
    return MP_OK;
}

/* Whether table has column: columns added to a schema version after its first writers are read
 * only where they exist. */
static bool has_column(mp_trace_reader *r, const char *table, const char *column)
{
    sqlite3_stmt *st = NULL;
    bool found = false;
    if (sqlite3_prepare_v2(r->db, "SELECT 1 FROM pragma_table_info(?1) WHERE name = ?2", -1, &st, NULL) == SQLITE_OK) {
        sqlite3_bind_text(st, 1, table, -1, SQLITE_STATIC);
        sqlite3_bind_text(st, 2, column, -1, SQLITE_STATIC);
        found = sqlite3_step(st) == SQLITE_ROW;
    }
    sqlite3_finalize(st);
    return found;
}

static int next_row(mp_trace_reader *r, sqlite3_stmt *st, mp_error *err, const char *what)
{
    int rc = sqlite3_step(st);
    if (rc == SQLITE_ROW)
        return 1;
    if (rc == SQLITE_DONE)
        return 0;
    return sql_err(r, err, what);
}

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

int64_t mp_trace_reader_version(const mp_trace_reader *r) { return r->version; }

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

static mp_status timing_begin(mp_trace_reader *r, bool counts_only, mp_trace_timing_iter **out, mp_error *err)
{
    *out = calloc(1, sizeof **out);
    if (!*out)
        return mp_fail(err, MP_ERR_NOMEM, "trace %s: out of memory", r->path);
    (*out)->r = r;
    (*out)->counts_only = counts_only;
    /* the adaptive tier's columns, then served, were added to version 2: traces written before
     * lack them (each addition came after the one before it, but each is looked for alone) */
    const bool tier = has_column(r, "timing", "tier_hits"), served = has_column(r, "timing", "served");
    const char *tier_cols = tier ? "tier_hits, tier_late, tier_admissions, tier_evictions, tier_copy_bytes"
                                 : "0, 0, 0, 0, 0";
    char sql[400];
    if (counts_only)
        snprintf(sql, sizeof sql, "SELECT key, hits, misses, %s, %s FROM timing ORDER BY key", tier_cols,
                 served ? "served" : "NULL");
    else
        snprintf(sql, sizeof sql, "SELECT key, gpu_expert_ns, cpu_expert_ns, h2d_bytes, h2d_ns, d2h_bytes, d2h_ns,"
                 " sync_ns, merge_ns, hits, misses, %s, %s FROM timing ORDER BY key", tier_cols,
                 served ? "served" : "NULL");
    mp_status s = begin_stmt(r, sql, &(*out)->st, err);
    if (s) {
        free(*out);
        *out = NULL;
    }
    return s;
}

mp_status mp_trace_timing_begin(mp_trace_reader *r, mp_trace_timing_iter **out, mp_error *err)
{
    return timing_begin(r, false, out, err);
}

mp_status mp_trace_timing_begin_counts(mp_trace_reader *r, mp_trace_timing_iter **out, mp_error *err)
{
    return timing_begin(r, true, out, err);
}

/* Columns i.. as the row's counts (hits, misses, then the tier's five: NULL reads 0, no tier) and
 * served codes. served: a value of another SQL type reads through SQLite's conversion, as the
 * routing BLOBs do; an empty one is present (a non-NULL pointer, 0 bytes). Few calls per column:
 * this runs for every timing row of a live trace. */
static void counts_cols(sqlite3_stmt *st, int i, mp_trace_timing_rec *rec)
{
    mp_moe_timing *t = &rec->t;
    t->hits = int_col(st, i);
    t->misses = int_col(st, i + 1);
    t->tier_hits = sqlite3_column_int64(st, i + 2);
    t->tier_late = sqlite3_column_int64(st, i + 3);
    t->tier_admissions = sqlite3_column_int64(st, i + 4);
    t->tier_evictions = sqlite3_column_int64(st, i + 5);
    t->tier_copy_bytes = sqlite3_column_int64(st, i + 6);
    const uint8_t *b = sqlite3_column_blob(st, i + 7); /* NULL: the value is NULL or empty */
    rec->served_bytes = b ? (size_t)sqlite3_column_bytes(st, i + 7) : 0;
    t->served = b ? b : sqlite3_column_type(st, i + 7) != SQLITE_NULL ? (const uint8_t *)"" : NULL;
}

int mp_trace_timing_next(mp_trace_timing_iter *it, mp_trace_timing_rec *rec, mp_error *err)
{
    int rc = next_row(it->r, it->st, err, "reading timing");
    if (rc != 1)
        return rc;
    sqlite3_stmt *st = it->st;
    int64_t key = sqlite3_column_int64(st, 0);
    rec->request_id = key >> 36;
    rec->step = (key >> 12) & MP_TRACE_MAX_STEP;
    rec->node_index = key & MP_TRACE_MAX_NODE_INDEX;
    mp_moe_timing *t = &rec->t;
    if (it->counts_only) {
        t->gpu_expert_ns = t->cpu_expert_ns = t->h2d_bytes = t->h2d_ns = 0;
        t->d2h_bytes = t->d2h_ns = t->sync_ns = t->merge_ns = 0;
        counts_cols(st, 1, rec);
        return 1;
    }
    t->gpu_expert_ns = int_col(st, 1);
    t->cpu_expert_ns = int_col(st, 2);
    t->h2d_bytes = int_col(st, 3);
    t->h2d_ns = int_col(st, 4);
    t->d2h_bytes = int_col(st, 5);
    t->d2h_ns = int_col(st, 6);
    t->sync_ns = int_col(st, 7);
    t->merge_ns = int_col(st, 8);
    counts_cols(st, 9, rec);
    return 1;
}

void mp_trace_timing_end(mp_trace_timing_iter *it)
{
    if (it) {
        sqlite3_finalize(it->st);
        free(it);
    }
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
