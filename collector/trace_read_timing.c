/* collector/trace_read_timing.c — the raw reader's timing stream (see trace_read.h): one row per
 * (request, step, node) with the MoE block's times and counts, and its served codes as stored.
 *
 * Invariants: rows come in key order, (request_id, step, node_index); a column added to schema
 * version 2 after its first writers (the adaptive tier's counts, then served) is read only where
 * the table has it: a trace from before it reads 0 for the counts and NULL for served, as a row
 * that stores NULL does; sizes and values are reported as stored, checked by trace_check.h.
 */
#include "collector/trace_read_impl.h"

#include <stdio.h>
#include <stdlib.h>

struct mp_trace_timing_iter {
    mp_trace_reader *r;
    sqlite3_stmt *st;
    bool counts_only; /* mp_trace_timing_begin_counts: key, hits, misses, the tier's counts, served */
};

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
