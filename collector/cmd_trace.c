/* collector/cmd_trace.c — `moeplan trace materialize TRACE.db [MORE.db ...]`: the route_choices
 * view written as the indexed table `routes` into each finished trace
 * (collector/trace_materialize.h). Exit status: 0 ok (also when a trace had the table), 1 a bad
 * trace or I/O failure (the trace is left as it was), 2 a usage error. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "collector/commands.h"
#include "collector/trace_materialize.h"
#include "base/args.h"

static void usage(FILE *f)
{
    fprintf(f,
            "usage: moeplan trace materialize TRACE.db [MORE.db ...] [--progress | --no-progress]\n"
            "\n"
            "materialize  add the table routes to each finished trace: the rows of the view\n"
            "             route_choices (request_id, step, node_index, row, rank, expert_id,\n"
            "             weight), stored by (node_index, expert_id) and indexed by token\n"
            "             (request_id, step, node_index, row), so that sqlite3 answers questions\n"
            "             about a long trace in seconds where the view takes minutes\n"
            "             (docs/trace-format.md).\n"
            "             The trace is checked as analyze checks it (an incomplete or damaged one\n"
            "             is refused), copied beside itself, the table written into the copy, and\n"
            "             the copy renamed over the trace: a failure leaves the trace as it was.\n"
            "             A trace that has the table already is left as it is.\n"
            "\n"
            "options:\n"
            "  --progress     the progress line on stderr also without a terminal (a line every\n"
            "                 10 s and the last)\n"
            "  --no-progress  no progress line (default: one only when stderr is a terminal)\n"
            "  -h, --help     this text\n");
}

enum { OPT_PROGRESS = 256, OPT_NO_PROGRESS };

static const mp_cli_opt trace_flags[] = {
    {"progress", 0, false, OPT_PROGRESS, NULL},
    {"no-progress", 0, false, OPT_NO_PROGRESS, NULL},
    {"help", 'h', false, 'h', NULL},
    {0},
};

static int usage_error(const char *msg, const char *arg)
{
    fprintf(stderr, "moeplan trace: error: %s%s (see moeplan trace --help)\n", msg, arg ? arg : "");
    return MP_EXIT_USAGE;
}

int mp_cmd_trace(int argc, char **argv)
{
    const char **traces = calloc((size_t)argc + 1, sizeof *traces);
    if (!traces) {
        fprintf(stderr, "moeplan trace: error: out of memory\n");
        return MP_EXIT_FAILURE;
    }
    const char *verb = NULL;
    int n_traces = 0, rc = MP_EXIT_OK;
    mp_progress_mode mode = MP_PROGRESS_AUTO;
    mp_cli c;
    mp_cli_init(&c, "trace", trace_flags, argc, argv);
    const char *v;
    for (int id; (id = mp_cli_next(&c, &v)) != MP_CLI_END;) {
        switch (id) {
        case MP_CLI_ERROR:
            rc = mp_cli_usage_error("trace", c.err.msg);
            goto done;
        case 'h':
            usage(stdout);
            goto done;
        case OPT_PROGRESS: mode = MP_PROGRESS_ON; break;
        case OPT_NO_PROGRESS: mode = MP_PROGRESS_OFF; break;
        case MP_CLI_POSITIONAL:
            if (!verb)
                verb = v;
            else
                traces[n_traces++] = v;
            break;
        }
    }
    if (!verb) {
        rc = usage_error("expected materialize TRACE.db", NULL);
        goto done;
    }
    if (strcmp(verb, "materialize")) {
        rc = usage_error("unknown subcommand: ", verb);
        goto done;
    }
    if (n_traces == 0) {
        rc = usage_error("materialize: expected at least one TRACE.db", NULL);
        goto done;
    }
    for (int i = 0; i < n_traces && rc == MP_EXIT_OK; i++) {
        mp_progress pr;
        mp_progress_begin(&pr, mp_progress_stream(mode), "materialize: count", "records", 0);
        mp_trace_materialize_result res;
        mp_error err;
        const mp_status st = mp_trace_materialize(traces[i], &pr, &res, &err);
        mp_progress_end(&pr);
        if (st) {
            fprintf(stderr, "moeplan trace: error: %s\n", err.msg);
            rc = MP_EXIT_FAILURE;
        } else if (res.already) {
            printf("%s: has the routes table already; left as it is\n", traces[i]);
        } else {
            printf("%s: routes table: %lld rows; %.1f MB -> %.1f MB\n", traces[i],
                   (long long)res.n_routes, (double)res.bytes_before / 1e6,
                   (double)res.bytes_after / 1e6);
        }
    }
done:
    free(traces);
    return rc;
}
