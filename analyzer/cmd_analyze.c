/* analyzer/cmd_analyze.c — `moeplan analyze`: argument parsing and messages only; the work is
 * mp_an_run (analyze.h). Exit status: 0 ok, 1 failure (bad trace, I/O), 2 usage error. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "analyzer/analyze.h"
#include "base/args.h"
#include "analyzer/commands.h"
#include "base/atomic_file.h"
#include "base/numparse.h"

static void usage(FILE *f)
{
    fprintf(f,
            "usage: moeplan analyze TRACE.db [MORE.db ...] --out DIR [options]\n"
            "\n"
            "Validate one or more traces of the same model (fail closed: the first problem is\n"
            "reported with its trace, request, step and node) and write a report directory:\n"
            "CSV tables, summary.json, SVG charts and report.html (see docs/analyzer.md).\n"
            "\n"
            "options:\n"
            "  -o, --out, --output DIR  report directory (written atomically; must not exist)\n"
            "  --force               replace an existing DIR\n"
            "  --model MODEL.gguf    also check node shapes and bytes per expert against the GGUF\n"
            "  --rows all|decode|final\n"
            "                        rows counted: every row (default), decode rows only, or the\n"
            "                        last prefill row + decode rows (onnxruntime's semantics)\n"
            "  --train-frac F        popularity is learned on the first F of the requests and\n"
            "                        judged on the rest (default 0.5; 0 < F < 1)\n"
            "  --train-requests LIST learn on these requests instead: [TRACE:]REQUEST_ID,...\n"
            "                        (TRACE: 0-based position of the trace on the command line)\n"
            "  --reuse-window N      tokens within which a reused expert counts as reused (8)\n"
            "  --simulation FILE     moeplan simulate's --json output for these traces: the report\n"
            "                        adds the predicted tok/s of every policy at every budget (a\n"
            "                        chart, a table, the best placement per budget against all-CPU\n"
            "                        and whole layers) and simulation.csv, simulation.svg\n"
            "  --validate-only       only validate; list every problem (up to --max-problems)\n"
            "  --max-problems N      problems listed by --validate-only (default 100)\n"
            "  --progress            the progress line on stderr also without a terminal (a line\n"
            "                        every 10 s and the last)\n"
            "  --no-progress         no progress line (default: one only when stderr is a terminal)\n"
            "  -h, --help            this text\n");
}

static int bad_usage(const char *fmt, const char *arg)
{
    fprintf(stderr, "moeplan analyze: error: ");
    fprintf(stderr, fmt, arg);
    fprintf(stderr, " (see moeplan analyze --help)\n");
    return 2;
}

enum { OPT_MODEL = 256, OPT_FORCE, OPT_VALIDATE_ONLY, OPT_ROWS, OPT_TRAIN_FRAC, OPT_TRAIN_REQUESTS,
       OPT_MAX_PROBLEMS, OPT_REUSE_WINDOW, OPT_SIMULATION, OPT_PROGRESS, OPT_NO_PROGRESS };

static const mp_cli_opt analyze_flags[] = {
    {"out", 'o', true, 'o', NULL},
    {"output", 0, true, 'o', NULL},
    {"force", 0, false, OPT_FORCE, NULL},
    {"model", 0, true, OPT_MODEL, NULL},
    {"rows", 0, true, OPT_ROWS, NULL},
    {"train-frac", 0, true, OPT_TRAIN_FRAC, NULL},
    {"train-requests", 0, true, OPT_TRAIN_REQUESTS, NULL},
    {"reuse-window", 0, true, OPT_REUSE_WINDOW, NULL},
    {"simulation", 0, true, OPT_SIMULATION, NULL},
    {"progress", 0, false, OPT_PROGRESS, NULL},
    {"no-progress", 0, false, OPT_NO_PROGRESS, NULL},
    {"validate-only", 0, false, OPT_VALIDATE_ONLY, NULL},
    {"max-problems", 0, true, OPT_MAX_PROBLEMS, NULL},
    {"help", 'h', false, 'h', NULL},
    {0},
};

int mp_cmd_analyze(int argc, char **argv)
{
    mp_an_options o;
    mp_an_options_init(&o);
    const char **traces = calloc((size_t)argc + 1, sizeof *traces);
    if (!traces)
        return 1;
    int rc = 2;
    bool train_frac_given = false, max_problems_given = false;
    mp_progress_mode progress_mode = MP_PROGRESS_AUTO;
    mp_cli c;
    mp_cli_init(&c, "analyze", analyze_flags, argc, argv);
    const char *v;
    for (int id; (id = mp_cli_next(&c, &v)) != MP_CLI_END;) {
        switch (id) {
        case MP_CLI_ERROR:
            rc = mp_cli_usage_error("analyze", c.err.msg);
            goto done;
        case 'h':
            usage(stdout);
            rc = 0;
            goto done;
        case MP_CLI_POSITIONAL:
            traces[o.n_traces++] = v;
            break;
        case 'o':
            o.out_dir = v;
            break;
        case OPT_MODEL:
            o.model_path = v;
            break;
        case OPT_FORCE:
            o.force = true;
            break;
        case OPT_VALIDATE_ONLY:
            o.validate_only = true;
            break;
        case OPT_ROWS:
            if (!strcmp(v, "all"))
                o.rows = MP_AN_ROWS_ALL;
            else if (!strcmp(v, "decode"))
                o.rows = MP_AN_ROWS_DECODE;
            else if (!strcmp(v, "final"))
                o.rows = MP_AN_ROWS_FINAL;
            else {
                rc = bad_usage("--rows '%s': expected all, decode or final", v);
                goto done;
            }
            break;
        case OPT_TRAIN_FRAC: {
            train_frac_given = true;
            char *end;
            o.train_frac = strtod(v, &end);
            if (end == v || *end || !(o.train_frac > 0 && o.train_frac < 1)) {
                rc = bad_usage("--train-frac '%s': expected a number strictly between 0 and 1", v);
                goto done;
            }
            break;
        }
        case OPT_TRAIN_REQUESTS:
            o.train_requests = v;
            break;
        case OPT_SIMULATION:
            o.simulation_path = v;
            break;
        case OPT_PROGRESS:
            progress_mode = MP_PROGRESS_ON;
            break;
        case OPT_NO_PROGRESS:
            progress_mode = MP_PROGRESS_OFF;
            break;
        case OPT_MAX_PROBLEMS:
            max_problems_given = true;
            if (!mp_parse_i64(v, 1, 1000000, &o.max_problems)) {
                rc = bad_usage("--max-problems '%s': expected an integer in 1..1000000", v);
                goto done;
            }
            break;
        case OPT_REUSE_WINDOW:
            if (!mp_parse_i64(v, 1, 1 << 30, &o.reuse_window)) {
                rc = bad_usage("--reuse-window '%s': expected a positive integer", v);
                goto done;
            }
            break;
        }
    }
    if (o.n_traces == 0) {
        rc = bad_usage("%sexpected at least one TRACE.db", "");
        goto done;
    }
    /* flags that cannot both hold: refused rather than one silently ignored */
    if (o.validate_only && o.out_dir) {
        rc = bad_usage("%s--validate-only writes nothing: give it or --out DIR, not both", "");
        goto done;
    }
    if (train_frac_given && o.train_requests) {
        rc = bad_usage("%s--train-frac and --train-requests both choose the training requests: "
                       "give one", "");
        goto done;
    }
    if (o.simulation_path && o.validate_only) {
        rc = bad_usage("%s--simulation adds to a report, which --validate-only does not write", "");
        goto done;
    }
    if (max_problems_given && !o.validate_only) {
        rc = bad_usage("%s--max-problems applies to --validate-only (a report stops at the first "
                       "problem)", "");
        goto done;
    }
    if (!o.validate_only && !o.out_dir) {
        rc = bad_usage("%s--out DIR is required (or --validate-only)", "");
        goto done;
    }
    for (int i = 0; i < o.n_traces; i++)
        if (o.out_dir && mp_same_file(traces[i], o.out_dir)) {
            rc = bad_usage("--out %s: is also an input trace", o.out_dir);
            goto done;
        }
    o.traces = traces;

    mp_an_problems pb;
    mp_error err;
    mp_error_clear(&err);
    if (mp_an_problems_init(&pb, o.validate_only ? o.max_problems : 1, &err) != MP_OK) {
        fprintf(stderr, "moeplan analyze: error: %s\n", err.msg);
        rc = 1;
        goto done;
    }
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    uint64_t decisions = 0;
    mp_progress progress;
    mp_progress_begin(&progress, mp_progress_stream(progress_mode), "analyze", "records", 0);
    o.progress = &progress;
    mp_status st = mp_an_run(&o, &pb, &decisions, &err);
    mp_progress_end(&progress);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    const double secs = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) * 1e-9;
    if (o.validate_only && pb.n > 0) {
        for (int64_t i = 0; i < pb.n; i++)
            fprintf(stderr, "moeplan analyze: problem: %s\n", pb.msg[i]);
        fprintf(stderr, "moeplan analyze: error: %lld problem%s found%s\n", (long long)pb.n,
                pb.n == 1 ? "" : "s", pb.n >= pb.max ? " (limit reached; more may exist)" : "");
        rc = 1;
    } else if (st != MP_OK) {
        fprintf(stderr, "moeplan analyze: error: %s\n", err.msg);
        rc = 1;
    } else if (o.validate_only) {
        printf("moeplan analyze: %d trace%s valid\n", o.n_traces, o.n_traces == 1 ? "" : "s");
        rc = 0;
    } else {
        printf("moeplan analyze: %llu routing decisions in %.2f s (%.1f M/s); report in %s\n",
               (unsigned long long)decisions, secs, secs > 0 ? (double)decisions / secs / 1e6 : 0,
               o.out_dir);
        rc = 0;
    }
    mp_an_problems_free(&pb);
done:
    free(traces);
    return rc;
}
