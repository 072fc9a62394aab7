/* tests/unit/analyzer_fixture.h — small traces for the analyzer's tests.
 *
 * make_trace writes, with the collector's writer, a complete trace of N_NODES nodes (index 0, 1;
 * layer = index; top-TOP_K; 4096 bytes per expert) and N_REQ requests (ids 0, 1, 2), each a 4-row
 * prefill step then 2 one-row decode steps. Ids of (request r, step s, node n, row i) are
 * (i+n+s+r) % E and (i+n+s+r+1) % E with weights 0.75 and 0.25. sql() runs raw statements on it
 * (how the tests break traces). The writer stores schema version 2 (one routing row per step,
 * key = request << 24 | step, node 0's block then node 1's); to_v1() rewrites a trace into
 * version 1 (one routing row per step and node, key = request << 36 | step << 12 | node), which
 * readers still accept: the tests of per-node records use it. */
#ifndef MP_TESTS_ANALYZER_FIXTURE_H
#define MP_TESTS_ANALYZER_FIXTURE_H

#include "collector/trace.h"

#define N_NODES 2
#define TOP_K 2
#define N_REQ 3

typedef struct trace_opts {
    int n_experts;           /* 0: 8 */
    const char *sha;         /* NULL: ab00... */
    const char *node_prefix; /* NULL: "blk" */
    const char *source_path;
    mp_trace_weight_format wf;
    int64_t expert_bytes;    /* 0: 4096; -1: unknown */
} trace_opts;

char *make_trace(const char *dir, const char *name, trace_opts o); /* caller frees the path */
void sql(const char *path, const char *stmt);
void to_v1(const char *path);

#endif
