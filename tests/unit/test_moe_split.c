/* tests/unit/test_moe_split.c — the hybrid runtime's CPU half (mp_moe_experts_cpu with a resident
 * mask), on the CPU alone so that CI checks it without a GPU.
 *
 * For random routes and a random resident set R, the partial over the routes NOT in R plus the
 * partial over the routes in R (the complement mask) equals the whole block within f32 summation
 * order (1e-5 relative to the row's largest |output|): every route is computed exactly once, by
 * exactly one side. Rows whose routes are all resident get exact zeros, and the count of computed
 * routes is the number of non-resident routes. The experts' weights can also come through a table of
 * slices (the GPU executor's host copy); a table of permuted experts must give the permuted block.
 * A route computed in part (mp_moe_part: its expert's FFN rows below ff_rows, the GPU adding the
 * rest) plus a scalar reference of the rows past ff_rows gives the whole block, in both the
 * pipelined and the two-region form. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/knobs.h"
#include "kernels/quant.h"
#include "mkmodel/mkmodel.h"
#include "runtime/decide.h"
#include "runtime/model.h"
#include "runtime/moe.h"
#include "runtime/threadpool.h"
#include "tests/rng.h"

/* A fresh qwen3moe-shaped model of the mix in a temporary file (path: a "/tmp/..._XXXXXX"
 * template, filled in; the caller unlinks it). n_ff_exp 0: the arch's small default (256). */
static mp_model *make_model(const char *mix, int64_t n_ff_exp, char *path)
{
    mp_mkmodel_config cfg;
    mp_error e;
    cr_assert_eq(mp_mkmodel_arch("qwen3moe", &cfg, &e), MP_OK);
    cr_assert_eq(mp_mkmodel_set_mix(&cfg, mix, &e), MP_OK, "%s", e.msg);
    if (n_ff_exp)
        cfg.n_ff_exp = n_ff_exp;
    cfg.seed = g_seed;
    cfg.n_threads = 2;
    int fd = mkstemp(path);
    cr_assert(fd >= 0);
    close(fd);
    cr_assert_eq(mp_mkmodel_write(&cfg, path, true, NULL, NULL, &e), MP_OK, "%s", e.msg);
    mp_model *m;
    cr_assert_eq(mp_model_load(path, &m, &e), MP_OK, "%s", e.msg);
    return m;
}

/* Random rows in [-1, 1), and for each row K distinct random experts of E with weights in
 * [0.05, 1.05). */
static void random_inputs(int64_t n_rows, int64_t D, int64_t E, int64_t K, float *x, int32_t *ids, float *w)
{
    for (int64_t i = 0; i < n_rows * D; i++)
        x[i] = (float)((double)(rnd_u64() >> 11) * 0x1p-53 * 2.0 - 1.0);
    for (int64_t r = 0; r < n_rows; r++)
        for (int64_t k = 0; k < K; k++) {
            int32_t id;
            bool dup;
            do {
                id = (int32_t)(rnd_u64() % (uint64_t)E);
                dup = false;
                for (int64_t j = 0; j < k; j++)
                    dup |= ids[r * K + j] == id;
            } while (dup);
            ids[r * K + k] = id;
            w[r * K + k] = 0.05f + (float)(rnd_u64() % 1000) / 1000.0f;
        }
}

static void split_once(const char *mix, int64_t n_rows)
{
    char path[] = "/tmp/mp_moe_split_XXXXXX";
    mp_model *m = make_model(mix, 0, path);
    const int64_t D = m->hp.n_embd, E = m->hp.n_expert, K = m->hp.n_expert_used;
    mp_pool *pool = mp_pool_new(2, false);
    mp_moe_scratch *sc = mp_moe_scratch_new(&m->hp, n_rows, 2, NULL);
    float *x = malloc(sizeof(float) * (size_t)(n_rows * D));
    float *whole = malloc(sizeof(float) * (size_t)(n_rows * D));
    float *a = malloc(sizeof(float) * (size_t)(n_rows * D)), *b = malloc(sizeof(float) * (size_t)(n_rows * D));
    int32_t *ids = malloc(sizeof(int32_t) * (size_t)(n_rows * K));
    float *w = malloc(sizeof(float) * (size_t)(n_rows * K));
    random_inputs(n_rows, D, E, K, x, ids, w);
    uint64_t res[16] = {0}, comp[16] = {0};
    for (int64_t e2 = 0; e2 < E; e2++) {
        if (rnd_u64() & 1)
            res[e2 >> 6] |= (uint64_t)1 << (e2 & 63);
        else
            comp[e2 >> 6] |= (uint64_t)1 << (e2 & 63);
    }
    /* row 0 routed only to resident experts (if there are K of them): its CPU partial is zero */
    int64_t n_res = 0;
    for (int64_t e2 = 0; e2 < E && n_res < K; e2++)
        if ((res[e2 >> 6] >> (e2 & 63)) & 1)
            ids[n_res++] = (int32_t)e2;
    const bool row0_resident = n_res == K;
    int64_t expect_a = 0;
    for (int64_t i = 0; i < n_rows * K; i++)
        expect_a += !((res[ids[i] >> 6] >> (ids[i] & 63)) & 1);
    cr_assert_eq(mp_moe_experts_cpu(m, 1, x, n_rows, ids, w, NULL, NULL, NULL, whole, pool, sc), n_rows * K);
    cr_assert_eq(mp_moe_experts_cpu(m, 1, x, n_rows, ids, w, res, NULL, NULL, a, pool, sc), expect_a);
    cr_assert_eq(mp_moe_experts_cpu(m, 1, x, n_rows, ids, w, comp, NULL, NULL, b, pool, sc), n_rows * K - expect_a);
    for (int64_t r = 0; r < n_rows; r++) {
        double mx = 0;
        for (int64_t d = 0; d < D; d++)
            mx = fmax(mx, fabs(whole[r * D + d]));
        cr_assert(mx > 0.0, "seed %llu: %s rows %ld: row %ld of the whole block is zero", (unsigned long long)g_seed,
                  mix, (long)n_rows, (long)r);
        for (int64_t d = 0; d < D; d++) {
            const double sum = (double)a[r * D + d] + (double)b[r * D + d];
            cr_assert(fabs(sum - whole[r * D + d]) <= 1e-5 * mx,
                      "seed %llu: %s rows %ld: row %ld elem %ld: %g + %g vs whole %g",
                      (unsigned long long)g_seed, mix, (long)n_rows, (long)r, (long)d, a[r * D + d],
                      b[r * D + d], whole[r * D + d]);
            if (r == 0 && row0_resident)
                cr_assert_eq(a[d], 0.0f, "seed %llu: an all-resident row must get zeros", (unsigned long long)g_seed);
        }
    }
    /* the weights through a slice table (the GPU executor's host copy): slices of expert e hold
     * a copy of expert perm[e], so the block over ids must equal the block over perm[ids] read
     * from the model, bit for bit (a table that is not read gives the unpermuted block) */
    int32_t perm[1024];
    cr_assert_leq(E, 1024);
    for (int64_t e2 = 0; e2 < E; e2++)
        perm[e2] = (int32_t)e2;
    for (int64_t e2 = E - 1; e2 > 0; e2--) {
        const int64_t j = (int64_t)(rnd_u64() % (uint64_t)(e2 + 1));
        const int32_t tmp = perm[e2];
        perm[e2] = perm[j], perm[j] = tmp;
    }
    const mp_layer *L = &m->layers[1];
    const mp_tensor *ts[3] = {&L->gate_exps, &L->up_exps, &L->down_exps};
    size_t per[3], total = 0;
    for (int t = 0; t < 3; t++)
        total += (size_t)E * (per[t] = (ts[t]->row_bytes * (size_t)ts[t]->ne[1] + 63) & ~(size_t)63);
    char *copy = aligned_alloc(64, total);
    const void **slices = malloc(sizeof(void *) * (size_t)(3 * E));
    cr_assert(copy && slices);
    char *p = copy;
    for (int64_t e2 = E - 1; e2 >= 0; e2--) /* laid out in reverse, as a copy of some experts is */
        for (int t = 0; t < 3; t++) {
            memcpy(p, mp_expert_slice(ts[t], perm[e2]), ts[t]->row_bytes * (size_t)ts[t]->ne[1]);
            slices[t * E + e2] = p;
            p += per[t];
        }
    int32_t *pids = malloc(sizeof(int32_t) * (size_t)(n_rows * K));
    cr_assert(pids);
    for (int64_t i = 0; i < n_rows * K; i++)
        pids[i] = perm[ids[i]];
    cr_assert_eq(mp_moe_experts_cpu(m, 1, x, n_rows, ids, w, NULL, (const void *const *)slices, NULL, a, pool, sc),
                 n_rows * K);
    cr_assert_eq(mp_moe_experts_cpu(m, 1, x, n_rows, pids, w, NULL, NULL, NULL, b, pool, sc), n_rows * K);
    bool differs = false;
    for (int64_t i = 0; i < n_rows * D; i++) {
        cr_assert_eq(memcmp(&a[i], &b[i], sizeof(float)), 0, "seed %llu: %s rows %ld: elem %ld: %g through "
                     "the slice table, %g from the model", (unsigned long long)g_seed, mix, (long)n_rows,
                     (long)i, a[i], b[i]);
        differs |= a[i] != whole[i];
    }
    cr_assert(differs, "seed %llu: the permuted experts gave the unpermuted block", (unsigned long long)g_seed);
    free(copy), free(slices), free(pids);
    free(x), free(whole), free(a), free(b), free(ids), free(w);
    mp_moe_scratch_free(sc);
    mp_pool_free(pool);
    mp_model_free(m);
    unlink(path);
}

Test(moe_split, cpu_partials_add_up_to_the_whole_block)
{
    seed_rng();
    split_once("f32", 1);
    split_once("f32", 7);
    split_once("q4_k_m", 1);
    split_once("q4_k_m", 9);
    split_once("q8_0", 5);
}

typedef struct two_forms {
    mp_pool *pool;
    mp_moe_scratch *piped, *plain;
} two_forms;

/* A pool of `threads` threads and two scratches for calls of up to `rows` rows: one runs a call's
 * experts in one pipelined region (made under piped_knobs; NULL: the defaults), the other in two
 * regions. */
static two_forms two_forms_knobs(const mp_model *m, int64_t rows, int threads, const mp_knobs *piped_knobs)
{
    two_forms f = {mp_pool_new(threads, false), mp_moe_scratch_new(&m->hp, rows, threads, piped_knobs),
                   mp_moe_scratch_new(&m->hp, rows, threads, NULL)};
    cr_assert(f.pool && f.piped && f.plain);
    mp_moe_scratch_set_pipelined(f.piped, true);
    mp_moe_scratch_set_pipelined(f.plain, false);
    return f;
}

static void two_forms_free(two_forms *f)
{
    mp_moe_scratch_free(f->piped);
    mp_moe_scratch_free(f->plain);
    mp_pool_free(f->pool);
}

/* The pipelined region (calls of up to 4 rows: gate/up and down in one region, each expert's down
 * units waiting for its hidden rows) against the two regions with a barrier: the same bits, for
 * every mix (F32 down activations need no conversion; the others convert once per expert), 1 to
 * 4 rows, a random resident mask, and pools of 2 and 5 threads (more threads than CI's cores, so
 * that down units do wait for gate/up units still running elsewhere). A down unit that read an
 * expert's hidden rows too early, or a conversion done twice or not at all, changes bits. */
static void pipelined_once(const char *mix, int threads, int64_t unit_kb, int64_t unit_max_kb)
{
    char path[] = "/tmp/mp_moe_pipe_XXXXXX";
    mp_model *m = make_model(mix, 0, path);
    const int64_t D = m->hp.n_embd, E = m->hp.n_expert, K = m->hp.n_expert_used, R = 4;
    mp_knobs kn;
    mp_knobs_defaults(&kn);
    kn.moe_unit_kb = unit_kb;
    kn.moe_unit_max_kb = unit_max_kb;
    two_forms f = two_forms_knobs(m, R, threads, &kn);
    mp_pool *pool = f.pool;
    mp_moe_scratch *piped = f.piped, *plain = f.plain;
    const bool profiled = threads > 2; /* profiling must not change a bit either */
    cr_assert(!profiled || mp_moe_scratch_profile(piped, true));
    float *x = malloc(sizeof(float) * (size_t)(R * D));
    float *a = malloc(sizeof(float) * (size_t)(R * D)), *b = malloc(sizeof(float) * (size_t)(R * D));
    int32_t *ids = malloc(sizeof(int32_t) * (size_t)(R * K));
    float *w = malloc(sizeof(float) * (size_t)(R * K));
    cr_assert(x && a && b && ids && w);
    for (int rep = 0; rep < 6; rep++) {
        const int64_t n_rows = 1 + rep % R;
        random_inputs(n_rows, D, E, K, x, ids, w);
        uint64_t res[16] = {0};
        for (int64_t e2 = 0; e2 < E; e2++)
            if (rnd_u64() % 4 == 0) /* a quarter resident: most routes still run here */
                res[e2 >> 6] |= (uint64_t)1 << (e2 & 63);
        res[ids[0] >> 6] &= ~((uint64_t)1 << (ids[0] & 63)); /* at least one route runs here */
        const uint64_t *mask = rep % 2 ? res : NULL;
        const int64_t na = mp_moe_experts_cpu(m, 1, x, n_rows, ids, w, mask, NULL, NULL, a, pool, piped);
        const int64_t nb = mp_moe_experts_cpu(m, 1, x, n_rows, ids, w, mask, NULL, NULL, b, pool, plain);
        cr_assert_eq(na, nb);
        cr_assert_gt(na, 0);
        bool nonzero = false;
        for (int64_t i = 0; i < n_rows * D; i++) {
            cr_assert_eq(memcmp(&a[i], &b[i], sizeof(float)), 0,
                         "seed %llu: %s, %d threads, units of %ld KiB, %ld rows: elem %ld: %a pipelined, %a "
                         "in two regions", (unsigned long long)g_seed, mix, threads, (long)unit_kb, (long)n_rows,
                         (long)i, a[i], b[i]);
            nonzero |= a[i] != 0.0f;
        }
        cr_assert(nonzero, "seed %llu: %s: the block is all zeros", (unsigned long long)g_seed, mix);
    }
    if (profiled) {
        /* every call counted; each thread slot's parts are disjoint spans of its region */
        mp_moe_cpu_profile p;
        mp_moe_scratch_profile_get(piped, &p);
        cr_assert_eq(p.calls, 6);
        cr_assert_eq(p.slot_ns, (int64_t)threads * p.region_ns);
        cr_assert(p.region_ns > 0 && p.region_ns <= p.wall_ns);
        cr_assert(p.first_start_ns >= 0 && p.first_start_ns <= p.last_start_ns);
        const int64_t parts[] = {p.late_ns, p.gate_up_ns, p.down_ns, p.ready_wait_ns, p.tail_ns};
        int64_t sum = 0;
        for (int i = 0; i < 5; i++) {
            cr_assert_geq(parts[i], 0, "part %d", i);
            sum += parts[i];
        }
        cr_assert_leq(sum, p.slot_ns);
        cr_assert_gt(p.gate_up_ns + p.down_ns, 0);
    }
    free(x), free(a), free(b), free(ids), free(w);
    two_forms_free(&f);
    mp_model_free(m);
    unlink(path);
}

Test(moe_split, pipelined_region_gives_the_two_regions_bits)
{
    seed_rng();
    const char *mixes[] = {"f32", "q4_k_m", "q8_0", "bf16"};
    for (int i = 0; i < 4; i++) {
        /* a unit floor of bytes (MP_MOE_UNIT_KB) cuts the halves in fewer, longer units: from
         * 16-row units (0) up to one unit a whole expert */
        pipelined_once(mixes[i], 2, 0, MP_KNOB_MOE_UNIT_MAX_KB);
        pipelined_once(mixes[i], 5, 0, 1); /* every unit at the 16-row floor */
        pipelined_once(mixes[i], 5, 1 + (int64_t)(rnd_u64() % 64), 0);
        pipelined_once(mixes[i], 3, 16384, 1); /* the floor of bytes wins where the two meet */
    }
}

/* ---- a route computed in part (mp_moe_part) ---- */

/* Expert e's FFN rows [lo, hi) of layer 1 on one row x (n_embd), from the scalar reference kernels
 * alone: h[j] = silu(gate_j · x) · (up_j · x) for lo <= j < hi and 0 elsewhere, converted to the
 * down activation type as one row of n_ff, then out (n_embd) = down · h over all n_ff columns.
 * With lo and hi multiples of the activation block, the zeros fill whole blocks: each side of a
 * split gets the dot products of its own blocks. */
static void expert_rows_ref(const mp_model *m, int32_t e, int64_t lo, int64_t hi, const float *x, float *out)
{
    const mp_layer *L = &m->layers[1];
    const int64_t D = m->hp.n_embd, F = m->hp.n_ff_exp;
    const mp_type_ops *gate = mp_type_ops_scalar(L->gate_exps.type), *up = mp_type_ops_scalar(L->up_exps.type);
    const mp_type_ops *down = mp_type_ops_scalar(L->down_exps.type);
    char *xg = malloc(sizeof(float) * (size_t)D), *xu = malloc(sizeof(float) * (size_t)D);
    char *hq = malloc(sizeof(float) * (size_t)F); /* F32 is the widest activation row */
    float *h = calloc((size_t)F, sizeof(float));
    cr_assert(gate && up && down && xg && xu && hq && h);
    cr_assert_eq(mp_quantize_activation(gate->vec_dot_type, x, xg, D), 0);
    cr_assert_eq(mp_quantize_activation(up->vec_dot_type, x, xu, D), 0);
    const char *wg = mp_expert_slice(&L->gate_exps, e), *wu = mp_expert_slice(&L->up_exps, e);
    const char *wd = mp_expert_slice(&L->down_exps, e);
    for (int64_t j = lo; j < hi; j++) {
        const float g = gate->vec_dot(D, wg + (size_t)j * L->gate_exps.row_bytes, xg);
        const float u = up->vec_dot(D, wu + (size_t)j * L->up_exps.row_bytes, xu);
        h[j] = g / (1.0f + expf(-g)) * u;
    }
    cr_assert_eq(mp_quantize_activation(down->vec_dot_type, h, hq, F), 0);
    for (int64_t d = 0; d < D; d++)
        out[d] = down->vec_dot(F, wd + (size_t)d * L->down_exps.row_bytes, hq);
    free(xg), free(xu), free(hq), free(h);
}

/* The FFN rows a split of layer 1's experts is cut at a multiple of: the down tensor's block and
 * its activation block (powers of two: the larger). */
static bool same_bits(const float *a, const float *b, int64_t n)
{
    return memcmp(a, b, (size_t)n * sizeof(float)) == 0;
}

/* A part (a random routed expert, ff_rows a random multiple of the granule below n_ff) on 1 to 4
 * rows, with and without a random resident mask, pipelined and in two regions:
 *  - the two forms give the same bits with the part, and count the same routes as without it;
 *  - a row that routes to the part's expert (weight w) gives the whole block's row once w times
 *    the reference of the expert's rows [ff_rows, n_ff) is added; the part's expert alone (every
 *    other expert resident) gives w times the reference of its rows [0, ff_rows);
 *  - rows that do not route to it get the whole block's bits, and with the part's expert resident
 *    the part changes no bit at all.
 * tol bounds each element's miss relative to the row's largest |output|: the reference's scalar
 * sums and SwiGLU against the SIMD kernels, and with quantized activations a hidden value that
 * rounds to the neighbouring quant (one such is about 1e-3 of the row). The misses' norm must also
 * be a small share of the change the reference measures, which a part that computed the wrong
 * rows cannot meet. */
static void part_once(const mp_model *m, const char *mix, int threads, double tol, int64_t unit_kb,
                      int64_t unit_max_kb)
{
    const int64_t D = m->hp.n_embd, F = m->hp.n_ff_exp, E = m->hp.n_expert, K = m->hp.n_expert_used;
    enum { R = 4 }; /* rows at most: the pipelined form's */
    const int64_t granule = mp_decide_split_granule(m->layers[1].down_exps.type);
    cr_assert_geq(F / granule, 2, "%s: n_ff %ld is one block of %ld: no split", mix, (long)F, (long)granule);
    cr_assert_leq(E, 1024);
    mp_knobs kn; /* the part's units under a unit floor of bytes (MP_MOE_UNIT_KB) or of 16 rows (0) */
    mp_knobs_defaults(&kn);
    kn.moe_unit_kb = unit_kb;
    kn.moe_unit_max_kb = unit_max_kb;
    two_forms f = two_forms_knobs(m, R, threads, &kn);
    mp_pool *pool = f.pool;
    mp_moe_scratch *piped = f.piped, *plain = f.plain;
    const size_t out_bytes = sizeof(float) * (size_t)(R * D);
    float *x = malloc(out_bytes), *whole = malloc(out_bytes), *part = malloc(out_bytes), *part2 = malloc(out_bytes);
    float *masked = malloc(out_bytes), *masked_part = malloc(out_bytes), *alone = malloc(out_bytes);
    float *rest = malloc(sizeof(float) * (size_t)D), *head = malloc(sizeof(float) * (size_t)D);
    int32_t *ids = malloc(sizeof(int32_t) * (size_t)(R * K));
    float *w = malloc(sizeof(float) * (size_t)(R * K));
    cr_assert(x && whole && part && part2 && masked && masked_part && alone && rest && head && ids && w);
    for (int rep = 0; rep < 8; rep++) {
        const int64_t n_rows = 1 + rep % R;
        random_inputs(n_rows, D, E, K, x, ids, w);
        /* the split route weighs 2 (the others 0.05 to 1.05): the expert under test leads its row */
        const int64_t split_route = (int64_t)(rnd_u64() % (uint64_t)(n_rows * K));
        const mp_moe_part pt = {.expert = ids[split_route],
                                .ff_rows = granule * (int64_t)(1 + rnd_u64() % (uint64_t)(F / granule - 1))};
        w[split_route] = 2.0f;
        const int32_t e = pt.expert;
        /* res: a quarter of the others resident (odd reps); with_e: res and the part's expert;
         * only_e: every expert but the part's */
        uint64_t res[16] = {0}, with_e[16], only_e[16] = {0};
        for (int64_t e2 = 0; e2 < E; e2++) {
            if (rep % 2 && e2 != e && rnd_u64() % 4 == 0)
                res[e2 >> 6] |= (uint64_t)1 << (e2 & 63);
            if (e2 != e)
                only_e[e2 >> 6] |= (uint64_t)1 << (e2 & 63);
        }
        memcpy(with_e, res, sizeof res);
        with_e[e >> 6] |= (uint64_t)1 << (e & 63);
        char ctx[160];
        snprintf(ctx, sizeof ctx, "seed %llu: %s, %d threads, %ld rows, expert %d, ff_rows %ld",
                 (unsigned long long)g_seed, mix, threads, (long)n_rows, (int)e, (long)pt.ff_rows);
        const int64_t n_whole = mp_moe_experts_cpu(m, 1, x, n_rows, ids, w, res, NULL, NULL, whole, pool, piped);
        cr_assert_eq(mp_moe_experts_cpu(m, 1, x, n_rows, ids, w, res, NULL, &pt, part, pool, piped), n_whole);
        cr_assert_eq(mp_moe_experts_cpu(m, 1, x, n_rows, ids, w, res, NULL, &pt, part2, pool, plain), n_whole);
        cr_assert(same_bits(part, part2, n_rows * D), "%s: pipelined and two regions differ", ctx);
        /* the same part with its expert's down laid out by unit (mp_moe_part.down_units): ends at
         * random block multiples up to ff_rows, and one unit past it that the part must not read */
        {
            const mp_tensor *dt = &m->layers[1].down_exps;
            int64_t ends[4];
            int nu = 0;
            for (int64_t c = granule; c < pt.ff_rows && nu < 2; c += granule)
                if (rnd_u64() % 3 == 0)
                    ends[nu++] = c;
            ends[nu++] = pt.ff_rows;
            ends[nu++] = F;
            char *units = malloc(dt->row_bytes * (size_t)D), *u = units;
            cr_assert_not_null(units);
            const char *src = mp_expert_slice(dt, e);
            for (int k = 0, c0 = 0; k < nu; c0 = (int)ends[k++]) {
                const size_t rb = mp_type_row_bytes(dt->type, ends[k] - c0), off = mp_type_row_bytes(dt->type, c0);
                for (int64_t r = 0; r < D; r++, u += rb)
                    memcpy(u, src + (size_t)r * dt->row_bytes + off, rb);
            }
            const mp_moe_part pu = {pt.expert, pt.ff_rows, units, ends, nu};
            cr_assert_eq(mp_moe_experts_cpu(m, 1, x, n_rows, ids, w, res, NULL, &pu, masked, pool, piped), n_whole);
            cr_assert_eq(mp_moe_experts_cpu(m, 1, x, n_rows, ids, w, res, NULL, &pu, masked_part, pool, plain), n_whole);
            cr_assert(same_bits(masked, masked_part, n_rows * D), "%s: by unit, pipelined and two regions differ", ctx);
            double mx = 0;
            for (int64_t d = 0; d < n_rows * D; d++)
                mx = fmax(mx, fabs(part[d]));
            for (int64_t d = 0; d < n_rows * D; d++) /* the same products summed unit by unit */
                cr_assert(fabs((double)masked[d] - part[d]) <= 1e-5 * mx, "%s, %d units: elem %ld: %g by unit, %g "
                          "from the row segments", ctx, nu - 1, (long)d, masked[d], part[d]);
            free(units);
        }
        const int64_t n_masked = mp_moe_experts_cpu(m, 1, x, n_rows, ids, w, with_e, NULL, NULL, masked, pool, piped);
        cr_assert_eq(mp_moe_experts_cpu(m, 1, x, n_rows, ids, w, with_e, NULL, &pt, masked_part, pool, plain),
                     n_masked);
        cr_assert(same_bits(masked, masked_part, n_rows * D), "%s: a resident part's expert changed bits", ctx);
        int64_t slot_of[R], n_e = 0; /* (R) the part's expert's slot in each row, -1: none */
        for (int64_t row = 0; row < n_rows; row++) {
            slot_of[row] = -1;
            for (int64_t k = 0; k < K; k++)
                slot_of[row] = ids[row * K + k] == e ? k : slot_of[row];
            n_e += slot_of[row] >= 0;
        }
        cr_assert_eq(n_masked, n_whole - n_e);
        cr_assert_eq(mp_moe_experts_cpu(m, 1, x, n_rows, ids, w, only_e, NULL, &pt, alone, pool, piped), n_e);
        for (int64_t row = 0; row < n_rows; row++) {
            const float *wr = whole + row * D, *pr = part + row * D, *ar = alone + row * D;
            if (slot_of[row] < 0) {
                cr_assert(same_bits(pr, wr, D), "%s: row %ld without the part's expert changed", ctx, (long)row);
                cr_assert(same_bits(masked + row * D, wr, D), "%s: row %ld", ctx, (long)row);
                continue;
            }
            const float wk = w[row * K + slot_of[row]];
            expert_rows_ref(m, e, pt.ff_rows, F, x + row * D, rest);
            expert_rows_ref(m, e, 0, pt.ff_rows, x + row * D, head);
            double mx = 0;
            for (int64_t d = 0; d < D; d++)
                mx = fmax(mx, fabs(wr[d]));
            cr_assert_gt(mx, 0.0);
            /* squared norms: of the two checks' misses, of the part's change, of the part alone */
            double miss_sq = 0, miss_alone_sq = 0, change_sq = 0, head_sq = 0;
            for (int64_t d = 0; d < D; d++) {
                const double miss = (double)pr[d] + (double)wk * rest[d] - wr[d];
                const double miss_alone = (double)ar[d] - (double)wk * head[d];
                cr_assert(fabs(miss) <= tol * mx, "%s: row %ld elem %ld: %g + %g * %g (rows past ff_rows) "
                          "vs whole %g", ctx, (long)row, (long)d, pr[d], wk, rest[d], wr[d]);
                cr_assert(fabs(miss_alone) <= tol * mx, "%s: row %ld elem %ld: the part alone %g vs %g * %g "
                          "(rows below ff_rows)", ctx, (long)row, (long)d, ar[d], wk, head[d]);
                miss_sq += miss * miss;
                miss_alone_sq += miss_alone * miss_alone;
                change_sq += ((double)pr[d] - wr[d]) * ((double)pr[d] - wr[d]);
                head_sq += (double)wk * head[d] * (double)wk * head[d];
            }
            /* the misses are a small share of what they measure (at most 0.003 in 3,300 rows of
             * each type; a part that gave the whole expert, or a block too many or too few, misses
             * by 0.1 to 1) */
            cr_assert(change_sq > 0 && miss_sq <= 0.05 * 0.05 * change_sq, "%s: row %ld: the part changed the "
                      "row by %g, the reference by %g", ctx, (long)row, sqrt(change_sq), sqrt(miss_sq));
            cr_assert(head_sq > 0 && miss_alone_sq <= 0.05 * 0.05 * head_sq, "%s: row %ld: the part alone misses "
                      "the reference by %g of %g", ctx, (long)row, sqrt(miss_alone_sq), sqrt(head_sq));
        }
    }
    free(x), free(whole), free(part), free(part2), free(masked), free(masked_part), free(alone);
    free(rest), free(head), free(ids), free(w);
    two_forms_free(&f);
}

Test(moe_split, a_part_computes_the_rows_below_ff_rows)
{
    seed_rng();
    /* n_ff 768: three blocks of 256, so that the K-quants (Q6_K down, Q8_K activations) split */
    const char *mixes[] = {"f32", "bf16", "q8_0", "q4_k_m"};
    const double tols[] = {2e-5, 2e-5, 5e-3, 5e-3};
    for (int i = 0; i < 4; i++) {
        char path[] = "/tmp/mp_moe_part_XXXXXX";
        mp_model *m = make_model(mixes[i], 768, path);
        part_once(m, mixes[i], 2, tols[i], 0, 1);
        part_once(m, mixes[i], 5, tols[i], 64, 0);
        mp_model_free(m);
        unlink(path);
    }
}
