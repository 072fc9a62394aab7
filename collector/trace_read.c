/* collector/trace_read.c — the trace reader (see trace_read.h): opening a trace, the header checks
 * (application_id, user_version), the run, nodes and requests loaded at open, row counts for the
 * footer and SQLite's page check. Its streams: trace_read_routing.c (steps, routing, decoding) and
 * trace_read_timing.c (timing rows).
 *
 * Invariants: the connection is SQLITE_OPEN_READONLY; every string handed out is owned by the
 * reader (copied at open) or by the iterator's current row (valid until the next call); nothing
 * read is repaired, only NULL mapped to -1 / NULL.
 */
#include "collector/trace_read_impl.h"
#include "base/input_file.h"

#include <stdlib.h>
#include <string.h>

static char *dup_col(sqlite3_stmt *st, int i)
{
    const unsigned char *t = sqlite3_column_text(st, i);
    if (!t || sqlite3_column_type(st, i) == SQLITE_NULL)
        return NULL;
    return strdup((const char *)t);
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

int64_t mp_trace_reader_version(const mp_trace_reader *r) { return r->version; }

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
