/* collector/collect_opts.c — `moeplan collect` options and pre-flight path checks (see header). */
#include "collector/collect_opts.h"
#include "base/args.h"
#include "base/atomic_file.h"
#include "base/input_file.h"
#include "base/numparse.h"

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
            "  -t, --threads N       CPU threads (0: the CPUs this process may use, the default)\n"
            "  -c, --ctx-size, --ctx N  context length (0: the runtime's default)\n"
            "  -b, --batch-size, --batch N  rows per prefill chunk (0: the runtime's default)\n"
            "  --trace-max-bytes N   stop (run aborted) if the trace would grow past N bytes\n"
            "  --sync-writer         write SQLite inside the hooks instead of a writer thread\n"
            "  --progress            the progress line on stderr also without a terminal (a line\n"
            "                        every 10 s and the last); default: only on a terminal\n"
            "  --no-progress         no progress line\n"
            "  --cupti               record GPU kernels and copies (CUPTI) per step and layer into\n"
            "                        the trace's cupti table; needs a CUDA device and a build with\n"
            "                        CUPTI, else refused\n"
            "  --route-replay TRACE  take every layer's expert choices from TRACE (same layers,\n"
            "                        experts, top-k) instead of the router (docs/placement.md)\n"
            "%s"
            MP_CLI_NGL_HELP
            "  -h, --help            show this help\n"
            "Placement is validated against the budget and recorded in the trace; this build has\n"
            "no GPU executor, so every expert runs on the CPU.\n", mp_placement_flags_help);
}

static mp_status parse_i64(const char *flag, const char *v, int64_t lo, int64_t hi, int64_t *out,
                           mp_error *err)
{
    if (!mp_parse_i64(v, lo, hi, out))
        return mp_fail(err, MP_ERR_ARG, "%s %s: expected an integer in %lld..%lld", flag, v,
                       (long long)lo, (long long)hi);
    return MP_OK;
}

enum { OPT_PROMPTS = 256, OPT_TRACE, OPT_RESULTS, OPT_MAX_TOKENS, OPT_TRACE_MAX_BYTES,
       OPT_ROUTE_REPLAY, OPT_FORCE, OPT_RAW_PROMPTS, OPT_STORE_PROMPTS, OPT_PROGRESS, OPT_NO_PROGRESS,
       OPT_SYNC_WRITER, OPT_CUPTI, OPT_PLACEMENT, OPT_NGL };

static const mp_cli_opt collect_flags[] = {
    {"model", 'm', true, 'm', NULL},
    {"prompts", 0, true, OPT_PROMPTS, NULL},
    {"trace", 0, true, OPT_TRACE, NULL},
    {"results", 0, true, OPT_RESULTS, NULL},
    {"max-tokens", 0, true, OPT_MAX_TOKENS, NULL},
    {"threads", 't', true, 't', NULL},
    {"ctx-size", 'c', true, 'c', NULL},
    {"ctx", 0, true, 'c', NULL},
    {"batch-size", 'b', true, 'b', NULL},
    {"batch", 0, true, 'b', NULL},
    {"trace-max-bytes", 0, true, OPT_TRACE_MAX_BYTES, NULL},
    {"route-replay", 0, true, OPT_ROUTE_REPLAY, NULL},
    {"force", 0, false, OPT_FORCE, NULL},
    {"raw-prompts", 0, false, OPT_RAW_PROMPTS, NULL},
    {"store-prompts", 0, false, OPT_STORE_PROMPTS, NULL},
    {"progress", 0, false, OPT_PROGRESS, NULL},
    {"no-progress", 0, false, OPT_NO_PROGRESS, NULL},
    {"sync-writer", 0, false, OPT_SYNC_WRITER, NULL},
    {"cupti", 0, false, OPT_CUPTI, NULL},
    MP_CLI_PLACEMENT_OPTS(OPT_PLACEMENT),
    MP_CLI_NGL_OPTS(OPT_NGL),
    {"help", 'h', false, 'h', NULL},
    {0},
};

mp_status mp_collect_opts_parse(int argc, char **argv, mp_collect_opts *o, mp_error *err)
{
    memset(o, 0, sizeof *o);
    o->max_tokens = 128;
    const char *results = NULL;
    mp_status s = MP_OK;
    mp_cli c;
    mp_cli_init(&c, "collect", collect_flags, argc, argv);
    const char *v;
    for (int id; (id = mp_cli_next(&c, &v)) != MP_CLI_END && !s;) {
        int64_t x = 0;
        switch (id) {
        case MP_CLI_ERROR:
            *err = c.err;
            return err->code;
        case MP_CLI_POSITIONAL:
            return mp_fail(err, MP_ERR_ARG, "unexpected argument %s", v);
        case 'h':
            o->help = true;
            return MP_OK;
        case OPT_FORCE: o->force = true; break;
        case OPT_RAW_PROMPTS: o->raw_prompts = true; break;
        case OPT_STORE_PROMPTS: o->store_prompts = true; break;
        case OPT_PROGRESS: o->progress = MP_PROGRESS_ON; break;
        case OPT_NO_PROGRESS: o->progress = MP_PROGRESS_OFF; break;
        case OPT_SYNC_WRITER: o->sync_writer = true; break;
        case OPT_CUPTI: o->cupti = true; break;
        case 'm': o->model_path = v; break;
        case OPT_PROMPTS: o->prompts_path = v; break;
        case OPT_TRACE: o->trace_path = v; break;
        case OPT_RESULTS: results = v; break;
        case OPT_ROUTE_REPLAY: o->route_replay = v; break;
        case OPT_MAX_TOKENS: s = parse_i64(c.given, v, 1, 1000000000, &o->max_tokens, err); break;
        case 't':
            if (!(s = parse_i64(c.given, v, 0, 4096, &x, err)))
                o->n_threads = (int)x;
            break;
        case 'c': s = parse_i64(c.given, v, 0, INT64_C(1) << 24, &o->n_ctx, err); break;
        case 'b': s = parse_i64(c.given, v, 0, INT64_C(1) << 20, &o->n_batch, err); break;
        case OPT_TRACE_MAX_BYTES: s = parse_i64(c.given, v, 0, INT64_MAX / 2, &o->trace_max_bytes, err); break;
        case OPT_NGL:
            if (!(s = parse_i64(c.given, v, -1, INT32_MAX, &x, err)))
                mp_cli_note_ngl("collect", v);
            break;
        case OPT_PLACEMENT:
            mp_placement_opts_set(&o->placement, c.flag, v, &s, err);
            break;
        }
    }
    if (s)
        return s;
    if (!o->model_path || !o->prompts_path || !o->trace_path)
        return mp_fail(err, MP_ERR_ARG, "expected -m MODEL --prompts FILE --trace OUT.db");
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
