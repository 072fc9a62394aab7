/* analyzer/validate.h — fail-closed validation of one or more traces, and the validated record
 * stream the statistics are computed from.
 *
 * Two stages, both reporting problems into an mp_an_problems list. Each trace's own checks are
 * the collector's (collector/trace_check.h, the one fail-closed reader the simulator and route
 * replay use too); this module adds what only a merge of traces or a model can get wrong:
 *  1. mp_an_input_open: per trace, the checker's stage 1 (tables: run, footer, nodes, requests);
 *     across traces: same model (SHA-256), same shapes, identical node identities, and no run
 *     given twice (the same file by device and inode, or a copy: the same run id); with a model:
 *     node shapes and bytes per expert equal to the GGUF's.
 *  2. mp_an_scan: the checker's stage 2 over every trace in turn (steps and routing, each record
 *     decoded and checked; at each trace's end the footer counts).
 *
 * Records are (request, step, node) whatever the trace's schema version (the reader slices a
 * version 2 step row per node), so every check and location is the same for both versions.
 * Every problem names the trace path and as much of (request, step, node, row, slot) as applies.
 * With max problems 1 (the default) the first problem stops everything; --validate-only raises
 * the limit and records are skipped past their problems so that later ones are found too.
 * Only records without any problem are emitted, so the statistics never see invalid input.
 */
#ifndef MP_ANALYZER_VALIDATE_H
#define MP_ANALYZER_VALIDATE_H

#include "analyzer/rows.h"
#include "analyzer/stats.h"
#include "collector/trace_check.h"
#include "collector/trace_read.h"
#include "base/progress.h"

typedef struct mp_an_problems {
    int64_t max;  /* stop once this many are recorded (>= 1) */
    int64_t n;    /* recorded so far (never more than max) */
    char **msg;   /* (max) one line each; msg[0] is the first problem */
} mp_an_problems;

mp_status mp_an_problems_init(mp_an_problems *pb, int64_t max, mp_error *err);
void mp_an_problems_free(mp_an_problems *pb);
/* Record a problem. Returns MP_ERR_FORMAT once the limit is reached (callers then stop), else
 * MP_OK (callers skip the offending item and go on). */
mp_status mp_an_problem(mp_an_problems *pb, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

typedef struct mp_an_trace_meta {
    const char *path;
    int64_t request_base; /* merged ord of this trace's first request */
    int64_t n_requests;
} mp_an_trace_meta;

typedef struct mp_an_input {
    int n_traces;
    mp_trace_check **check;   /* (n_traces) each trace through the collector's checker */
    mp_trace_reader **trace;  /* (n_traces) their readers (owned by check) */
    mp_an_trace_meta *meta;   /* (n_traces) */
    int32_t n_nodes;
    mp_an_node *nodes;        /* (n_nodes) from the first trace; the others must agree */
    int64_t n_requests;       /* over all traces */
    int64_t max_experts;
    const char *model_sha256; /* first trace's, NULL if unknown */
    bool bytes_from_model;    /* expert_bytes came from --model (the trace had none) */
    mp_progress *progress;    /* set by the caller after open (NULL: none): mp_an_scan counts
                               * every record read into it */
} mp_an_input;

/* Open every trace and run stage 1. Returns MP_OK when it could look at everything (check
 * pb->n for problems), MP_ERR_FORMAT when the problem limit stopped it, or another error (I/O,
 * memory, an unreadable model). model_path may be NULL. */
mp_status mp_an_input_open(mp_an_input *in, const char *const *paths, int n_paths,
                           const char *model_path, mp_an_problems *pb, mp_error *err);
void mp_an_input_close(mp_an_input *in);

/* The routing records of every trace by their footers (the total of mp_an_scan's count). */
int64_t mp_an_input_records(const mp_an_input *in);

/* Stage 2: stream all traces in order; emit (may be NULL: validate only) gets each valid record
 * with request_ord, step, node, phase, rows, top_k, ids and weights set (train and segment are
 * the caller's). Same return convention as mp_an_input_open; an emit error is returned as is. */
mp_status mp_an_scan(mp_an_input *in, mp_an_problems *pb, mp_an_emit_fn emit, void *user,
                     mp_error *err);

/* Model checks (stage 1, with --model), in validate_model.c. */
mp_status mp_an_check_model(mp_an_input *in, const char *model_path, mp_an_problems *pb,
                            mp_error *err);

#endif
