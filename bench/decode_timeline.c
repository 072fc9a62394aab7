/* bench/decode_timeline.c — where the wall time of a decode step goes on the GPU, kernel by kernel,
 * as production runs it (CUDA graphs, programmatic dependent launch, hybrid layers' handoffs).
 *
 *   bench/decode_timeline -m MODEL.gguf [--placement P=gpu] [--gpu-budget B] [--tokens N=16]
 *                         [--threads T=all] [--ctx C=512]
 *
 * CUPTI records every kernel and copy of N decode tokens (after a 1-token prompt and 4 warm-up
 * tokens, which capture the graphs). With PDL a kernel starts while its predecessor runs and waits
 * inside, so a kernel's duration overstates what it costs; here each record is charged only the
 * time by which it moved the GPU's frontier (the latest end seen so far), taking records in order
 * of their end: a chain's kernel is charged end - predecessor's end. Time with nothing running is
 * "idle" (the GPU waiting for the host: launches, the CPU experts of hybrid layers), and is also
 * listed against the record that ended it ("idle before it": before the step's first copy, the
 * host between tokens; before a kernel, a dependency that did not launch early). Per kernel name:
 * launches per token, charged µs per token and per launch, mean duration. CUPTI's own cost
 * (~0.6 ms per token of the 30B preset's all-GPU step) shows up as idle. (`moeplan collect
 * --cupti` cannot show this: its hooks turn the decode graphs off.)
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "collector/cupti.h"
#include "runtime/gpu.h"
#include "runtime/model.h"
#include "base/numparse.h"
#include "runtime/placement.h"
#include "runtime/session.h"
#include "base/clock.h"
#include "runtime/knobs_apply.h"

typedef struct span {
    int name;                /* index into names */
    int64_t start_ns, end_ns;
} span;

typedef struct timeline {
    span *r;
    int64_t n, cap;
    char (*names)[72];
    int n_names, cap_names;
} timeline;

/* "_Z11gemv_kernelILi12ELb1ELi1EEvPKh..." -> "gemv_kernel<12,1,1>"; other names cut to fit */
static void short_name(const char *kind, const char *name, char *out, size_t cap)
{
    if (!strcmp(kind, "memcpy")) {
        snprintf(out, cap, "memcpy %s", name ? name : "?");
        return;
    }
    if (!name || strncmp(name, "_Z", 2)) {
        snprintf(out, cap, "%.60s", name ? name : "?");
        return;
    }
    char *end;
    const long len = strtol(name + 2, &end, 10);
    if (len <= 0 || (long)strlen(end) < len) {
        snprintf(out, cap, "%.60s", name);
        return;
    }
    size_t o = (size_t)snprintf(out, cap, "%.*s", (int)(len < 56 ? len : 56), end);
    const char *t = end + len;
    if (*t == 'I') { /* template arguments: the integer ones, "Li12E" -> 12 */
        o += (size_t)snprintf(out + o, cap - o, "<");
        for (t++; *t && *t != 'E' && o + 8 < cap;) {
            if (t[0] == 'L' && (t[1] == 'i' || t[1] == 'b')) {
                const char *v = t + 2;
                while (*t && *t != 'E')
                    t++;
                o += (size_t)snprintf(out + o, cap - o, "%s%.*s", out[o - 1] == '<' ? "" : ",", (int)(t - v), v);
                if (*t)
                    t++;
            } else {
                break;
            }
        }
        snprintf(out + o, cap - o, ">");
    }
}

static mp_status collect_sink(void *user, const mp_trace_cupti_rec *rec_in, mp_error *err)
{
    timeline *tl = user;
    char nm[72];
    short_name(rec_in->kind, rec_in->name, nm, sizeof nm);
    int id = -1;
    for (int i = 0; i < tl->n_names && id < 0; i++)
        if (!strcmp(tl->names[i], nm))
            id = i;
    if (id < 0) {
        if (tl->n_names == tl->cap_names) {
            tl->cap_names = tl->cap_names ? 2 * tl->cap_names : 64;
            tl->names = realloc(tl->names, (size_t)tl->cap_names * sizeof *tl->names);
            if (!tl->names)
                return mp_fail(err, MP_ERR_NOMEM, "decode_timeline: out of memory");
        }
        id = tl->n_names++;
        snprintf(tl->names[id], sizeof tl->names[id], "%s", nm);
    }
    if (tl->n == tl->cap) {
        tl->cap = tl->cap ? 2 * tl->cap : 4096;
        tl->r = realloc(tl->r, (size_t)tl->cap * sizeof *tl->r);
        if (!tl->r)
            return mp_fail(err, MP_ERR_NOMEM, "decode_timeline: out of memory");
    }
    tl->r[tl->n++] = (span){id, rec_in->start_ns, rec_in->end_ns};
    return MP_OK;
}

static mp_status discard_sink(void *user, const mp_trace_cupti_rec *rec, mp_error *err)
{
    (void)user, (void)rec, (void)err;
    return MP_OK;
}

static int by_end(const void *a, const void *b)
{
    const span *x = a, *y = b;
    return x->end_ns < y->end_ns ? -1 : x->end_ns > y->end_ns;
}

typedef struct agg {
    int name;
    int64_t count, charged_ns, dur_ns, idle_before_ns;
} agg;

static int by_charged(const void *a, const void *b)
{
    const agg *x = a, *y = b;
    return x->charged_ns > y->charged_ns ? -1 : x->charged_ns < y->charged_ns;
}

static int usage(FILE *f, int rc)
{
    fprintf(f, "usage: decode_timeline -m MODEL.gguf [--placement P=gpu] [--gpu-budget B] [--tokens N=16]\n"
               "                       [--threads T=all] [--ctx C=512]\n");
    return rc;
}

int main(int argc, char **argv)
{
    mp_knobs knobs; /* the environment's MP_* knobs, as moeplan reads them */
    mp_error kerr;
    if (mp_knobs_start(&knobs, &kerr)) {
        fprintf(stderr, "%s: %s\n", "decode_timeline", kerr.msg);
        return 2;
    }
    const char *path = NULL;
    int64_t tokens = 16, threads = 0, ctx = 512;
    mp_placement_opts po = {0};
    mp_status st = MP_OK;
    mp_error err = {0};
    bool placed = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help"))
            return usage(stdout, 0);
        if (i + 1 >= argc) {
            fprintf(stderr, "decode_timeline: %s needs a value\n", a);
            return usage(stderr, 2);
        }
        const char *v = argv[++i];
        if (!strcmp(a, "-m")) {
            path = v;
        } else if (!strcmp(a, "--tokens") || !strcmp(a, "--threads") || !strcmp(a, "--ctx")) {
            int64_t *dst = !strcmp(a, "--tokens") ? &tokens : !strcmp(a, "--threads") ? &threads : &ctx;
            if (!mp_parse_i64(v, 1, 1 << 20, dst)) {
                fprintf(stderr, "decode_timeline: %s '%s': expected a positive integer\n", a, v);
                return 2;
            }
        } else if (mp_placement_opts_set(&po, a, v, &st, &err)) {
            if (st) {
                fprintf(stderr, "decode_timeline: %s\n", err.msg);
                return 2;
            }
            placed |= !strcmp(a, "--placement");
        } else {
            fprintf(stderr, "decode_timeline: unknown option '%s'\n", a);
            return usage(stderr, 2);
        }
    }
    if (!path)
        return usage(stderr, 2);
    if (!placed && !mp_placement_opts_set(&po, "--placement", "gpu", &st, &err))
        return 2;
    mp_model *m = NULL;
    if (mp_model_load(path, &m, &err)) {
        fprintf(stderr, "decode_timeline: %s\n", err.msg);
        return 1;
    }
    mp_session_params sp = {.n_ctx = ctx, .n_threads = (int)threads, .n_batch = 512, .knobs = &knobs};
    int64_t n_ctx = 0, n_batch = 0;
    mp_placement pl;
    if (mp_session_resolve_sizes(m, &sp, &n_ctx, &n_batch, &err) ||
        mp_placement_for_model(m, &po, n_ctx, n_batch, &pl, &err)) {
        fprintf(stderr, "decode_timeline: %s\n", err.msg);
        return 1;
    }
    sp.placement = &pl;
    mp_cupti *cu = NULL;
    if (mp_cupti_start(&cu, &err)) { /* before the session: its graphs are captured under CUPTI */
        fprintf(stderr, "decode_timeline: %s\n", err.msg);
        return 1;
    }
    mp_session *s = NULL;
    if (mp_session_new(m, &sp, &s, &err)) {
        fprintf(stderr, "decode_timeline: %s\n", err.msg);
        return 1;
    }
    if (tokens + 5 >= n_ctx) {
        fprintf(stderr, "decode_timeline: --tokens %" PRId64 " does not fit the context of %" PRId64 "\n",
                tokens, n_ctx);
        return 2;
    }
    float *logits = malloc((size_t)m->hp.n_vocab * sizeof *logits);
    int32_t tok = 1;
    timeline tl = {0};
    double t0 = 0;
    mp_gpu_stats gs0 = {0};
    for (int64_t t = -5; t < tokens && !st; t++) { /* -5: the prompt, -4 .. -1: warm-up */
        if (t == 0) {
            st = mp_cupti_flush(cu, discard_sink, NULL, &err);
            mp_gpu_get_stats(mp_session_gpu(s), &gs0);
            t0 = mp_now_s();
        }
        if (!st)
            st = mp_session_eval(s, &tok, 1, false, logits, &err);
        tok = (int32_t)((tok * 7919 + 13) % m->hp.n_vocab);
    }
    const double wall = mp_now_s() - t0;
    mp_gpu_stats gs_end;
    mp_gpu_get_stats(mp_session_gpu(s), &gs_end);
    if (!st)
        st = mp_cupti_flush(cu, collect_sink, &tl, &err);
    if (st) {
        fprintf(stderr, "decode_timeline: %s\n", err.msg);
        return 1;
    }
    qsort(tl.r, (size_t)tl.n, sizeof *tl.r, by_end);
    agg *ag = calloc((size_t)tl.n_names + 1, sizeof *ag);
    if (!ag) {
        fprintf(stderr, "decode_timeline: out of memory\n");
        return 1;
    }
    for (int i = 0; i < tl.n_names; i++)
        ag[i].name = i;
    int64_t frontier = tl.n ? tl.r[0].start_ns : 0, idle = 0, first = frontier;
    for (int64_t i = 0; i < tl.n; i++) {
        const span *r = &tl.r[i];
        first = r->start_ns < first ? r->start_ns : first;
        if (r->start_ns > frontier) {
            idle += r->start_ns - frontier;
            ag[r->name].idle_before_ns += r->start_ns - frontier;
        }
        const int64_t from = r->start_ns > frontier ? r->start_ns : frontier;
        if (r->end_ns > from)
            ag[r->name].charged_ns += r->end_ns - from;
        frontier = r->end_ns > frontier ? r->end_ns : frontier;
        ag[r->name].count++;
        ag[r->name].dur_ns += r->end_ns - r->start_ns;
    }
    qsort(ag, (size_t)tl.n_names, sizeof *ag, by_charged);
    const double per = 1.0 / (double)tokens;
    printf("decode_timeline: %s, placement %s, %" PRId64 " tokens: %.1f us per token on the host's clock, GPU "
           "span %.1f us, idle %.1f us (GPU waiting for the host)\n",
           path, pl.desc, tokens, wall * 1e6 * per, (double)(frontier - first) * 1e-3 * per, (double)idle * 1e-3 * per);
    printf("decode_timeline: host time inside cudaGraphLaunch %.1f us per token\n",
           (double)(gs_end.graph_launch_ns - gs0.graph_launch_ns) * 1e-3 * per);
    printf("| kernel / copy | per token | charged us/token | charged us/launch | mean duration us | idle before "
           "it us/token |\n");
    printf("| --- | ---: | ---: | ---: | ---: | ---: |\n");
    for (int i = 0; i < tl.n_names; i++)
        if (ag[i].count)
            printf("| %s | %.1f | %.1f | %.2f | %.2f | %.1f |\n", tl.names[ag[i].name], (double)ag[i].count * per,
                   (double)ag[i].charged_ns * 1e-3 * per, (double)ag[i].charged_ns * 1e-3 / (double)ag[i].count,
                   (double)ag[i].dur_ns * 1e-3 / (double)ag[i].count, (double)ag[i].idle_before_ns * 1e-3 * per);
    printf("| (idle) | | %.1f | | | |\n", (double)idle * 1e-3 * per);
    mp_session_free(s);
    mp_cupti_counts counts;
    mp_cupti_stop(cu, &counts, &err);
    if (counts.n_dropped)
        printf("decode_timeline: CUPTI dropped %" PRId64 " records: the table is incomplete\n", counts.n_dropped);
    mp_placement_free(&pl);
    mp_model_free(m);
    free(logits);
    free(tl.r);
    free(tl.names);
    free(ag);
    return 0;
}
