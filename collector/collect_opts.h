/* collector/collect_opts.h — the options of `moeplan collect` and the checks made before anything
 * is opened: required arguments, number ranges, and output paths that would clobber an input,
 * each other, or (without --force) an existing file.
 *
 * Invariant after mp_collect_opts_parse: every path is non-NULL; results_path is derived from the
 * trace path ("OUT.db" -> "OUT.results.json") unless given; numbers are within their ranges.
 */
#ifndef MP_COLLECTOR_COLLECT_OPTS_H
#define MP_COLLECTOR_COLLECT_OPTS_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "base/error.h"
#include "runtime/placement.h"
#include "base/progress.h"

typedef struct mp_collect_opts {
    const char *model_path;    /* -m, --model */
    const char *prompts_path;  /* --prompts */
    const char *trace_path;    /* --trace */
    char results_path[4096];   /* --results, or beside the trace */
    bool force;                /* replace an existing trace / results file */
    bool raw_prompts;          /* no chat template */
    bool store_prompts;        /* keep prompt text in the trace */
    mp_progress_mode progress; /* the progress line: AUTO (a terminal), --progress, --no-progress */
    bool sync_writer;          /* --sync-writer: SQLite inside the hooks (default: writer thread) */
    bool cupti;                /* --cupti: GPU kernel / memcpy records into the trace's cupti table */
    int64_t max_tokens;        /* per prompt unless the prompt file says otherwise (default 128) */
    int64_t n_ctx, n_batch;    /* 0: the runtime's defaults */
    int n_threads;             /* 0: the CPUs this process may use (runtime/cpus.h) */
    int64_t trace_max_bytes;   /* 0: no cap */
    mp_placement_opts placement; /* --placement, --placement-file, --profile, --gpu-budget */
    const char *route_replay;  /* --route-replay TRACE: routing from a trace (NULL: the router) */
    bool help;                 /* --help was given: print usage, nothing else */
} mp_collect_opts;

/* Parse argv (argv[0] is "collect"). MP_ERR_ARG with a one-line message on a usage error. */
mp_status mp_collect_opts_parse(int argc, char **argv, mp_collect_opts *o, mp_error *err);

/* Refuse outputs equal to an input or to each other (MP_ERR_ARG), and existing outputs without
 * --force (MP_ERR_IO). Paths are compared after resolving the directory part, so "./t.db" and
 * "t.db" are the same file, and an existing file reached through a link is found by identity. */
mp_status mp_collect_check_paths(const mp_collect_opts *o, mp_error *err);

void mp_collect_usage(FILE *f);

#endif
