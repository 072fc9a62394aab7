/* simulator/cmd_calibrate.c — `moeplan calibrate -m MODEL --out costs.json`: measure this machine
 * (simulator/calibrate.h) and write the cost file the simulator reads.
 *
 * The output is checked with mp_costs_load's parser before it is written, then written atomically
 * (PATH.tmp.<pid>, fsync, rename); an existing PATH is refused without --force, before any
 * benchmark runs. Progress goes to stderr. Exit status: 0 written, 1 failure, 2 usage error.
 */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "base/args.h"
#include "base/numparse.h"
#include "simulator/commands.h"
#include "base/atomic_file.h"
#include "simulator/calibrate.h"
#include "runtime/costs.h"
#include "runtime/decide.h"

static void usage(FILE *f)
{
    fprintf(f,
            "usage: moeplan calibrate -m MODEL --out costs.json [options]\n\n"
            "Microbenchmarks of this machine for the simulator's cost model (schemas/costs.schema.json):\n"
            "CPU expert time vs routed rows and threads for the model's expert types and shape, the\n"
            "combine, the non-MoE time per step, and with a CUDA device: a one-row step's by its keys of\n"
            "context, H2D/D2H by size (pinned and pageable), the decode round trip per MoE layer, the GPU\n"
            "expert time vs rows and the decode layer grid (it says how long it takes before it starts).\n"
            "Without a GPU the GPU parts are listed in the file's \"missing\" with the reason.\n"
            "First it chooses the CPU dots' prefetch distance (MP_PREFETCH_BYTES) and, on a CPU with\n"
            "AMX, the rows from which each expert type's prefill runs on the tiles (MP_AMX_ROWS) on\n"
            "this host, unless the environment sets them, and measures the rest under them; run,\n"
            "bench, collect and plan given the file take them where the environment leaves them unset\n"
            "(docs/config.md).\n\n"
            "options:\n"
            "  -m, --model MODEL  GGUF MoE model whose experts are measured\n"
            "  -o, --out, --output FILE  cost file to write (atomically)\n"
            "  -t, --threads LIST  CPU thread counts, e.g. 1,4,16 (default 1,2,4,.. and every CPU this\n"
            "                     process may use; --quick: 1 and all of them)\n"
            "  --rows LIST        routed rows / tokens per step, e.g. 1,2,4,8,16,64,256\n"
            "                     (default 1,2,4,8,16,32,64,128,256; --quick: 1,4,16)\n"
            "  --reps N           recorded repetitions per point, >= 3 (default 15; --quick: 5); the\n"
            "                     decode grid makes at most 3 passes of 64 steps a point\n"
            "  --far-units N      the decode grid's far work in units of 1/N of an expert (default:\n"
            "                     quarters for top-2, thirds from top-3 on, where the rows allow;\n"
            "                     at most the model's FFN rows in blocks and 32 / top_k): finer units\n"
            "                     balance the cores and the bus closer, for a longer grid\n"
            "  --grid-pool N      the decode grid holds at most N experts a layer on the GPU (default:\n"
            "                     as many as the device holds, up to n_expert - top_k); the cold\n"
            "                     routes spread over the other n_expert - N\n"
            "  --quick            fewer points and warm-ups (smoke tests, CI)\n"
            "  --force            overwrite FILE if it exists\n"
            "  -h, --help         this text\n");
}

static int usage_error(const char *msg, const char *arg)
{
    fprintf(stderr, "moeplan calibrate: error: %s%s%s (see moeplan calibrate --help)\n", msg, arg ? " " : "", arg ? arg : "");
    return 2;
}

static int cmp_int(const void *a, const void *b)
{
    return (*(const int *)a > *(const int *)b) - (*(const int *)a < *(const int *)b);
}

/* "1,4,16" -> sorted values without repeats, each in [1, max]. Returns the count, or -1 with a
 * message in why. */
static int parse_list(const char *s, int max, int *out, char *why, size_t why_cap)
{
    int n = 0;
    const char *p = s;
    while (1) {
        char *end;
        errno = 0;
        long v = strtol(p, &end, 10);
        if (end == p || errno || v < 1 || v > max || (*end != ',' && *end != 0)) {
            snprintf(why, why_cap, "'%s': at character %d: expected a comma-separated list of integers 1..%d", s,
                     (int)(p - s) + 1, max);
            return -1;
        }
        if (n == MP_CALIB_LIST_MAX) {
            snprintf(why, why_cap, "'%s': more than %d values", s, MP_CALIB_LIST_MAX);
            return -1;
        }
        out[n++] = (int)v;
        if (!*end)
            break;
        p = end + 1;
    }
    qsort(out, (size_t)n, sizeof *out, cmp_int);
    int k = 0;
    for (int i = 0; i < n; i++)
        if (k == 0 || out[i] != out[k - 1])
            out[k++] = out[i];
    return k;
}

static void progress(void *user, const char *line)
{
    fprintf(stderr, "%s\n", line);
}

enum { OPT_ROWS = 256, OPT_REPS, OPT_QUICK, OPT_FORCE, OPT_FAR_UNITS, OPT_GRID_POOL };

static const mp_cli_opt calibrate_flags[] = {
    {"model", 'm', true, 'm', NULL},
    {"out", 'o', true, 'o', NULL},
    {"output", 0, true, 'o', NULL},
    {"threads", 't', true, 't', NULL},
    {"rows", 0, true, OPT_ROWS, NULL},
    {"reps", 0, true, OPT_REPS, NULL},
    {"far-units", 0, true, OPT_FAR_UNITS, NULL},
    {"grid-pool", 0, true, OPT_GRID_POOL, NULL},
    {"quick", 0, false, OPT_QUICK, NULL},
    {"force", 0, false, OPT_FORCE, NULL},
    {"help", 'h', false, 'h', NULL},
    {0},
};

/* The far points whose CPU side the decision model raises (mp_decode_costs_settle), in one line:
 * the file keeps what was measured, the runs and the simulator charge the raised value. */
static void say_raised(const mp_costs *c)
{
    mp_decode_raised r;
    if (mp_costs_decode_raised(c, &r) && r.n)
        fprintf(stderr, "calibrate: decode layer grid: %d far point%s measured a CPU side below its CPU experts' "
                "time alone slowed by the cores' share beside the bus (the most: %d cold, %d far, %.1f us against "
                "%.1f); the decisions and the simulator charge the latter (runtime/decide.h, "
                "mp_decode_costs_settle)\n",
                r.n, r.n == 1 ? "" : "s", r.cold, r.far, r.from_ns / 1e3, r.to_ns / 1e3);
}

/* A decode grid that spread like a busy host's (mp_cost_decode_spread), and a CPU expert curve whose
 * call of more experts took much less time than one of fewer (mp_cost_cpu_curve_inverted), each in
 * one line: the decisions follow that noise, so the user learns it here rather than from a plan that
 * misses. */
static void say_noisy(const mp_costs *c)
{
    mp_cost_spread sp;
    if (mp_cost_decode_spread(&c->decode, &sp))
        fprintf(stderr, "calibrate: warning: the decode grid's repetitions spread %.1f %% of a layer's time on "
                "average, %.1f %% at most, over its %d points of %.0f us or more (quiet hosts: under %.0f %%): other "
                "work shared this machine's cores or memory while it measured, and the far routes and plans these "
                "costs decide follow that noise; calibrate again on a quiet machine\n",
                100 * sp.mean, 100 * sp.max, sp.n, MP_COST_GRID_STEADY_NS / 1e3, 100 * MP_COST_GRID_NOISY);
    mp_cost_inversion inv;
    if (mp_cost_cpu_curve_inverted(c, &inv))
        fprintf(stderr, "calibrate: warning: a CPU call of %g %s expert%s (%d threads) took %.1f us, one of %g took "
                "%.1f: %.1fx for less work (quiet hosts: at most %.1fx): other work shared this machine's cores or "
                "memory while it measured, and the CPU costs these decide follow that noise; calibrate again on a "
                "quiet machine\n", inv.k_lo, inv.entry->quant, inv.k_lo == 1 ? "" : "s", inv.entry->threads,
                inv.lo_ns / 1e3, inv.k_hi, inv.hi_ns / 1e3, inv.lo_ns / inv.hi_ns, MP_COST_CURVE_INVERTED);
}

int mp_cmd_calibrate(int argc, char **argv, const mp_knobs *knobs)
{
    const char *model = NULL, *out = NULL, *threads = NULL, *rows = NULL, *reps = NULL, *far_units = NULL,
               *grid_pool = NULL;
    bool quick = false, force = false;
    mp_cli c;
    mp_cli_init(&c, "calibrate", calibrate_flags, argc, argv);
    const char *v;
    for (int id; (id = mp_cli_next(&c, &v)) != MP_CLI_END;) {
        switch (id) {
        case MP_CLI_ERROR:
            return mp_cli_usage_error("calibrate", c.err.msg);
        case MP_CLI_POSITIONAL:
            return usage_error("unexpected argument", v);
        case 'h':
            usage(stdout);
            return MP_EXIT_OK;
        case OPT_QUICK: quick = true; break;
        case OPT_FORCE: force = true; break;
        case 'm': model = v; break;
        case 'o': out = v; break;
        case 't': threads = v; break;
        case OPT_ROWS: rows = v; break;
        case OPT_REPS: reps = v; break;
        case OPT_FAR_UNITS: far_units = v; break;
        case OPT_GRID_POOL: grid_pool = v; break;
        }
    }
    if (!model || !out)
        return usage_error("needs -m MODEL and --out FILE", NULL);

    mp_calib_opts o;
    mp_calib_defaults(&o, quick);
    o.model_path = model;
    char why[256];
    if (threads && (o.n_threads = parse_list(threads, 4096, o.threads, why, sizeof why)) < 0)
        return usage_error("--threads", why);
    if (rows && (o.n_rows = parse_list(rows, 4096, o.rows, why, sizeof why)) < 0)
        return usage_error("--rows", why);
    int64_t n = 0;
    if (reps && !mp_parse_i64(reps, 3, 100000, &n))
        return usage_error("--reps: expected an integer 3..100000, got", reps);
    if (reps)
        o.reps = (int)n;
    /* the upper ends of --far-units and --grid-pool are the model's: mp_calibrate checks them once
     * the model is read */
    if (far_units && !mp_parse_i64(far_units, 1, MP_DECIDE_MAX_K, &n)) {
        snprintf(why, sizeof why, "--far-units: expected an integer 1..%d, got", MP_DECIDE_MAX_K);
        return usage_error(why, far_units);
    }
    if (far_units)
        o.far_units = (int)n;
    if (grid_pool && !mp_parse_i64(grid_pool, 1, 1 << 20, &n))
        return usage_error("--grid-pool: expected an integer 1..1048576, got", grid_pool);
    if (grid_pool)
        o.grid_pool = n;
    /* the output first, before minutes of measurements: not the model, not an existing file
     * without --force, in a directory that exists and is writable */
    mp_error err;
    const mp_file_ref model_ref = {model, "the model"};
    mp_status ost = mp_output_check(out, "--out", force, &model_ref, 1, &err);
    if (ost) {
        fprintf(stderr, "moeplan calibrate: error: %s\n", err.msg);
        return ost == MP_ERR_ARG ? 2 : 1;
    }
    o.progress = progress;
    o.knobs = knobs;
    mp_progress hash_progress; /* on a terminal: the SHA-256 of a model read from disk takes minutes */
    mp_progress_begin(&hash_progress, mp_progress_stream(MP_PROGRESS_AUTO), "calibrate", NULL, 0);
    o.hash_progress = &hash_progress;

    char *json = NULL;
    if (mp_calibrate(&o, &json, &err)) {
        fprintf(stderr, "moeplan calibrate: error: %s\n", err.msg);
        return 1;
    }
    /* the file must load as a cost file: check the exact bytes about to be written */
    mp_costs check;
    mp_status st = mp_costs_parse(json, strlen(json), out, &check, &err);
    if (st) {
        fprintf(stderr, "moeplan calibrate: error: internal: the cost file would not load: %s\n", err.msg);
        free(json);
        return 1;
    }
    say_raised(&check);
    say_noisy(&check);
    mp_costs_free(&check);
    if (mp_output_check(out, "--out", force, &model_ref, 1, &err)) { /* changed while measuring */
        fprintf(stderr, "moeplan calibrate: error: %s\n", err.msg);
        free(json);
        return 1;
    }
    size_t len = strlen(json);
    json[len] = '\n'; /* cJSON leaves no final newline; the NUL's byte carries it */
    st = mp_write_file_atomic(out, json, len + 1, "cost file", &err);
    free(json);
    if (st) {
        fprintf(stderr, "moeplan calibrate: error: %s\n", err.msg);
        return 1;
    }
    fprintf(stderr, "calibrate: wrote %s\n", out);
    return 0;
}
