/* bench/moe_cpu_stream.c — the hybrid decode step's CPU side alone: one-row calls of the runtime's
 * CPU expert function (mp_moe_experts_cpu) over the experts of the first L layers, held as the
 * GPU executor holds them (an anonymous copy in transparent huge pages, laid out layer by layer),
 * with no GPU in the loop.
 *
 *   bench/moe_cpu_stream -m MODEL.gguf [--layers L=48] [--tokens N=16] [--threads T=all]
 *                        [--gap-us G=0] [--token-gap-us U=0]
 *                        [--routes R=top_k] [--part N/D]
 *                        [--compare | --compare-isa A,B | --compare-pin | --compare-part |
 *                         --compare-packed] [--profile]
 *
 * Per token, every layer 0 .. L-1 gets one call with R (default top_k) distinct random experts (the
 * same sequence for every run: a fixed seed) and a random row; with --part N/D the call's first
 * route is a split far route's CPU side (mp_moe_part: the expert's FFN rows [0, N/D of n_ff),
 * rounded as runtime/decide.h mp_decide_split_rows rounds them: gate/up rows and down's first
 * columns, a segment of every down row), and --compare-part alternates, token by token, calls
 * with that part and calls of whole routes, so that the GB/s of the two read patterns compare;
 * --compare-packed (with --routes 1) alternates the part read as now, a segment of every down row,
 * with the same part over a second copy of down whose rows' segments are packed one after another
 * (mp_moe_part.down_units with one unit, as the GPU executor's MP_GPU_PART_BY_UNIT gives a part
 * of one unit), after checking that both give the same bits; G
 * µs of spinning on the caller follow each call (the GPU part of a hybrid layer step, during which the pool waits). Reports the
 * median, mean and 90th percentile time per call and the bytes of the call's experts over its
 * mean time, and, for comparison, bench/membw's stream (each thread a contiguous share) over a
 * buffer of the copy's size. --compare alternates, token by token, the pipelined region and the
 * two regions of mp_moe_experts_cpu (mp_moe_scratch_set_pipelined) and reports both: this host's
 * memory bandwidth drifts by ±15 % within minutes, so only an A/B interleaved this finely is
 * trustworthy. --compare-isa A,B alternates the CPU kernels' level (MP_ISA, e.g. avx512,avx2)
 * the same way, and --compare-pin a pool whose workers are pinned to CPUs (MP_POOL_PIN=1;
 * runtime/threadpool.c) against one whose are not. --profile says where a call's time goes (mp_moe_scratch_profile:
 * the region's start, the threads' late starts, gate/up, down, waits for an expert's hidden rows,
 * the tail after each thread's last unit). --token-gap-us sleeps U µs after each token's L calls, as the runtime's CPU side
 * rests while the GPU runs the all-resident layers (layers:12: ~2.5 ms per token). Why: the offloaded rows' CPU side took ~357 µs per layer step at
 * layers:48 and ~293 µs at layers:12 for the same 24.5 MB (bench/NOTES-gpu-exec.md); this
 * separates the memory's behaviour from the GPU's and the round trip's.
 */
#include <inttypes.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include "kernels/quant.h"
#include "runtime/bench.h"
#include "base/arena.h"
#include "base/error.h"
#include "base/knobs.h"
#include "runtime/knobs_apply.h"
#include "runtime/decide.h"
#include "runtime/model.h"
#include "runtime/moe.h"
#include "base/numparse.h"
#include "runtime/cpus.h"
#include "runtime/threadpool.h"
#include "base/clock.h"

static uint64_t rng_state = 0x9E3779B97F4A7C15ULL;
static uint64_t rng(void) /* xorshift64* */
{
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return rng_state * 0x2545F4914F6CDD1DULL;
}

static int cmp_i64(const void *a, const void *b)
{
    const int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? -1 : x > y;
}

#define ALIGN 256
static size_t align_up(size_t b)
{
    return (b + ALIGN - 1) & ~(size_t)(ALIGN - 1);
}

typedef struct copy_job {
    const mp_model *m;
    const void **slices; /* (L, 3, E) */
} copy_job;

static void copy_task(void *ctx, int64_t task, int thread)
{
    (void)thread;
    const copy_job *j = ctx;
    const int64_t E = j->m->hp.n_expert, il = task / E, e = task % E;
    const mp_layer *Ly = &j->m->layers[il];
    const mp_tensor *ts[3] = {&Ly->gate_exps, &Ly->up_exps, &Ly->down_exps};
    for (int t = 0; t < 3; t++)
        memcpy((void *)j->slices[(il * 3 + t) * E + e], mp_expert_slice(ts[t], e),
               ts[t]->row_bytes * (size_t)ts[t]->ne[1]);
}

/* --compare-packed: expert e of layer il's down rows, each cut to the part's first ff_rows columns
 * and laid one after another */
typedef struct pack_job {
    const mp_model *m;
    const void *const *slices, *const *packed; /* (L, 3, E); packed: the down slices of the copy */
    int64_t ff_rows;
} pack_job;

static void pack_task(void *ctx, int64_t task, int thread)
{
    (void)thread;
    const pack_job *j = ctx;
    const int64_t E = j->m->hp.n_expert, il = task / E, e = task % E;
    const mp_tensor *d = &j->m->layers[il].down_exps;
    const size_t seg = mp_type_row_bytes(d->type, j->ff_rows);
    const char *src = j->slices[(il * 3 + 2) * E + e];
    char *dst = (char *)j->packed[(il * 3 + 2) * E + e];
    for (int64_t r = 0; r < d->ne[1]; r++)
        memcpy(dst + (size_t)r * seg, src + (size_t)r * d->row_bytes, seg);
}

/* --profile: one line of means per call, µs, and the thread slots' shares */
static void print_profile(const mp_moe_scratch *s, const char *label)
{
    mp_moe_cpu_profile p;
    char line[400];
    mp_moe_scratch_profile_get(s, &p);
    mp_moe_cpu_profile_format(&p, line, sizeof line);
    printf("moe_cpu_stream: profile%s: %s\n", label, line);
}

static void usage(FILE *f)
{
    fprintf(f, "usage: moe_cpu_stream -m MODEL.gguf [--layers L=48] [--tokens N=16] [--threads T=all]\n"
               "                      [--gap-us G=0] [--token-gap-us U=0]\n"
               "                      [--routes R=top_k] [--part N/D]\n"
               "                      [--compare | --compare-isa A,B | --compare-pin | --compare-part |\n"
               "                       --compare-packed] [--profile]\n");
}

/* A whole-string number of microseconds in [0, hi). */
static bool parse_us(const char *v, double hi, double *out)
{
    char *end = NULL;
    const double d = strtod(v, &end);
    if (end == v || *end || !(d >= 0 && d < hi))
        return false;
    *out = d;
    return true;
}

static int bad_flag(const char *flag, const char *value, const char *expected)
{
    fprintf(stderr, "moe_cpu_stream: %s '%s': expected %s (see --help)\n", flag, value, expected);
    return 2;
}

int main(int argc, char **argv)
{
    const char *path = NULL;
    int64_t L = 48, tokens = 16, threads = mp_cpu_usable();
    double gap_us = 0, token_gap_us = 0;
    bool compare = false, compare_pin = false, compare_part = false, compare_packed = false, profile = false;
    int64_t routes = 0, part_n = 0, part_d = 0; /* routes 0: top_k; part_d 0: no part */
    char isa[2][16] = {"", ""};
    const struct { const char *name; bool *on; } switches[] = {
        {"--compare", &compare}, {"--compare-pin", &compare_pin}, {"--compare-part", &compare_part},
        {"--compare-packed", &compare_packed}, {"--profile", &profile}};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return 0;
        }
        bool is_switch = false;
        for (size_t k = 0; k < sizeof switches / sizeof *switches; k++)
            if (!strcmp(a, switches[k].name))
                *switches[k].on = is_switch = true;
        if (is_switch)
            continue;
        if (i + 1 >= argc) {
            fprintf(stderr, "moe_cpu_stream: %s needs a value (see --help)\n", a);
            return 2;
        }
        const char *v = argv[++i];
        if (!strcmp(a, "-m"))
            path = v;
        else if (!strcmp(a, "--layers")) {
            if (!mp_parse_i64(v, 1, 1 << 20, &L))
                return bad_flag(a, v, "a layer count >= 1");
        } else if (!strcmp(a, "--tokens")) {
            if (!mp_parse_i64(v, 1, 1 << 20, &tokens))
                return bad_flag(a, v, "a token count in 1..1048576");
        } else if (!strcmp(a, "--threads")) {
            if (!mp_parse_i64(v, 1, 1024, &threads))
                return bad_flag(a, v, "a thread count in 1..1024");
        } else if (!strcmp(a, "--gap-us")) {
            if (!parse_us(v, 1e6, &gap_us))
                return bad_flag(a, v, "microseconds in [0, 1e6)");
        } else if (!strcmp(a, "--token-gap-us")) {
            if (!parse_us(v, 1e7, &token_gap_us))
                return bad_flag(a, v, "microseconds in [0, 1e7)");
        } else if (!strcmp(a, "--routes")) {
            if (!mp_parse_i64(v, 1, 64, &routes))
                return bad_flag(a, v, "a route count in 1..64 (at most top_k)");
        } else if (!strcmp(a, "--part")) {
            const char *slash = strchr(v, '/');
            char num[24];
            if (!slash || slash == v || slash - v >= (ptrdiff_t)sizeof num)
                return bad_flag(a, v, "N/D with 0 < N < D <= 64");
            memcpy(num, v, (size_t)(slash - v));
            num[slash - v] = '\0';
            if (!mp_parse_i64(num, 1, 63, &part_n) || !mp_parse_i64(slash + 1, 2, 64, &part_d) || part_n >= part_d)
                return bad_flag(a, v, "N/D with 0 < N < D <= 64");
        } else if (!strcmp(a, "--compare-isa")) {
            const char *comma = strchr(v, ',');
            if (!comma || comma == v || comma - v >= 16 || !comma[1] || strlen(comma + 1) >= 16)
                return bad_flag(a, v, "two kernel levels A,B (scalar, avx2, avx512)");
            memcpy(isa[0], v, (size_t)(comma - v));
            strcpy(isa[1], comma + 1);
        } else {
            fprintf(stderr, "moe_cpu_stream: unknown option '%s' (see --help)\n", a);
            return 2;
        }
    }
    if (!path) {
        fprintf(stderr, "moe_cpu_stream: -m MODEL.gguf is required (see --help)\n");
        return 2;
    }
    if ((int)compare + (int)compare_pin + (int)compare_part + (int)compare_packed + (int)(isa[0][0] != 0) > 1) {
        fprintf(stderr, "moe_cpu_stream: --compare, --compare-isa, --compare-pin, --compare-part and --compare-packed "
                        "are one A/B each: give one\n");
        return 2;
    }
    if ((compare_part || compare_packed) && !part_d) {
        fprintf(stderr, "moe_cpu_stream: %s needs --part N/D\n", compare_part ? "--compare-part" : "--compare-packed");
        return 2;
    }
    if (compare_packed && routes != 1) {
        /* the packed copy's rows are a part's: a whole route's down could not be read from it */
        fprintf(stderr, "moe_cpu_stream: --compare-packed runs the part alone: give --routes 1\n");
        return 2;
    }
    mp_knobs knobs; /* the environment's, as moeplan reads them; the A/B flags change a copy */
    mp_error kerr;
    if (mp_knobs_start(&knobs, &kerr)) {
        fprintf(stderr, "moe_cpu_stream: %s\n", kerr.msg);
        return 2;
    }
    /* a level this CPU lacks would silently run the best one (dispatch.c): refuse it instead */
    for (int v = 0; isa[0][0] && v < 2; v++) {
        if (mp_kernels_set_isa_cap(isa[v]) || strcmp(mp_kernels_isa(), isa[v])) {
            fprintf(stderr, "moe_cpu_stream: --compare-isa: this CPU has no '%s' kernels (it runs %s)\n", isa[v],
                    mp_kernels_isa());
            return 2;
        }
    }
    mp_error err = {0};
    mp_model *m = NULL;
    if (mp_model_load(path, &m, &err)) {
        fprintf(stderr, "moe_cpu_stream: %s\n", err.msg);
        return 1;
    }
    const mp_hparams *hp = &m->hp;
    const int64_t E = hp->n_expert, D = hp->n_embd;
    if (routes > 0 && routes < hp->n_expert_used && hp->n_expert > 65536) {
        fprintf(stderr, "moe_cpu_stream: --routes: %s has %" PRId64 " experts a layer, more than the 65536 it can mark "
                        "resident\n", path, hp->n_expert);
        mp_model_free(m);
        return 2;
    }
    if (routes > hp->n_expert_used) {
        fprintf(stderr, "moe_cpu_stream: --routes %" PRId64 ": %s routes %" PRId64 " experts a token (top_k)\n",
                routes, path, hp->n_expert_used);
        mp_model_free(m);
        return 2;
    }
    /* every call routes top_k experts; the CPU computes the first R, the others count as resident */
    const int64_t K = hp->n_expert_used, R = routes ? routes : K;
    /* --part: the CPU's FFN rows of the split route, as the executor cuts them */
    mp_moe_part part = {.expert = 0};
    if (part_d) {
        const int64_t granule = mp_decide_split_granule(m->layers[0].down_exps.type);
        part.ff_rows = granule > 0 ? mp_decide_split_rows(hp->n_ff_exp, granule, (int)part_d, (int)(part_d - part_n)) : 0;
        if (part.ff_rows <= 0) {
            fprintf(stderr, "moe_cpu_stream: --part %" PRId64 "/%" PRId64 ": %s's experts (FFN %" PRId64
                            ") cannot be split so (runtime/decide.h mp_decide_split_rows)\n",
                    part_n, part_d, path, hp->n_ff_exp);
            mp_model_free(m);
            return 2;
        }
    }
    if (L < 1 || L > hp->n_layer) {
        fprintf(stderr, "moe_cpu_stream: %s has %" PRId64 " layers: --layers (default 48) must be in 1..%" PRId64 "\n",
                path, hp->n_layer, hp->n_layer);
        mp_model_free(m);
        return 2;
    }
    /* from here every exit goes through `done`, which frees what was made (NULL / MAP_FAILED: not) */
    int rc = 0;
    char *arena = MAP_FAILED;
    const void **slices = NULL;
    mp_pool *pool = NULL, *pool2 = NULL; /* pool2: --compare-pin's same threads, not pinned */
    mp_moe_scratch *s = NULL, *s2 = NULL;
    int64_t *ns = NULL, *ns2 = NULL;
    float *x = NULL, *out = NULL;
    /* --compare-packed: the second copy of down (each row's part segment after the one before) and
     * the slices that point into it (the down slice of each expert, in the slice table's places) */
    char *packed = MAP_FAILED;
    size_t packed_map = 0;
    const void **slices_p = NULL;
    float *out_p = NULL;

    /* the copy, as gpu/gpu_host.c lays it out */
    size_t bytes = 0;
    for (int64_t il = 0; il < L; il++) {
        const mp_layer *Ly = &m->layers[il];
        bytes += (size_t)E * (align_up(Ly->gate_exps.row_bytes * (size_t)Ly->gate_exps.ne[1]) +
                              align_up(Ly->up_exps.row_bytes * (size_t)Ly->up_exps.ne[1]) +
                              align_up(Ly->down_exps.row_bytes * (size_t)Ly->down_exps.ne[1]));
    }
    size_t map_bytes;
    arena = mp_huge_arena(bytes, &map_bytes);
    slices = calloc((size_t)(hp->n_layer * 3 * E), sizeof *slices);
    pool = mp_pool_new((int)threads, compare_pin || knobs.pool_pin);
    if (compare_pin) {
        pool2 = mp_pool_new((int)threads, false);
        if (pool && pool2 && mp_pool_n_pinned(pool) == 0) {
            fprintf(stderr, "moe_cpu_stream: --compare-pin: %d threads cannot be pinned here (more threads "
                            "than CPUs)\n", (int)threads);
            rc = 2;
            goto done;
        }
    }
    s = mp_moe_scratch_new(hp, 1, (int)threads, &knobs);
    s2 = mp_moe_scratch_new(hp, 1, (int)threads, &knobs); /* --compare*: the other mode's */
    ns = malloc((size_t)(tokens * L) * sizeof *ns);
    ns2 = malloc((size_t)(tokens * L) * sizeof *ns2);
    x = malloc((size_t)D * sizeof *x);
    out = malloc((size_t)D * sizeof *out);
    if (arena == MAP_FAILED || !slices || !pool || (compare_pin && !pool2) || !s || !s2 || !ns || !ns2 || !x ||
        !out) {
        fprintf(stderr, "moe_cpu_stream: out of memory (%.2f GiB copy)\n", (double)map_bytes / 1073741824.0);
        rc = 1;
        goto done;
    }
    if (profile && (!mp_moe_scratch_profile(s, true) || !mp_moe_scratch_profile(s2, true))) {
        fprintf(stderr, "moe_cpu_stream: out of memory for --profile\n");
        rc = 1;
        goto done;
    }
    char *p = arena;
    for (int64_t il = 0; il < L; il++) {
        const mp_layer *Ly = &m->layers[il];
        const mp_tensor *ts[3] = {&Ly->gate_exps, &Ly->up_exps, &Ly->down_exps};
        for (int64_t e = 0; e < E; e++)
            for (int t = 0; t < 3; t++) {
                slices[(il * 3 + t) * E + e] = p;
                p += align_up(ts[t]->row_bytes * (size_t)ts[t]->ne[1]);
            }
    }
    fprintf(stderr, "moe_cpu_stream: copying %" PRId64 " layers' experts (%.2f GiB)\n", L,
            (double)map_bytes / 1073741824.0);
    copy_job cj = {m, slices};
    mp_pool_run(pool, L * E, copy_task, &cj);
    if (compare_packed) {
        size_t pbytes = 0;
        for (int64_t il = 0; il < L; il++)
            pbytes += (size_t)E * align_up((size_t)D * mp_type_row_bytes(m->layers[il].down_exps.type, part.ff_rows));
        packed = mp_huge_arena(pbytes, &packed_map);
        slices_p = malloc((size_t)(hp->n_layer * 3 * E) * sizeof *slices_p);
        out_p = malloc((size_t)D * sizeof *out_p);
        if (packed == MAP_FAILED || !slices_p || !out_p) {
            fprintf(stderr, "moe_cpu_stream: out of memory for --compare-packed (%.2f GiB)\n",
                    (double)packed_map / 1073741824.0);
            rc = 1;
            goto done;
        }
        memcpy(slices_p, slices, (size_t)(hp->n_layer * 3 * E) * sizeof *slices_p);
        char *q = packed;
        for (int64_t il = 0; il < L; il++) {
            const size_t seg = mp_type_row_bytes(m->layers[il].down_exps.type, part.ff_rows);
            for (int64_t e = 0; e < E; e++) {
                slices_p[(il * 3 + 2) * E + e] = q;
                q += align_up((size_t)D * seg);
            }
        }
        pack_job pj = {m, slices, slices_p, part.ff_rows};
        mp_pool_run(pool, L * E, pack_task, &pj);
    }
    /* the packed part: one unit, [0, ff_rows), as the GPU executor's MP_GPU_PART_BY_UNIT gives it */
    mp_moe_part part_p = {.ff_rows = part.ff_rows, .unit_end = &part.ff_rows, .n_units = 1};

    for (int64_t i = 0; i < D; i++)
        x[i] = (float)((double)(rng() >> 11) / 9007199254740992.0 * 2.0 - 1.0);
    int32_t ids[64];
    float w[64];
    if (K > 64) {
        fprintf(stderr, "moe_cpu_stream: top_k %" PRId64 " > 64\n", K);
        rc = 1;
        goto done;
    }
    for (int64_t k = 0; k < K; k++)
        w[k] = 1.0f / (float)K;
    static uint64_t resident[65536 / 64]; /* a bit per expert id (--routes: at most 65536 experts) */
    const int64_t gap_ns = (int64_t)(gap_us * 1000.0);
    double sink = 0;
    if (compare) {
        mp_moe_scratch_set_pipelined(s, true);
        mp_moe_scratch_set_pipelined(s2, false);
    }
    if (compare_packed) {
        /* the two reads of the part must give the same bits: the same dots over the same blocks */
        for (int64_t k = 0; k < K; k++) {
            ids[k] = (int32_t)((k + 1) % E);
            resident[ids[k] / 64] |= k ? 1ull << (ids[k] % 64) : 0;
        }
        part.expert = part_p.expert = ids[0];
        part_p.down_units = slices_p[2 * E + ids[0]];
        mp_moe_experts_cpu(m, 0, x, 1, ids, w, K > 1 ? resident : NULL, (const void *const *)slices, &part, out,
                           pool, s);
        mp_moe_experts_cpu(m, 0, x, 1, ids, w, K > 1 ? resident : NULL, (const void *const *)slices, &part_p,
                           out_p, pool, s2);
        if (memcmp(out, out_p, (size_t)D * sizeof *out)) {
            fprintf(stderr, "moe_cpu_stream: --compare-packed: the packed part's output differs from the strided "
                            "part's\n");
            rc = 1;
            goto done;
        }
    }
    const bool ab = compare || compare_pin || compare_part || compare_packed || isa[0][0];
    int64_t n_a = 0, n_b = 0;
    for (int64_t t = -2; t < tokens; t++) { /* tokens -2, -1: warm-up, not timed */
        const bool second = ab && (t & 1);
        if (profile && t == 0) /* the warm-up's calls are not profiled either */
            mp_moe_scratch_profile(s, true), mp_moe_scratch_profile(s2, true);
        if (isa[0][0]) /* the level is decided again on next use */
            mp_kernels_set_isa_cap(isa[second]);
        for (int64_t il = 0; il < L; il++) {
            for (int64_t k = 0; k < K; k++) {
                int32_t e;
                bool dup;
                do {
                    e = (int32_t)(rng() % (uint64_t)E);
                    dup = false;
                    for (int64_t j = 0; j < k; j++)
                        dup |= ids[j] == e;
                } while (dup);
                ids[k] = e;
            }
            part.expert = part_p.expert = ids[0];
            if (compare_packed)
                part_p.down_units = slices_p[(il * 3 + 2) * E + ids[0]];
            memset(resident, 0, sizeof resident);
            for (int64_t k = R; k < K; k++)
                resident[ids[k] / 64] |= 1ull << (ids[k] % 64);
            const bool with_part = part_d && !(compare_part && second);
            const int64_t t0 = mp_now_ns();
            const bool packed_call = compare_packed && second;
            mp_moe_experts_cpu(m, il, x, 1, ids, w, R < K ? resident : NULL, (const void *const *)(slices + il * 3 * E),
                               !with_part ? NULL : packed_call ? &part_p : &part, out,
                               compare_pin && second ? pool2 : pool, second && !compare_pin ? s2 : s);
            const int64_t t1 = mp_now_ns();
            sink += out[0];
            if (t >= 0 && second)
                ns2[n_b++] = t1 - t0;
            else if (t >= 0)
                ns[n_a++] = t1 - t0;
            while (mp_now_ns() - t1 < gap_ns)
                ;
        }
        if (token_gap_us > 0) {
            const struct timespec ts = {(time_t)(token_gap_us / 1e6),
                                        (long)(fmod(token_gap_us, 1e6) * 1e3)};
            nanosleep(&ts, NULL);
        }
    }
    /* a call's expert bytes; the part's: its gate/up rows and its segment of every down row */
    const mp_layer *L0 = &m->layers[0];
    const double whole_bytes = (double)R * (double)mp_model_expert_bytes(m, 0),
                 part_bytes = whole_bytes - (double)mp_model_expert_bytes(m, 0) +
                              (double)part.ff_rows * (double)(L0->gate_exps.row_bytes + L0->up_exps.row_bytes) +
                              (double)L0->down_exps.ne[1] * (double)mp_type_row_bytes(L0->down_exps.type, part.ff_rows);
    char label[2][64] = {"", ""};
    if (compare)
        snprintf(label[0], sizeof label[0], ", pipelined"), snprintf(label[1], sizeof label[1], ", two regions");
    else if (isa[0][0])
        snprintf(label[0], sizeof label[0], ", %s", isa[0]), snprintf(label[1], sizeof label[1], ", %s", isa[1]);
    else if (compare_part)
        snprintf(label[0], sizeof label[0], ", first route's part %" PRId64 "/%" PRId64 " (%" PRId64 " FFN rows)", part_n,
                 part_d, part.ff_rows),
            snprintf(label[1], sizeof label[1], ", whole routes");
    else if (compare_packed)
        snprintf(label[0], sizeof label[0], ", part %" PRId64 "/%" PRId64 " (%" PRId64 " FFN rows), down in row segments",
                 part_n, part_d, part.ff_rows),
            snprintf(label[1], sizeof label[1], ", the same part, down packed");
    else if (part_d)
        snprintf(label[0], sizeof label[0], ", first route's part %" PRId64 "/%" PRId64 " (%" PRId64 " FFN rows)", part_n,
                 part_d, part.ff_rows);
    else if (compare_pin)
        snprintf(label[0], sizeof label[0], ", %d workers pinned", mp_pool_n_pinned(pool)),
            snprintf(label[1], sizeof label[1], ", not pinned");
    for (int v = 0; v < (ab ? 2 : 1); v++) {
        int64_t *d = v ? ns2 : ns;
        const double call_bytes = part_d && (v == 0 || compare_packed) ? part_bytes : whole_bytes;
        const int64_t n = v ? n_b : n_a;
        double mean = 0;
        for (int64_t i = 0; i < n; i++)
            mean += (double)d[i];
        mean /= (double)n;
        qsort(d, (size_t)n, sizeof *d, cmp_i64);
        printf("moe_cpu_stream: %" PRId64 " layers (%.2f GiB copy), %d threads, gap %.0f us, token gap %.0f us%s: per call median "
               "%.1f us, mean %.1f us, p90 %.1f us; %.1f GB/s at the mean (%.1f MB per call)%s\n",
               L, (double)map_bytes / 1073741824.0, (int)threads, gap_us, token_gap_us,
               label[v], (double)d[n / 2] / 1e3, mean / 1e3,
               (double)d[n * 9 / 10] / 1e3, call_bytes / mean, call_bytes / 1e6,
               isfinite(sink) ? "" : " (non-finite output)");
        if (profile)
            print_profile(v ? s2 : s, label[v]);
    }
    const double gbs = mp_bench_host_read_gbs(map_bytes, (int)threads, 3);
    printf("moe_cpu_stream: contiguous stream over %.2f GiB, %d threads: %.1f GB/s\n",
           (double)map_bytes / 1073741824.0, (int)threads, gbs);
done:
    if (arena != MAP_FAILED)
        munmap(arena, map_bytes);
    if (packed != MAP_FAILED)
        munmap(packed, packed_map);
    free(slices_p);
    free(out_p);
    mp_moe_scratch_free(s);
    mp_moe_scratch_free(s2);
    mp_pool_free(pool);
    mp_pool_free(pool2);
    mp_model_free(m);
    free(slices);
    free(ns);
    free(ns2);
    free(x);
    free(out);
    return rc;
}
