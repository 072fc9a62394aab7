/* collector/trace_materialize.h — `moeplan trace materialize`: the route_choices view as a table.
 *
 * The view route_choices (schemas/trace.sql) decodes the routing BLOBs in plain SQL, byte by byte:
 * about 1.8 µs of CPU per decision, so a 38 M decision trace takes minutes per query. The table
 * `routes` (schemas/routes.sql) holds the same rows, stored by (node, expert) and indexed by
 * token (request, step, node, row); queries on it take seconds (bench/NOTES-trace.md).
 *
 * Invariants:
 *  - only a trace the fail-closed reader accepts is materialized (collector/trace_check.h: run
 *    complete, footer matching, every record valid; the same one-line refusal as analyze's), and
 *    the table's rows are that reader's records, decoded;
 *  - atomic: the trace is copied to TRACE.tmp.PID beside it (SQLite's backup, page by page), the
 *    table and its index are written into the copy, which is fsync'd and renamed over the trace.
 *    A failure or a crash leaves the trace as it was (and at most the temporary); a reader that
 *    has the trace open keeps reading the file it opened;
 *  - idempotent: a trace that has the table already is left alone (the table only ever appears
 *    complete, so having it means having all of it).
 * The copy needs the trace's size again in free space, and the table takes about 47 bytes per
 * decision, 13 times the trace (8-byte weights, keys, the index): it is asked for, never written
 * by collect or import. Memory: a 256 MiB buffer that regroups the routes by (node, expert), a count per
 * (node, expert), and SQLite's cache (128 MiB) and sorter.
 */
#ifndef MP_COLLECTOR_TRACE_MATERIALIZE_H
#define MP_COLLECTOR_TRACE_MATERIALIZE_H

#include <stdbool.h>
#include <stdint.h>

#include "base/error.h"
#include "base/progress.h"

typedef struct mp_trace_materialize_result {
    bool already;          /* the trace had the table: nothing was written */
    int64_t n_routes;      /* rows written (0 when already) */
    int64_t bytes_before, bytes_after; /* the trace file's size */
} mp_trace_materialize_result;

/* Materialize path's routing into its routes table. progress (may be NULL) is taken through
 * the steps: routing records counted (its total becomes the footer's n_routing), then
 * "materialize: write" in routes, then "materialize: index by token" (one SQL statement: its
 * elapsed time only). */
mp_status mp_trace_materialize(const char *path, mp_progress *progress,
                               mp_trace_materialize_result *res, mp_error *err);

/* The same with a regrouping buffer of buffer_routes routes instead of 256 MiB' worth: the tests
 * make it small, so that a small trace takes several groups and cells larger than the buffer. */
mp_status mp_trace_materialize_buffered(const char *path, uint64_t buffer_routes,
                                        mp_progress *progress, mp_trace_materialize_result *res,
                                        mp_error *err);

/* The DDL of the table (schemas/routes.sql, embedded at build time). */
extern const char mp_trace_routes_sql[];

#endif
