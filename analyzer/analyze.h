/* analyzer/analyze.h — `moeplan analyze` as a library call: validate, compute, write the report.
 *
 * One streaming pass over the traces (memory bounded by nodes × experts): validation, every
 * accumulator of analyzer/stats.h and the per-request distributions (each request against the
 * requests before it). Records reach the statistics only once validated, and the accumulators
 * live in memory until the end: a problem anywhere aborts with nothing written. (--validate-only
 * runs the validation alone.)
 * The output directory is built under a temporary name beside it and renamed into place at the
 * end: it either appears whole or not at all.
 */
#ifndef MP_ANALYZER_ANALYZE_H
#define MP_ANALYZER_ANALYZE_H

#include "analyzer/summary.h"
#include "analyzer/validate.h"

typedef struct mp_an_options {
    const char *const *traces; /* (n_traces) */
    int n_traces;
    const char *model_path;    /* NULL: no model checks */
    const char *out_dir;       /* NULL only with validate_only */
    bool force;                /* replace an existing out_dir */
    mp_an_rows rows;
    double train_frac;         /* first ceil(frac × requests) requests train (0 < frac < 1) */
    const char *train_requests; /* or: a list "[TRACE:]REQUEST_ID,..." (TRACE 0-based) */
    bool validate_only;
    int64_t max_problems;      /* with validate_only */
    int64_t reuse_window;      /* tokens (near-future reuse); default 8 */
    const char *simulation_path; /* --simulation: simulate --json's file for the report (NULL:
                                  * none); read and checked against the traces before the pass */
    mp_progress *progress;     /* NULL: none. Counts the routing records read, of all traces'
                                * (their footers' n_routing) */
} mp_an_options;

void mp_an_options_init(mp_an_options *o);


/* Run everything. Problems found by validation are in pb (initialized by the caller with the
 * limit: 1, or max_problems with validate_only); the return is MP_ERR_FORMAT with err holding the
 * first problem when there was any. decisions_out (optional) gets the routes analyzed. */
mp_status mp_an_run(const mp_an_options *o, mp_an_problems *pb, uint64_t *decisions_out,
                    mp_error *err);

#endif
