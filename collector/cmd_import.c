/* collector/cmd_import.c — `moeplan import FORMAT IN --trace OUT.db [--force] [--experts N]
 * [--weights f16|f32]`: foreign routing traces into the moeplan trace schema. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/commands.h"
#include "collector/import.h"

static void usage(FILE *f)
{
    fprintf(f,
            "usage: moeplan import FORMAT IN --trace OUT.db [--force] [--experts N] [--weights f16|f32]\n"
            "\n"
            "Convert a foreign routing trace into a moeplan trace (docs/trace-format.md).\n"
            "FORMAT: onnxruntime-log | strata | csv | auto (detect from the content)\n"
            "  --trace OUT.db   the trace to write (refused if it exists, unless --force)\n"
            "  --force          replace an existing OUT.db\n"
            "  --experts N      routed experts per layer (default: largest id seen + 1)\n"
            "  --weights FMT    store router weights as f32 (default, as read) or f16\n");
}

int mp_cmd_import(int argc, char **argv)
{
    const char *format = NULL, *in = NULL, *out = NULL;
    mp_import_options opt = {.format = MP_IMPORT_AUTO, .weight_format = MP_TRACE_W_F32};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(a, "--force")) {
            opt.force = true;
        } else if (!strcmp(a, "--trace") || !strcmp(a, "--experts") || !strcmp(a, "--weights")) {
            if (i + 1 >= argc) {
                fprintf(stderr, "moeplan import: error: %s needs a value\n", a);
                return 2;
            }
            const char *v = argv[++i];
            if (!strcmp(a, "--trace")) {
                out = v;
            } else if (!strcmp(a, "--weights")) {
                if (!strcmp(v, "f16"))
                    opt.weight_format = MP_TRACE_W_F16;
                else if (!strcmp(v, "f32"))
                    opt.weight_format = MP_TRACE_W_F32;
                else {
                    fprintf(stderr, "moeplan import: error: --weights %s: expected f16 or f32\n", v);
                    return 2;
                }
            } else {
                char *end;
                long long n = strtoll(v, &end, 10);
                if (*v == 0 || *end || n < 1 || n > 65536) {
                    fprintf(stderr, "moeplan import: error: --experts %s: expected an integer in "
                                    "1..65536\n", v);
                    return 2;
                }
                opt.n_experts = n;
            }
        } else if (a[0] == '-' && a[1]) {
            fprintf(stderr, "moeplan import: error: unknown option %s (see --help)\n", a);
            return 2;
        } else if (!format) {
            format = a;
        } else if (!in) {
            in = a;
        } else {
            fprintf(stderr, "moeplan import: error: unexpected argument %s (see --help)\n", a);
            return 2;
        }
    }
    if (!format || !in || !out) {
        fprintf(stderr, "moeplan import: error: expected FORMAT IN --trace OUT.db (see --help)\n");
        return 2;
    }
    int f = mp_import_format_parse(format);
    if (f < 0) {
        fprintf(stderr, "moeplan import: error: unknown format '%s': expected onnxruntime-log, "
                        "strata, csv or auto\n", format);
        return 2;
    }
    opt.format = (mp_import_format)f;
    mp_import_result res;
    mp_error err;
    const mp_status st = mp_import_file(in, out, &opt, &res, &err); /* refuses out == in itself */
    if (st != MP_OK) {
        fprintf(stderr, "moeplan import: error: %s\n", err.msg);
        return st == MP_ERR_ARG ? 2 : 1;
    }
    printf("imported %s (%s): %lld requests, %lld steps, %lld routing records, %lld nodes, "
           "%lld experts%s -> %s\n",
           in, mp_import_format_name(res.format), (long long)res.n_requests,
           (long long)res.n_steps, (long long)res.n_routing, (long long)res.n_nodes,
           (long long)res.n_experts, res.n_experts_inferred ? " (inferred)" : "", out);
    return 0;
}
