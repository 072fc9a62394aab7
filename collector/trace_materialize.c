/* collector/trace_materialize.c — the routes table written into a copy of a finished trace, which
 * then replaces it (see trace_materialize.h for the invariants).
 *
 * Where the time goes: one INSERT per routing choice (SQLite's per-row cost, ~1 µs, each an
 * append), then the index's sort. The copy is private until it is renamed, so it is written
 * without a journal and without syncs (synchronous=OFF, journal_mode=OFF): a crash can only spoil
 * the temporary, which is never renamed; the one fsync is mp_outfile_commit's, before the rename.
 */
#include "collector/trace_materialize.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <sqlite3.h>

#include "collector/trace.h"
#include "collector/trace_check.h"
#include "base/atomic_file.h"

/* The index build is one statement: SQLite calls this every so many VM steps, so that the
 * progress line's elapsed time keeps moving while it sorts. */
static int on_sqlite_progress(void *user)
{
    mp_progress_poll(user);
    return 0;
}

static mp_status sql_fail(sqlite3 *db, const char *path, const char *doing, mp_error *err)
{
    const int code = sqlite3_errcode(db) & 0xff;
    char cause[256];
    mp_trace_sql_cause(db, cause, sizeof cause);
    return mp_fail(err, code == SQLITE_NOMEM ? MP_ERR_NOMEM : MP_ERR_IO, "trace %s: %s: %s%s",
                   path, doing, cause,
                   code == SQLITE_FULL /* ENOSPC */
                       ? "; the copy needs the trace's size and the table's (about 47 bytes per "
                         "routing decision) in free space beside the trace" : "");
}

/* Run the statements of sql in order, at most max of them (-1: all); *rest gets the text after
 * the last one run. */
static mp_status exec_statements(sqlite3 *db, const char *sql, int max, const char **rest,
                                 const char *path, mp_error *err)
{
    const char *p = sql;
    for (int i = 0; max < 0 || i < max; i++) {
        sqlite3_stmt *st = NULL;
        const char *tail = NULL;
        if (sqlite3_prepare_v2(db, p, -1, &st, &tail) != SQLITE_OK)
            return sql_fail(db, path, "creating the routes table", err);
        if (!st) /* only whitespace and comments were left */
            break;
        const int rc = sqlite3_step(st);
        sqlite3_finalize(st);
        if (rc != SQLITE_DONE && rc != SQLITE_ROW)
            return sql_fail(db, path, "creating the routes table", err);
        p = tail;
    }
    if (rest)
        *rest = p;
    return MP_OK;
}

static mp_status exec1(sqlite3 *db, const char *sql, const char *path, const char *doing,
                       mp_error *err)
{
    return sqlite3_exec(db, sql, NULL, NULL, NULL) == SQLITE_OK ? MP_OK
                                                                : sql_fail(db, path, doing, err);
}

/* Whether the trace has a table called name. */
static mp_status has_table(sqlite3 *db, const char *path, const char *name, bool *out,
                           mp_error *err)
{
    sqlite3_stmt *st = NULL;
    if (sqlite3_prepare_v2(db, "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = ?1",
                           -1, &st, NULL) != SQLITE_OK)
        return sql_fail(db, path, "reading the schema", err);
    sqlite3_bind_text(st, 1, name, -1, SQLITE_STATIC);
    const int rc = sqlite3_step(st);
    *out = rc == SQLITE_ROW && sqlite3_column_int64(st, 0) > 0;
    sqlite3_finalize(st);
    return rc == SQLITE_ROW ? MP_OK : sql_fail(db, path, "reading the schema", err);
}

/* The rows are written in the table's key order, (node, expert, request, step, row, rank), so
 * that every insert appends (packed pages, no sort). The checker hands records out by token
 * (request, step, node), so the routes are regrouped: a first pass counts the routes of every
 * (node, expert) cell; cells are then taken in key order in groups of at most BUFFER_BYTES' worth
 * of routes, and one pass per group puts each route of the group's cells at its place in a buffer
 * (a counting sort: within a cell the checker's order is already the key's), which is then
 * inserted. A cell larger than the buffer is a group of its own, inserted as it is read. */
#define BUFFER_BYTES ((size_t)256 << 20)

typedef struct route_slot {
    uint32_t request_id, step, row; /* request_id < 2^27, step and row < 2^24 */
    float weight;
    uint8_t rank;                   /* < MP_TRACE_MAX_TOPK */
} route_slot;

typedef struct writer {
    mp_trace_check *chk;
    sqlite3 *db;
    sqlite3_stmt *ins;
    const char *path;
    const mp_trace_node_info *nodes; /* (n_nodes) in node_index order: the checker's positions */
    int32_t n_nodes;
    int64_t n_experts;               /* the most of any node: cell = position × n_experts + id */
    uint64_t *count;                 /* (n_nodes × n_experts) routes per cell */
    uint64_t *next;                  /* (cells of the group) the buffer's next slot per cell */
    route_slot *buf;                 /* (buffer_routes) */
    uint64_t buffer_routes;
    mp_progress *progress;
    int64_t n_routes;
} writer;

static mp_status insert(writer *w, int64_t cell, const route_slot *r, mp_error *err)
{
    sqlite3_stmt *s = w->ins;
    sqlite3_bind_int64(s, 1, w->nodes[cell / w->n_experts].node_index);
    sqlite3_bind_int64(s, 2, cell % w->n_experts);
    sqlite3_bind_int64(s, 3, r->request_id);
    sqlite3_bind_int64(s, 4, r->step);
    sqlite3_bind_int64(s, 5, r->row);
    sqlite3_bind_int64(s, 6, r->rank);
    sqlite3_bind_double(s, 7, r->weight);
    if (sqlite3_step(s) != SQLITE_DONE) { /* the cause before reset clears it */
        const mp_status st = sql_fail(w->db, w->path, "writing the routes table", err);
        sqlite3_reset(s);
        return st;
    }
    sqlite3_reset(s);
    w->n_routes++;
    mp_progress_add(w->progress, 1);
    return MP_OK;
}

/* One pass over the checked records: count every cell (lo < 0), or place the routes of cells
 * [lo, hi) in the buffer (direct: insert them as they come, for a group of one cell). */
static mp_status pass(writer *w, int64_t lo, int64_t hi, bool direct, mp_error *err)
{
    mp_trace_check_iter *it = NULL;
    mp_status st = mp_trace_check_begin(w->chk, -1, &it, err);
    mp_trace_checked_rec rec;
    int rc = 0;
    while (st == MP_OK && (rc = mp_trace_check_next(it, &rec, err)) == 1) {
        const int64_t base = (int64_t)rec.node * w->n_experts, n = rec.n_rows * rec.top_k;
        if (lo < 0) {
            for (int64_t i = 0; i < n; i++)
                w->count[base + rec.expert_ids[i]]++;
            mp_progress_add(w->progress, 1);
            continue;
        }
        if (base + w->n_experts <= lo || base >= hi)
            continue; /* none of this node's cells is in the group */
        for (int64_t i = 0; i < n && st == MP_OK; i++) {
            const int64_t cell = base + rec.expert_ids[i];
            if (cell < lo || cell >= hi)
                continue;
            const route_slot r = {.request_id = (uint32_t)rec.request_id,
                                  .step = (uint32_t)rec.step,
                                  .row = (uint32_t)(i / rec.top_k),
                                  .weight = rec.weights[i],
                                  .rank = (uint8_t)(i % rec.top_k)};
            if (direct)
                st = insert(w, cell, &r, err);
            else
                w->buf[w->next[cell - lo]++] = r;
        }
    }
    if (st == MP_OK && rc < 0)
        st = (mp_status)rc;
    mp_trace_check_end(it);
    return st;
}

/* Every route, in the table's key order. */
static mp_status insert_routes(writer *w, mp_error *err)
{
    const int64_t n_cells = (int64_t)w->n_nodes * w->n_experts;
    mp_status st = pass(w, -1, 0, false, err);
    uint64_t total = 0;
    for (int64_t c = 0; c < n_cells; c++)
        total += w->count[c];
    mp_progress_next(w->progress, "materialize: write", "routes", (int64_t)total);
    if (st == MP_OK && total < w->buffer_routes)
        w->buffer_routes = total > 0 ? total : 1; /* a short trace needs a short buffer */
    if (st == MP_OK && !(w->buf = malloc(w->buffer_routes * sizeof *w->buf)))
        st = mp_fail(err, MP_ERR_NOMEM, "trace %s: out of memory for the routes table's buffer",
                     w->path);
    for (int64_t lo = 0, hi; st == MP_OK && lo < n_cells; lo = hi) {
        uint64_t routes = w->count[lo];
        for (hi = lo + 1; hi < n_cells && routes + w->count[hi] <= w->buffer_routes; hi++)
            routes += w->count[hi];
        if (routes == 0)
            continue;
        if (routes > w->buffer_routes) { /* one cell alone: its reading order is the key's */
            st = pass(w, lo, hi, true, err);
            continue;
        }
        uint64_t at = 0;
        for (int64_t c = lo; c < hi; c++)
            w->next[c - lo] = at, at += w->count[c];
        if ((st = pass(w, lo, hi, false, err)))
            break;
        at = 0;
        for (int64_t c = lo; c < hi && st == MP_OK; c++)
            for (uint64_t j = 0; j < w->count[c] && st == MP_OK; j++)
                st = insert(w, c, &w->buf[at++], err);
    }
    return st;
}

/* Copy src into the temporary, add the table and its index, close it. */
static mp_status write_copy(writer *w, sqlite3 *src, const char *tmp, mp_error *err)
{
    const char *path = w->path;
    sqlite3 *dst = NULL;
    if (sqlite3_open_v2(tmp, &dst, SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOMUTEX, NULL) != SQLITE_OK) {
        mp_status st = mp_fail(err, MP_ERR_IO, "trace %s: cannot open the copy %s: %s", path, tmp,
                               dst ? sqlite3_errmsg(dst) : "out of memory");
        sqlite3_close(dst);
        return st;
    }
    mp_status st = MP_OK;
    sqlite3_backup *b = sqlite3_backup_init(dst, "main", src, "main");
    if (!b || sqlite3_backup_step(b, -1) != SQLITE_DONE) {
        sqlite3_backup_finish(b);
        st = sql_fail(dst, path, "copying the trace", err);
    } else if (sqlite3_backup_finish(b) != SQLITE_OK) {
        st = sql_fail(dst, path, "copying the trace", err);
    }
    const char *index_sql = NULL;
    if (!st)
        st = exec1(dst, "PRAGMA journal_mode = OFF; PRAGMA synchronous = OFF; "
                        "PRAGMA cache_size = -131072; BEGIN", path, "preparing the copy", err);
    if (!st) /* the table: the file's first statement; its index after the rows */
        st = exec_statements(dst, mp_trace_routes_sql, 1, &index_sql, path, err);
    w->db = dst;
    if (!st && sqlite3_prepare_v2(dst, "INSERT INTO routes (node_index, expert_id, request_id, "
                                  "step, row, rank, weight) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
                                  -1, &w->ins, NULL) != SQLITE_OK)
        st = sql_fail(dst, path, "writing the routes table", err);
    if (!st)
        st = insert_routes(w, err);
    sqlite3_finalize(w->ins);
    w->ins = NULL;
    free(w->buf); /* the index's sorter takes memory next */
    w->buf = NULL;
    if (!st) {
        mp_progress_next(w->progress, "materialize: index by token", NULL, 0);
        mp_progress_poll(w->progress);
        sqlite3_progress_handler(dst, 1 << 20, on_sqlite_progress, w->progress);
        st = exec_statements(dst, index_sql, -1, NULL, path, err);
        sqlite3_progress_handler(dst, 0, NULL, NULL);
    }
    if (!st)
        st = exec1(dst, "COMMIT", path, "writing the routes table", err);
    w->db = NULL;
    if (sqlite3_close(dst) != SQLITE_OK && !st)
        st = mp_fail(err, MP_ERR_IO, "trace %s: closing the copy %s failed", path, tmp);
    return st;
}

mp_status mp_trace_materialize(const char *path, mp_progress *progress,
                               mp_trace_materialize_result *res, mp_error *err)
{
    return mp_trace_materialize_buffered(path, BUFFER_BYTES / sizeof(route_slot), progress, res,
                                         err);
}

mp_status mp_trace_materialize_buffered(const char *path, uint64_t buffer_routes,
                                        mp_progress *progress, mp_trace_materialize_result *res,
                                        mp_error *err)
{
    memset(res, 0, sizeof *res);
    /* what every reader refuses is refused here, with the same line */
    mp_trace_check *chk = NULL;
    mp_status st = mp_trace_check_open(path, NULL, NULL, &chk, err);
    if (st)
        return st;
    sqlite3 *src = NULL;
    char real[PATH_MAX];
    mp_outfile out = {.fd = -1};
    struct stat sb;
    writer w = {0};
    if (sqlite3_open_v2(path, &src, SQLITE_OPEN_READONLY | SQLITE_OPEN_NOMUTEX, NULL) != SQLITE_OK) {
        st = mp_fail(err, MP_ERR_IO, "trace %s: cannot open: %s", path,
                     src ? sqlite3_errmsg(src) : "out of memory");
        goto done;
    }
    if ((st = has_table(src, path, "routes", &res->already, err)))
        goto done;
    if (stat(path, &sb) != 0) {
        st = mp_fail(err, MP_ERR_IO, "trace %s: %s", path, strerror(errno));
        goto done;
    }
    res->bytes_before = res->bytes_after = (int64_t)sb.st_size;
    if (res->already)
        goto done;
    /* the temporary beside the file itself: a trace reached through a link is replaced, not
     * the link */
    if (!realpath(path, real)) {
        st = mp_fail(err, MP_ERR_IO, "trace %s: %s", path, strerror(errno));
        goto done;
    }
    if ((st = mp_outfile_open(&out, real, "trace", MP_OUT_NO_FD, err)))
        goto done;
    chmod(out.tmp, sb.st_mode & 07777); /* the trace keeps its permissions */
    const mp_trace_reader *r = mp_trace_check_reader(chk);
    w.chk = chk;
    w.path = path;
    w.nodes = mp_trace_reader_nodes(r);
    w.n_nodes = (int32_t)mp_trace_reader_n_nodes(r);
    for (int32_t i = 0; i < w.n_nodes; i++)
        w.n_experts = w.nodes[i].n_experts > w.n_experts ? w.nodes[i].n_experts : w.n_experts;
    /* the checker bounds nodes × experts (MP_TRACE_MAX_NODE_EXPERTS): the count table is small */
    w.count = calloc((size_t)w.n_nodes * (size_t)w.n_experts, sizeof *w.count);
    w.next = malloc((size_t)w.n_nodes * (size_t)w.n_experts * sizeof *w.next);
    w.buffer_routes = buffer_routes > 0 ? buffer_routes : 1; /* allocated once counted */
    if (!w.count || !w.next) {
        st = mp_fail(err, MP_ERR_NOMEM, "trace %s: out of memory for the routes table's counts",
                     path);
        goto done;
    }
    w.progress = progress;
    mp_progress_set_total(progress, mp_trace_reader_run(r)->footer_n_routing);
    st = write_copy(&w, src, out.tmp, err);
    res->n_routes = w.n_routes;
    if (st)
        goto done;
    if ((st = mp_outfile_commit(&out, err)))
        goto done;
    res->bytes_after = stat(real, &sb) == 0 ? (int64_t)sb.st_size : -1;
done:
    free(w.count), free(w.next), free(w.buf);
    mp_outfile_abort(&out); /* a no-op once committed */
    sqlite3_close(src);
    mp_trace_check_close(chk);
    return st;
}
