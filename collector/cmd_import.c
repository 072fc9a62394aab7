/* collector/cmd_import.c — `moeplan import FORMAT IN --trace OUT.db [--force] [--experts N]
 * [--weights f16|f32] [--progress | --no-progress]`: foreign routing traces into the moeplan
 * trace schema. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/args.h"
#include "base/numparse.h"
#include "collector/commands.h"
#include "collector/import.h"

static void usage(FILE *f)
{
    fprintf(f,
            "usage: moeplan import FORMAT IN --trace OUT.db [--force] [--experts N] [--weights f16|f32]\n"
            "                      [--progress | --no-progress]\n"
            "\n"
            "Convert a foreign routing trace into a moeplan trace (docs/trace-format.md).\n"
            "FORMAT: onnxruntime-log | strata | csv | auto (detect from the content)\n"
            "  --trace OUT.db   the trace to write (refused if it exists, unless --force)\n"
            "  --force          replace an existing OUT.db\n"
            "  --experts N      routed experts per layer (default: largest id seen + 1)\n"
            "  --weights FMT    store router weights as f32 (default, as read) or f16\n"
            "  --progress       the progress line on stderr also without a terminal (a line\n"
            "                   every 10 s and the last of each pass)\n"
            "  --no-progress    no progress line (default: one only when stderr is a terminal)\n"
            "  -h, --help       show this help\n");
}

enum { OPT_TRACE = 256, OPT_EXPERTS, OPT_WEIGHTS, OPT_FORCE, OPT_PROGRESS, OPT_NO_PROGRESS };

static const mp_cli_opt import_flags[] = {
    {"trace", 0, true, OPT_TRACE, NULL},
    {"experts", 0, true, OPT_EXPERTS, NULL},
    {"weights", 0, true, OPT_WEIGHTS, NULL},
    {"force", 0, false, OPT_FORCE, NULL},
    {"progress", 0, false, OPT_PROGRESS, NULL},
    {"no-progress", 0, false, OPT_NO_PROGRESS, NULL},
    {"help", 'h', false, 'h', NULL},
    {0},
};

int mp_cmd_import(int argc, char **argv)
{
    const char *format = NULL, *in = NULL, *out = NULL;
    mp_import_options opt = {.format = MP_IMPORT_AUTO, .weight_format = MP_TRACE_W_F32};
    mp_progress_mode progress = MP_PROGRESS_AUTO;
    mp_cli c;
    mp_cli_init(&c, "import", import_flags, argc, argv);
    const char *v;
    for (int id; (id = mp_cli_next(&c, &v)) != MP_CLI_END;) {
        switch (id) {
        case MP_CLI_ERROR:
            return mp_cli_usage_error("import", c.err.msg);
        case 'h':
            usage(stdout);
            return MP_EXIT_OK;
        case OPT_FORCE:
            opt.force = true;
            break;
        case OPT_PROGRESS:
            progress = MP_PROGRESS_ON;
            break;
        case OPT_NO_PROGRESS:
            progress = MP_PROGRESS_OFF;
            break;
        case OPT_TRACE:
            out = v;
            break;
        case OPT_WEIGHTS:
            if (!strcmp(v, "f16"))
                opt.weight_format = MP_TRACE_W_F16;
            else if (!strcmp(v, "f32"))
                opt.weight_format = MP_TRACE_W_F32;
            else {
                fprintf(stderr, "moeplan import: error: --weights %s: expected f16 or f32\n", v);
                return MP_EXIT_USAGE;
            }
            break;
        case OPT_EXPERTS: {
            int64_t n;
            if (!mp_parse_i64(v, 1, 65536, &n)) {
                fprintf(stderr, "moeplan import: error: --experts %s: expected an integer in "
                                "1..65536\n", v);
                return MP_EXIT_USAGE;
            }
            opt.n_experts = n;
            break;
        }
        case MP_CLI_POSITIONAL:
            if (!format) {
                format = v;
            } else if (!in) {
                in = v;
            } else {
                fprintf(stderr, "moeplan import: error: unexpected argument %s (see moeplan import --help)\n", v);
                return MP_EXIT_USAGE;
            }
            break;
        }
    }
    if (!format || !in || !out) {
        fprintf(stderr, "moeplan import: error: expected FORMAT IN --trace OUT.db (see moeplan import --help)\n");
        return MP_EXIT_USAGE;
    }
    int f = mp_import_format_parse(format);
    if (f < 0) {
        fprintf(stderr, "moeplan import: error: unknown format '%s': expected onnxruntime-log, "
                        "strata, csv or auto\n", format);
        return MP_EXIT_USAGE;
    }
    opt.format = (mp_import_format)f;
    mp_import_result res;
    mp_error err;
    mp_progress pr;
    mp_progress_begin(&pr, mp_progress_stream(progress), "import: check", MP_PROGRESS_BYTES, 0);
    opt.progress = &pr;
    const mp_status st = mp_import_file(in, out, &opt, &res, &err); /* refuses out == in itself */
    mp_progress_end(&pr);
    if (st != MP_OK) {
        fprintf(stderr, "moeplan import: error: %s\n", err.msg);
        return st == MP_ERR_ARG ? MP_EXIT_USAGE : MP_EXIT_FAILURE;
    }
    printf("imported %s (%s): %lld requests, %lld steps, %lld routing records, %lld nodes, "
           "%lld experts%s -> %s\n",
           in, mp_import_format_name(res.format), (long long)res.n_requests,
           (long long)res.n_steps, (long long)res.n_routing, (long long)res.n_nodes,
           (long long)res.n_experts, res.n_experts_inferred ? " (inferred)" : "", out);
    if (res.weights_uniform)
        printf("note: %s has no router weights: every choice is stored with weight 1/top_k "
               "(config_json says so)\n", in);
    return 0;
}
