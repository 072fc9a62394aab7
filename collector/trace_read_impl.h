/* collector/trace_read_impl.h — what the raw reader's files share, for them alone: trace_read.c
 * (open, header checks, the run, nodes and requests loaded at open), trace_read_routing.c (the
 * steps and routing streams, the decoding helpers) and trace_read_timing.c (the timing stream).
 * Not a public header; consumers use trace_read.h.
 *
 * Invariants: the reader's fields are set once, at open, and only read after it (nodes in
 * node_index order: the version 2 routing stream slices its rows by them); every SQL failure
 * becomes one line naming the trace and what was being read (sql_err); a NULL integer column
 * reads -1 (int_col), in every file the same.
 */
#ifndef MP_COLLECTOR_TRACE_READ_IMPL_H
#define MP_COLLECTOR_TRACE_READ_IMPL_H

#include <stdbool.h>
#include <stdint.h>

#include <sqlite3.h>

#include "collector/trace_read.h"

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

/* Column i as an integer, -1 where NULL. The type is asked only of a 0 (what NULL reads as): one
 * call instead of two for most values, on every timing row of a live trace. */
static inline int64_t int_col(sqlite3_stmt *st, int i)
{
    const int64_t v = sqlite3_column_int64(st, i);
    return v == 0 && sqlite3_column_type(st, i) == SQLITE_NULL ? -1 : v;
}

static inline mp_status sql_err(mp_trace_reader *r, mp_error *err, const char *what)
{
    return mp_fail(err, MP_ERR_FORMAT, "trace %s: %s: %s", r->path, what, sqlite3_errmsg(r->db));
}

static inline mp_status begin_stmt(mp_trace_reader *r, const char *sql, sqlite3_stmt **st, mp_error *err)
{
    if (sqlite3_prepare_v2(r->db, sql, -1, st, NULL) != SQLITE_OK)
        return sql_err(r, err, "preparing a query");
    return MP_OK;
}

static inline int next_row(mp_trace_reader *r, sqlite3_stmt *st, mp_error *err, const char *what)
{
    int rc = sqlite3_step(st);
    if (rc == SQLITE_ROW)
        return 1;
    if (rc == SQLITE_DONE)
        return 0;
    return sql_err(r, err, what);
}

#endif
