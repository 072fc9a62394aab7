/* bench/bench_kernels.c — GB/s of weight bytes streamed by the dot products, per SIMD level.
 *
 * For each weight type: a weight matrix of --mb megabytes (default 512; keep it past the L3, so
 * that the weights come from memory as in decode), n_cols = 4096, filled with
 * valid random blocks (n_cols: --cols); one activation row already in the type's vec_dot_type. It times
 * mp_gemv_rows over all rows, single thread, best of --reps passes, for every kernel level the
 * CPU has side by side (scalar reference, avx2, avx512: mp_type_ops_isa, whatever MP_ISA says;
 * "-" where the CPU lacks the level), plus mp_gemm_rows with 4 activation rows (one tile: weights
 * streamed once for 4 rows) for each SIMD level. GB/s counts weight bytes only (1 GB = 1e9
 * bytes) per second of this thread's CPU time.
 *
 * With --gemm N[,N...]: the prefill GEMM instead, for each N activation rows: a weight matrix of
 * --mb megabytes (past the L3, e.g. 1024, it comes from memory, as an expert's weights do in prefill,
 * where each is read once a step; 1 or 2 keep it in L2) through mp_gemm_rows at each SIMD level from
 * avx2 up ("amx": the tile GEMMs of the types that have them, at every row count, their table's
 * threshold set aside), the levels alternated --reps times, the best of each; G MAC/s = weights x N
 * per second, and amx's speed over avx512's. Then, per type with tiles, the fewest of the timed row
 * counts from which the tiles beat avx512 at it and every larger one, beside the table's threshold
 * (kernels/cpu/quant_amx.c): the host's crossover, which differs between hosts.
 *
 * With --prefetch B[,B...]: the dispatched level's GEMV with its weight stream prefetched B bytes
 * ahead (mp_kernels_set_prefetch_bytes, MP_PREFETCH_BYTES's setting; 0: no prefetches), the
 * distances alternated pass by pass --reps times, the best of each, and each over the first; with
 * --gemm too, the dispatched level's GEMM at each of its activation counts instead (G MAC/s); --isa
 * names another level for this table.
 *
 * --cols N sets the weight rows' length (default 2048 with --gemm, else 4096): an expert's hidden
 * size for gate/up, its FFN size for down.
 *
 * Usage: bench_kernels [--mb N] [--reps N] [--type NAME]... [--no-scalar] [--gemm N[,N...]]
 *                      [--prefetch B[,B...] [--isa LEVEL]] [--cols N]
 * (prints one table to stdout)
 */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kernels/quant.h"

static uint64_t g_rng = 0x2545F4914F6CDD1Dull;

static uint64_t rnd(void)
{
    g_rng ^= g_rng << 13;
    g_rng ^= g_rng >> 7;
    g_rng ^= g_rng << 17;
    return g_rng;
}

/* Thread CPU time, not wall time: the 2-core build machine is shared, and a kernel that was
 * descheduled did not get slower. Memory bandwidth taken by others still shows. */
static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Random valid content: random quant bits, f16 scales of a sane size (no Inf/NaN anywhere). */
static void fill_weights(int type, uint8_t *w, size_t bytes)
{
    for (size_t i = 0; i + 8 <= bytes; i += 8) {
        const uint64_t v = rnd();
        memcpy(w + i, &v, 8);
    }
    const mp_f16 scale = mp_f32_to_f16(0.01f);
    const size_t bb = mp_type_block_bytes(type);
    for (size_t off = 0; off + bb <= bytes; off += bb) {
        switch (type) {
        case MP_TYPE_F32: {
            const float f = (float)(rnd() % 2001) * 1e-3f - 1.0f;
            memcpy(w + off, &f, 4);
            break;
        }
        case MP_TYPE_F16:
        case MP_TYPE_BF16: {
            const float f = (float)(rnd() % 2001) * 1e-3f - 1.0f;
            const uint16_t h = type == MP_TYPE_F16 ? mp_f32_to_f16(f) : mp_f32_to_bf16(f);
            memcpy(w + off, &h, 2);
            break;
        }
        case MP_TYPE_Q4_K:
        case MP_TYPE_Q5_K:
            memcpy(w + off + 2, &scale, 2); /* dmin; d at offset 0 like Q4_0's */
            /* fall through */
        case MP_TYPE_Q4_1:
        case MP_TYPE_Q5_1:
            memcpy(w + off + 2, &scale, 2); /* m; d at offset 0 */
            /* fall through */
        case MP_TYPE_Q4_0:
        case MP_TYPE_Q8_0:
        case MP_TYPE_Q5_0:
        case MP_TYPE_IQ4_NL:
        case MP_TYPE_IQ4_XS:
            memcpy(w + off, &scale, 2);
            break;
        case MP_TYPE_MXFP4:
            w[off] = 120; /* 2^-8 */
            break;
        case MP_TYPE_Q6_K:
            memcpy(w + off + 208, &scale, 2);
            break;
        case MP_TYPE_Q2_K:
            memcpy(w + off + 80, &scale, 2);
            memcpy(w + off + 82, &scale, 2);
            break;
        case MP_TYPE_Q3_K:
            memcpy(w + off + 108, &scale, 2);
            break;
        }
    }
}

static volatile float g_sink; /* keeps the results alive */

/* best-of-reps seconds for one pass over all rows */
static double time_gemv(const mp_type_ops *ops, const uint8_t *w, size_t row_bytes, int64_t n_cols,
                        int64_t n_rows, const void *x, float *y, int reps)
{
    double best = 1e30;
    for (int r = 0; r < reps; r++) {
        const double t0 = now_s();
        mp_gemv_rows(ops, w, row_bytes, n_cols, 0, n_rows, x, y);
        const double dt = now_s() - t0;
        best = dt < best ? dt : best;
        g_sink += y[n_rows - 1];
    }
    return best;
}

static double time_gemm(const mp_type_ops *ops, const uint8_t *w, size_t row_bytes, int64_t n_cols,
                        int64_t n_rows, const void *x, size_t x_stride, int64_t n_x, float *y, int reps)
{
    double best = 1e30;
    for (int r = 0; r < reps; r++) {
        const double t0 = now_s();
        mp_gemm_rows(ops, w, row_bytes, n_cols, 0, n_rows, x, x_stride, n_x, y, n_rows);
        const double dt = now_s() - t0;
        best = dt < best ? dt : best;
        g_sink += y[n_rows - 1];
    }
    return best;
}

/* One type's weights (--mb of random blocks, rows of n_cols) and max_x random activation rows in its
 * vec_dot_type, with room for the outputs; 0, or 1 having said what it could not allocate. */
typedef struct bench_data {
    size_t row_bytes, x_stride;
    int64_t n_w; /* weight rows */
    uint8_t *w, *x;
    float *y;
} bench_data;

static int bench_data_make(bench_data *d, int type, long mb, int64_t n_cols, long max_x)
{
    const int vdt = mp_type_ops_scalar(type)->vec_dot_type;
    d->row_bytes = mp_type_row_bytes(type, n_cols);
    d->n_w = (int64_t)(((size_t)mb << 20) / d->row_bytes);
    d->x_stride = mp_type_row_bytes(vdt, n_cols);
    d->w = aligned_alloc(64, ((size_t)d->n_w * d->row_bytes + 63) / 64 * 64);
    d->x = aligned_alloc(64, ((size_t)max_x * d->x_stride + 63) / 64 * 64);
    d->y = malloc((size_t)d->n_w * (size_t)max_x * sizeof(float));
    float *xf = malloc((size_t)n_cols * sizeof(float));
    if (!d->w || !d->x || !d->y || !xf || d->n_w < 1) {
        fprintf(stderr, "bench_kernels: error: cannot allocate %ld MB of %s weights and %ld activation rows\n", mb,
                mp_type_name(type), max_x);
        free(xf);
        return 1;
    }
    fill_weights(type, d->w, (size_t)d->n_w * d->row_bytes);
    for (long i = 0; i < max_x; i++) {
        for (int64_t c = 0; c < n_cols; c++)
            xf[c] = (float)(rnd() % 2001) * 1e-3f - 1.0f;
        mp_quantize_activation(vdt, xf, d->x + (size_t)i * d->x_stride, n_cols);
    }
    free(xf);
    return 0;
}

static void bench_data_free(bench_data *d)
{
    free(d->w);
    free(d->x);
    free(d->y);
}

/* The prefill table (--gemm): per type and activation count, each SIMD level's G MAC/s. */
static int bench_gemm(const int *types, int n_types, long mb, long reps, const long *rows, int n_rows_list,
                      int64_t n_cols)
{
    long max_x = 0;
    for (int i = 0; i < n_rows_list; i++)
        max_x = rows[i] > max_x ? rows[i] : max_x;
    const char *levels[] = {"avx2", "avx512", "amx"};
    enum { N_LEVELS = 3, BASE = 1 };
    printf("bench_kernels --gemm: %ld MB of weights per type, n_cols %lld, alternated best of %ld, single thread, "
           "dispatched isa %s\n", mb, (long long)n_cols, reps, mp_kernels_isa());
    printf("%-5s %6s %6s %12s %12s %12s %9s\n", "type", "rows", "x rows", "avx2 GMAC/s", "avx512 GMAC/s", "amx GMAC/s",
           "amx/512");
    for (int t = 0; t < n_types; t++) {
        const int type = types[t];
        bench_data d;
        if (bench_data_make(&d, type, mb, n_cols, max_x))
            return 1;
        /* the tiles at every row count: the amx level's ops with its threshold set aside */
        const mp_type_ops *amx = mp_type_ops_isa(type, "amx");
        mp_type_ops tiles;
        if (amx && amx->gemm) {
            tiles = *amx;
            tiles.gemm_min_rows = 1;
        }
        bool won[16] = {false}; /* at rows[k], the tiles beat avx512 (the list holds at most 16) */
        for (int k = 0; k < n_rows_list; k++) {
            double best[N_LEVELS];
            for (int l = 0; l < N_LEVELS; l++)
                best[l] = 1e30;
            for (long r = 0; r < reps; r++)
                for (int l = 0; l < N_LEVELS; l++) {
                    const mp_type_ops *ops = l == 2 && amx && amx->gemm ? &tiles : mp_type_ops_isa(type, levels[l]);
                    if (!ops)
                        continue;
                    const double s = time_gemm(ops, d.w, d.row_bytes, n_cols, d.n_w, d.x, d.x_stride, rows[k], d.y, 1);
                    best[l] = s < best[l] ? s : best[l];
                }
            char col[N_LEVELS][16], ratio[16] = "-";
            const double macs = (double)d.n_w * (double)n_cols * (double)rows[k];
            for (int l = 0; l < N_LEVELS; l++)
                if (best[l] < 1e30)
                    snprintf(col[l], sizeof col[l], "%.2f", macs / best[l] * 1e-9);
                else
                    snprintf(col[l], sizeof col[l], "-");
            if (best[2] < 1e30 && best[BASE] < 1e30) {
                snprintf(ratio, sizeof ratio, "%.2fx", best[BASE] / best[2]);
                won[k] = best[2] < best[BASE];
            }
            printf("%-5s %6lld %6ld %12s %12s %12s %9s\n", mp_type_name(type), (long long)d.n_w, rows[k], col[0], col[1],
                   col[2], ratio);
            fflush(stdout);
        }
        if (amx && amx->gemm) {
            /* the fewest rows timed from which the tiles won there and at every larger count (0: none),
             * whatever the list's order */
            long ahead_from = 0;
            for (int k = 0; k < n_rows_list; k++) {
                bool all = won[k];
                for (int j = 0; all && j < n_rows_list; j++)
                    all = rows[j] < rows[k] || won[j];
                if (all && (!ahead_from || rows[k] < ahead_from))
                    ahead_from = rows[k];
            }
            if (ahead_from)
                printf("%s: the tiles ahead of avx512 from %ld rows of those timed (the table: from %d)\n",
                       mp_type_name(type), ahead_from, amx->gemm_min_rows);
            else
                printf("%s: the tiles behind avx512 at the most rows timed (the table: from %d)\n", mp_type_name(type),
                       amx->gemm_min_rows);
        }
        bench_data_free(&d);
    }
    return 0;
}

/* The prefetch table (--prefetch): per type, the dispatched GEMV's GB/s at each distance; with
 * rows (--gemm), per type and activation count, the dispatched GEMM's G MAC/s at each distance. */
static int bench_prefetch(const int *types, int n_types, long mb, long reps, const long *dist, int n_dist,
                          int64_t n_cols, const long *rows, int n_rows_list, const char *isa)
{
    for (int t = 0; isa && t < n_types; t++) /* refused before any output */
        if (!mp_type_ops_isa(types[t], isa)) {
            fprintf(stderr, "bench_kernels: error: --isa %s: this CPU has no such level for %s (its best: %s)\n", isa,
                    mp_type_name(types[t]), mp_kernels_isa());
            return 1;
        }
    const int64_t before = mp_kernels_prefetch_bytes();
    long max_x = 1;
    for (int i = 0; i < n_rows_list; i++)
        max_x = rows[i] > max_x ? rows[i] : max_x;
    printf("bench_kernels --prefetch: %ld MB of weights per type, n_cols %lld, alternated best of %ld, single "
           "thread, isa %s; %s at each distance in bytes (the first's ratio in brackets)\n", mb, (long long)n_cols,
           reps, isa ? isa : mp_kernels_isa(), n_rows_list ? "the GEMM's G MAC/s by activation rows" : "the GEMV's GB/s");
    printf("%-5s", "type");
    if (n_rows_list)
        printf(" %6s", "rows");
    for (int k = 0; k < n_dist; k++)
        printf(" %16ld", dist[k]);
    printf("\n");
    for (int t = 0; t < n_types; t++) {
        const int type = types[t];
        const mp_type_ops *ops = isa ? mp_type_ops_isa(type, isa) : mp_type_ops_get(type);
        bench_data d;
        if (bench_data_make(&d, type, mb, n_cols, max_x))
            return 1;
        for (int k = 0; k < (n_rows_list ? n_rows_list : 1); k++) {
            const int64_t n_x = n_rows_list ? rows[k] : 0; /* 0: the GEMV */
            double best[16];
            for (int j = 0; j < n_dist; j++)
                best[j] = 1e30;
            for (long r = 0; r < reps; r++)
                for (int j = 0; j < n_dist; j++) {
                    mp_kernels_set_prefetch_bytes(dist[j]);
                    const double s = n_x ? time_gemm(ops, d.w, d.row_bytes, n_cols, d.n_w, d.x, d.x_stride, n_x, d.y, 1)
                                         : time_gemv(ops, d.w, d.row_bytes, n_cols, d.n_w, d.x, d.y, 1);
                    best[j] = s < best[j] ? s : best[j];
                }
            printf("%-5s", mp_type_name(type));
            if (n_rows_list)
                printf(" %6lld", (long long)n_x);
            for (int j = 0; j < n_dist; j++) {
                char col[32];
                const double rate = n_x ? (double)d.n_w * (double)n_cols * (double)n_x / best[j] * 1e-9
                                        : (double)d.n_w * (double)d.row_bytes / best[j] * 1e-9;
                snprintf(col, sizeof col, "%.2f (%.2fx)", rate, best[0] / best[j]);
                printf(" %16s", col);
            }
            printf("\n");
            fflush(stdout);
        }
        bench_data_free(&d);
    }
    mp_kernels_set_prefetch_bytes(before);
    return 0;
}

/* a comma-separated list of whole numbers in [lo, hi] into v (at most 16); its count, or -1 */
static int number_list(const char *text, long lo, long hi, long *v)
{
    int n = 0;
    const char *p = text;
    while (*p) {
        char *end;
        if (n == 16)
            return -1;
        v[n] = strtol(p, &end, 10);
        if (end == p || v[n] < lo || v[n] > hi || (*end && *end != ','))
            return -1;
        n++;
        p = *end ? end + 1 : end;
    }
    return n > 0 ? n : -1;
}

static void usage(FILE *f)
{
    fprintf(f, "usage: bench_kernels [--mb N] [--reps N] [--type NAME]... [--no-scalar] [--gemm N,..] [--cols N]\n"
               "  --mb N      weight matrix size per type in MB (default 512; keep it above L3)\n"
               "  --reps N    passes per measurement, the best is reported (default 3)\n"
               "  --type T    only this weight type (repeatable): %s\n"
               "  --no-scalar skip the (slow) scalar reference column\n"
               "  --gemm N,.. the prefill GEMM with N activation rows (each of the list) per level, not the GEMV\n"
               "  --cols N    the weight rows' length, a multiple of 256 (default 2048 with --gemm, else 4096)\n"
               "  --prefetch B,..  the dispatched GEMV with its weights prefetched B bytes ahead (each of the list,\n"
               "              alternated; 0: none), not the table of levels; with --gemm, the dispatched GEMM\n"
               "  --isa L     --prefetch's level instead of the dispatched one: avx2, avx512 or amx\n"
               "Every kernel level this CPU has is timed side by side (scalar, avx2, avx512, amx).\n",
            mp_type_names());
}

int main(int argc, char **argv)
{
    long mb = 512, reps = 3, cols = 0; /* 0: each table's default */
    int types[24], n_types = 0, no_scalar = 0;
    long gemm_rows[16], prefetch[16];
    int n_gemm = 0, n_prefetch = 0;
    const char *isa = NULL; /* --prefetch's level; NULL: the dispatched one */
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(argv[i], "--no-scalar")) {
            no_scalar = 1;
        } else if (!strcmp(argv[i], "--gemm") && i + 1 < argc) {
            if ((n_gemm = number_list(argv[++i], 1, 4096, gemm_rows)) < 0) {
                fprintf(stderr, "bench_kernels: error: --gemm %s: expected at most 16 activation row counts 1..4096, "
                                "comma-separated\n", argv[i]);
                return 2;
            }
        } else if (!strcmp(argv[i], "--prefetch") && i + 1 < argc) {
            if ((n_prefetch = number_list(argv[++i], 0, MP_PREFETCH_BYTES_MAX, prefetch)) < 0) {
                fprintf(stderr, "bench_kernels: error: --prefetch %s: expected at most 16 distances 0..%d in bytes, "
                                "comma-separated\n", argv[i], MP_PREFETCH_BYTES_MAX);
                return 2;
            }
        } else if (!strcmp(argv[i], "--isa") && i + 1 < argc) {
            isa = argv[++i];
            if (strcmp(isa, "avx2") && strcmp(isa, "avx512") && strcmp(isa, "amx")) {
                fprintf(stderr, "bench_kernels: error: --isa %s: expected avx2, avx512 or amx\n", isa);
                return 2;
            }
        } else if (!strcmp(argv[i], "--cols") && i + 1 < argc) {
            char *end;
            cols = strtol(argv[++i], &end, 10);
            if (*end || cols < 256 || cols > 65536 || cols % 256) {
                fprintf(stderr, "bench_kernels: error: --cols %s: expected a multiple of 256 in 256..65536 (every "
                                "type's block divides it)\n", argv[i]);
                return 2;
            }
        } else if (!strcmp(argv[i], "--mb") && i + 1 < argc) {
            mb = strtol(argv[++i], NULL, 10);
        } else if (!strcmp(argv[i], "--reps") && i + 1 < argc) {
            reps = strtol(argv[++i], NULL, 10);
        } else if (!strcmp(argv[i], "--type") && i + 1 < argc && n_types < 24) {
            const int t = mp_type_from_name(argv[++i]);
            if (t < 0 || !mp_type_supported(t)) {
                fprintf(stderr, "bench_kernels: error: --type %s: expected one of %s\n", argv[i], mp_type_names());
                return 2;
            }
            types[n_types++] = t;
        } else {
            fprintf(stderr, "bench_kernels: error: unexpected argument '%s'\n", argv[i]);
            usage(stderr);
            return 2;
        }
    }
    if (mb < 1 || mb > 65536 || reps < 1 || reps > 1000) {
        fprintf(stderr, "bench_kernels: error: --mb must be 1..65536 and --reps 1..1000\n");
        return 2;
    }
    if (n_types == 0) {
        const int all[] = {MP_TYPE_F32,  MP_TYPE_F16,  MP_TYPE_BF16, MP_TYPE_Q8_0, MP_TYPE_Q5_1,
                           MP_TYPE_Q5_0, MP_TYPE_Q4_1, MP_TYPE_Q4_0, MP_TYPE_IQ4_NL, MP_TYPE_MXFP4,
                           MP_TYPE_Q6_K, MP_TYPE_Q5_K, MP_TYPE_Q4_K, MP_TYPE_IQ4_XS, MP_TYPE_Q3_K, MP_TYPE_Q2_K};
        for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
            types[n_types++] = all[i];
    }
    if (isa && !n_prefetch) {
        fprintf(stderr, "bench_kernels: error: --isa %s picks --prefetch's level: give --prefetch too (the other "
                        "tables time every level)\n", isa);
        return 2;
    }
    if (n_prefetch > 0) /* the GEMM's default width as --gemm's */
        return bench_prefetch(types, n_types, mb, reps, prefetch, n_prefetch, cols ? cols : n_gemm ? 2048 : 4096,
                              gemm_rows, n_gemm, isa);
    if (n_gemm > 0) /* default: a 30B-class expert's gate/up width */
        return bench_gemm(types, n_types, mb, reps, gemm_rows, n_gemm, cols ? cols : 2048);
    const int64_t n_cols = cols ? cols : 4096;
    /* the levels, narrowest first; a level the CPU lacks has no table and prints "-" */
    const char *levels[] = {"scalar", "avx2", "avx512"};
    enum { N_LEVELS = 3 };
    printf("bench_kernels: %ld MB of weights per type, n_cols %lld, best of %ld, single thread, dispatched isa %s\n",
           mb, (long long)n_cols, reps, mp_kernels_isa());
    printf("%-5s %8s %11s %11s %11s %8s %11s %11s\n", "type", "rows", "scalar GB/s", "avx2 GB/s",
           "avx512 GB/s", "512/avx2", "avx2 gemm4", "avx512 gemm4");
    for (int t = 0; t < n_types; t++) {
        const int type = types[t];
        bench_data d; /* 4 activation rows: the GEMV's first, and one tile */
        if (bench_data_make(&d, type, mb, n_cols, 4))
            return 1;
        const double bytes = (double)d.n_w * (double)d.row_bytes;
        double gemv_s[N_LEVELS] = {0}, gemm_s[N_LEVELS] = {0}; /* 0: not measured */
        for (int l = 0; l < N_LEVELS; l++) {
            const mp_type_ops *ops = mp_type_ops_isa(type, levels[l]);
            if (!ops || (l == 0 && no_scalar))
                continue;
            gemv_s[l] = time_gemv(ops, d.w, d.row_bytes, n_cols, d.n_w, d.x, d.y, (int)reps);
            if (l > 0)
                gemm_s[l] = time_gemm(ops, d.w, d.row_bytes, n_cols, d.n_w, d.x, d.x_stride, 4, d.y, (int)reps);
        }
        char col[N_LEVELS][2][16], ratio[16] = "-";
        for (int l = 0; l < N_LEVELS; l++)
            for (int k = 0; k < 2; k++) {
                const double sec = k == 0 ? gemv_s[l] : gemm_s[l];
                if (sec > 0)
                    snprintf(col[l][k], sizeof(col[l][k]), "%.2f", bytes / sec * 1e-9);
                else
                    snprintf(col[l][k], sizeof(col[l][k]), "-");
            }
        if (gemv_s[1] > 0 && gemv_s[2] > 0)
            snprintf(ratio, sizeof(ratio), "%.2fx", gemv_s[1] / gemv_s[2]);
        printf("%-5s %8lld %11s %11s %11s %8s %11s %11s\n", mp_type_name(type), (long long)d.n_w, col[0][0],
               col[1][0], col[2][0], ratio, col[1][1], col[2][1]);
        fflush(stdout);
        bench_data_free(&d);
    }
    return 0;
}
