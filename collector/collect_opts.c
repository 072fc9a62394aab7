/* collector/collect_opts.c — `moeplan collect` options and pre-flight path checks (see header). */
#include "collector/collect_opts.h"
#include "runtime/atomic_file.h"
#include "runtime/input_file.h"

#include <errno.h>
#include <libgen.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

void mp_collect_usage(FILE *f)
{
    fprintf(f,
            "usage: moeplan collect -m MODEL --prompts FILE --trace OUT.db [options]\n"
            "\n"
            "Run every prompt through the model and record per-layer routing and timing into a\n"
            "trace (docs/trace-format.md), plus a results JSON beside it.\n"
            "  -m, --model MODEL     GGUF model\n"
            "  --prompts FILE        JSON array or JSON Lines of prompts (strings or\n"
            "                        {\"prompt\", \"id\", \"max_tokens\"} objects)\n"
            "  --trace OUT.db        the trace to write (refused if it exists, unless --force)\n"
            "  --results FILE        per-prompt results (default: OUT.results.json)\n"
            "  --force               replace an existing trace / results file\n"
            "  --max-tokens N        tokens to generate per prompt (default 128)\n"
            "  --raw-prompts         feed prompts as they are (default: the model's chat template)\n"
            "  --store-prompts       keep the prompt text in the trace (default: only a hash)\n"
            "  --threads N  --ctx N  --batch N   runtime settings (0: defaults)\n"
            "  --trace-max-bytes N   stop (run aborted) if the trace would grow past N bytes\n"
            "  --sync-writer         write SQLite inside the hooks instead of a writer thread\n"
            "  --no-progress         no progress bar\n"
            "  --cupti               record GPU kernels and copies (CUPTI) per step and layer into\n"
            "                        the trace's cupti table; needs a CUDA device and a build with\n"
            "                        CUPTI, else refused\n"
            "  --route-replay TRACE  take every layer's expert choices from TRACE (same layers,\n"
            "                        experts, top-k) instead of the router (docs/placement.md)\n"
            "%s"
            "Placement is validated against the budget and recorded in the trace; this build has\n"
            "no GPU executor, so every expert runs on the CPU.\n", mp_placement_flags_help);
}

static mp_status parse_i64(const char *flag, const char *v, int64_t lo, int64_t hi, int64_t *out,
                           mp_error *err)
{
    char *end;
    errno = 0;
    long long x = strtoll(v, &end, 10);
    if (!*v || *end || errno || x < lo || x > hi)
        return mp_fail(err, MP_ERR_ARG, "%s %s: expected an integer in %lld..%lld", flag, v,
                       (long long)lo, (long long)hi);
    *out = x;
    return MP_OK;
}

mp_status mp_collect_opts_parse(int argc, char **argv, mp_collect_opts *o, mp_error *err)
{
    memset(o, 0, sizeof *o);
    o->progress = true;
    o->max_tokens = 128;
    const char *results = NULL;
    mp_status s;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            o->help = true;
            return MP_OK;
        }
        static const char *flags[] = {"--force", "--raw-prompts", "--store-prompts",
                                      "--no-progress", "--sync-writer", "--cupti"};
        bool *flag_dst[] = {&o->force, &o->raw_prompts, &o->store_prompts, &o->progress,
                            &o->sync_writer, &o->cupti};
        bool matched = false;
        for (int f = 0; f < 6; f++)
            if (!strcmp(a, flags[f])) {
                *flag_dst[f] = f != 3; /* --no-progress clears */
                matched = true;
            }
        if (matched)
            continue;
        if (a[0] != '-')
            return mp_fail(err, MP_ERR_ARG, "unexpected argument %s (see --help)", a);
        if (i + 1 >= argc)
            return mp_fail(err, MP_ERR_ARG, "%s needs a value (see --help)", a);
        const char *v = argv[++i];
        int64_t x = 0;
        if (!strcmp(a, "-m") || !strcmp(a, "--model")) {
            o->model_path = v;
        } else if (!strcmp(a, "--prompts")) {
            o->prompts_path = v;
        } else if (!strcmp(a, "--trace")) {
            o->trace_path = v;
        } else if (!strcmp(a, "--results")) {
            results = v;
        } else if (!strcmp(a, "--max-tokens")) {
            if ((s = parse_i64(a, v, 1, 1000000000, &o->max_tokens, err)))
                return s;
        } else if (!strcmp(a, "--threads")) {
            if ((s = parse_i64(a, v, 0, 4096, &x, err)))
                return s;
            o->n_threads = (int)x;
        } else if (!strcmp(a, "--ctx")) {
            if ((s = parse_i64(a, v, 0, INT64_C(1) << 24, &o->n_ctx, err)))
                return s;
        } else if (!strcmp(a, "--batch")) {
            if ((s = parse_i64(a, v, 0, INT64_C(1) << 20, &o->n_batch, err)))
                return s;
        } else if (!strcmp(a, "--trace-max-bytes")) {
            if ((s = parse_i64(a, v, 0, INT64_MAX / 2, &o->trace_max_bytes, err)))
                return s;
        } else if (!strcmp(a, "--route-replay")) {
            o->route_replay = v;
        } else if (mp_placement_opts_set(&o->placement, a, v, &s, err)) {
            if (s)
                return s;
        } else {
            return mp_fail(err, MP_ERR_ARG, "unknown option %s (see --help)", a);
        }
    }
    if (!o->model_path || !o->prompts_path || !o->trace_path)
        return mp_fail(err, MP_ERR_ARG, "expected -m MODEL --prompts FILE --trace OUT.db (see "
                       "--help)");
    if (!o->trace_path[0] || !o->model_path[0] || !o->prompts_path[0])
        return mp_fail(err, MP_ERR_ARG, "empty path");
    if (results) {
        if (snprintf(o->results_path, sizeof o->results_path, "%s", results) >=
            (int)sizeof o->results_path)
            return mp_fail(err, MP_ERR_ARG, "--results: path too long");
    } else {
        size_t n = strlen(o->trace_path);
        if (n > 3 && !strcmp(o->trace_path + n - 3, ".db"))
            n -= 3;
        if (snprintf(o->results_path, sizeof o->results_path, "%.*s.results.json", (int)n,
                     o->trace_path) >= (int)sizeof o->results_path)
            return mp_fail(err, MP_ERR_ARG, "--trace: path too long");
    }
    return MP_OK;
}

mp_status mp_collect_check_paths(const mp_collect_opts *o, mp_error *err)
{
    mp_status st;
    const mp_file_ref inputs[] = {
        {o->model_path, "the model"},
        {o->prompts_path, "the prompt file"},
        {o->route_replay, "the --route-replay trace"},
        {o->placement.file, "the --placement-file"},
        {o->placement.profile, "the --profile"},
    };
    const int n_inputs = (int)(sizeof inputs / sizeof inputs[0]);
    for (int j = 0; j < n_inputs; j++)
        if (inputs[j].path && (st = mp_input_check(inputs[j].path, NULL, MP_INPUT_NO_CAP, NULL, err)))
            return st;
    mp_file_ref others[sizeof inputs / sizeof inputs[0] + 1];
    memcpy(others, inputs, sizeof inputs);
    if ((st = mp_output_check(o->trace_path, "trace", o->force, others, n_inputs, err)))
        return st;
    others[n_inputs] = (mp_file_ref){o->trace_path, "the trace"};
    return mp_output_check(o->results_path, "results file", o->force, others, n_inputs + 1, err);
}
