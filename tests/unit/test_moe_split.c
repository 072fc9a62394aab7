/* tests/unit/test_moe_split.c — the hybrid runtime's CPU half (mp_moe_experts_cpu with a resident
 * mask), on the CPU alone so that CI checks it without a GPU.
 *
 * For random routes and a random resident set R, the partial over the routes NOT in R plus the
 * partial over the routes in R (the complement mask) equals the whole block within f32 summation
 * order (1e-5 relative to the row's largest |output|): every route is computed exactly once, by
 * exactly one side. Rows whose routes are all resident get exact zeros, and the count of computed
 * routes is the number of non-resident routes. The experts' weights can also come through a table of
 * slices (the GPU executor's host copy); a table of permuted experts must give the permuted block. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "mkmodel/mkmodel.h"
#include "runtime/model.h"
#include "runtime/moe.h"
#include "runtime/threadpool.h"
#include "tests/rng.h"

/* A fresh qwen3moe-shaped model of the mix in a temporary file (path: a "/tmp/..._XXXXXX"
 * template, filled in; the caller unlinks it). */
static mp_model *make_model(const char *mix, char *path)
{
    mp_mkmodel_config cfg;
    mp_error e;
    cr_assert_eq(mp_mkmodel_arch("qwen3moe", &cfg, &e), MP_OK);
    cr_assert_eq(mp_mkmodel_set_mix(&cfg, mix, &e), MP_OK, "%s", e.msg);
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
    mp_model *m = make_model(mix, path);
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
        cr_assert_gt(mx, 0.0);
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

/* The pipelined region (calls of up to 4 rows: gate/up and down in one region, each expert's down
 * units waiting for its hidden rows) against the two regions with a barrier: the same bits, for
 * every mix (F32 down activations need no conversion; the others convert once per expert), 1 to
 * 4 rows, a random resident mask, and pools of 2 and 5 threads (more threads than CI's cores, so
 * that down units do wait for gate/up units still running elsewhere). A down unit that read an
 * expert's hidden rows too early, or a conversion done twice or not at all, changes bits. */
static void pipelined_once(const char *mix, int threads)
{
    char path[] = "/tmp/mp_moe_pipe_XXXXXX";
    mp_model *m = make_model(mix, path);
    const int64_t D = m->hp.n_embd, E = m->hp.n_expert, K = m->hp.n_expert_used, R = 4;
    mp_pool *pool = mp_pool_new(threads, false);
    mp_moe_scratch *piped = mp_moe_scratch_new(&m->hp, R, threads, NULL);
    mp_moe_scratch *plain = mp_moe_scratch_new(&m->hp, R, threads, NULL);
    cr_assert(pool && piped && plain);
    mp_moe_scratch_set_pipelined(piped, true);
    mp_moe_scratch_set_pipelined(plain, false);
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
        const uint64_t *mask = rep % 2 ? res : NULL;
        const int64_t na = mp_moe_experts_cpu(m, 1, x, n_rows, ids, w, mask, NULL, NULL, a, pool, piped);
        const int64_t nb = mp_moe_experts_cpu(m, 1, x, n_rows, ids, w, mask, NULL, NULL, b, pool, plain);
        cr_assert_eq(na, nb);
        cr_assert_gt(na, 0);
        bool nonzero = false;
        for (int64_t i = 0; i < n_rows * D; i++) {
            cr_assert_eq(memcmp(&a[i], &b[i], sizeof(float)), 0,
                         "seed %llu: %s, %d threads, %ld rows: elem %ld: %a pipelined, %a in two regions",
                         (unsigned long long)g_seed, mix, threads, (long)n_rows, (long)i, a[i], b[i]);
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
    mp_moe_scratch_free(piped);
    mp_moe_scratch_free(plain);
    mp_pool_free(pool);
    mp_model_free(m);
    unlink(path);
}

Test(moe_split, pipelined_region_gives_the_two_regions_bits)
{
    seed_rng();
    const char *mixes[] = {"f32", "q4_k_m", "q8_0", "bf16"};
    for (int i = 0; i < 4; i++) {
        pipelined_once(mixes[i], 2);
        pipelined_once(mixes[i], 5);
    }
}
