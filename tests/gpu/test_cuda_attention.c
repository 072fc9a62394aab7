/* tests/gpu/test_cuda_attention.c — causal GQA attention over an F16 cache (split-K for small
 * steps, query-row tiles for larger ones) against the CPU's algorithm (runtime/attention.c:
 * mp_dot_f32 scores · 1/sqrt(hd), mp_softmax, mp_axpy) run on the same cache values widened to f32.
 *
 * Tolerance: the output is a convex combination of value rows, so an error δ in the softmax
 * weights moves it by at most Σ|δ_t| · max|v|. Scores differ by f32 summation order
 * (hd · 2^-24 · Σ|q k| ≈ 1e-5 for unit-variance data and hd = 128), the weights by fast-math
 * expf (a few ulp) and by the rescaling of split-K's chunks or of the tiles' running max
 * (exp(m_c - M), a few ulp each): together well under
 *   |gpu - cpu| <= 1e-4 · max_t |v_t|   per element.
 * A wrong key range (causality, chunk bounds) or kv-head mapping moves outputs by ~0.1 · max|v|. */
#include "mp_config.h"
#if MP_HAVE_CUDA && !defined(MP_NO_CUDA)
#include <stdbool.h>
#include <stdio.h>

#include "kernels/cuda/cuda_ops.h"
#include "kernels/ops.h"
#include "tests/gpu/gpu_util.h"

static void check_against(const float *got, const float *ref, float vmax, const char *what, int64_t n_rows,
                          int64_t pos0, int64_t n_head, int64_t n_head_kv, int64_t hd)
{
    for (int64_t r = 0; r < n_rows; r++)
        for (int64_t h = 0; h < n_head; h++)
            for (int64_t d = 0; d < hd; d++) {
                const int64_t i = (r * n_head + h) * hd + d;
                if (!isfinite(ref[i])) { /* the row's keys include a non-finite value */
                    cr_assert(!isfinite(got[i]), "seed %llu: %s row %ld head %ld dim %ld: gpu %.9g, cpu %.9g",
                              (unsigned long long)g_seed, what, (long)r, (long)h, (long)d, got[i], ref[i]);
                    continue;
                }
                cr_assert(fabsf(got[i] - ref[i]) <= 1e-4f * vmax,
                          "seed %llu: %s rows %ld pos0 %ld heads %ld/%ld hd %ld: row %ld head %ld dim %ld: "
                          "gpu %.9g, cpu %.9g", (unsigned long long)g_seed, what, (long)n_rows, (long)pos0,
                          (long)n_head, (long)n_head_kv, (long)hd, (long)r, (long)h, (long)d, got[i], ref[i]);
            }
}

/* inf_key >= 0: that key's value rows hold +inf (an F16 overflow): the rows that reach it are
 * non-finite on both sides, and every earlier row must come out exact, whichever tile it shares */
static void check_attention_with(int64_t n_rows, int64_t pos0, int64_t n_head, int64_t n_head_kv,
                                 int64_t hd, int64_t inf_key)
{
    const int64_t n_ctx = pos0 + n_rows, n_kv = n_head_kv * hd;
    float *q = malloc(sizeof(float) * (size_t)(n_rows * n_head * hd));
    rnd_floats(q, n_rows * n_head * hd, 1.0f);
    uint16_t *kc = malloc(sizeof(uint16_t) * (size_t)(n_ctx * n_kv)), *vc = malloc(sizeof(uint16_t) * (size_t)(n_ctx * n_kv));
    float *kf = malloc(sizeof(float) * (size_t)(n_ctx * n_kv)), *vf = malloc(sizeof(float) * (size_t)(n_ctx * n_kv));
    float vmax = 0.0f;
    for (int64_t i = 0; i < n_ctx * n_kv; i++) {
        kc[i] = mp_f32_to_f16(rnd_gauss());
        vc[i] = mp_f32_to_f16(rnd_gauss());
        kf[i] = mp_f16_to_f32(kc[i]);
        vf[i] = mp_f16_to_f32(vc[i]);
        vmax = fmaxf(vmax, fabsf(vf[i]));
    }
    if (inf_key >= 0)
        for (int64_t i = inf_key * n_kv; i < (inf_key + 1) * n_kv; i++) {
            vc[i] = 0x7c00; /* F16 +inf */
            vf[i] = INFINITY;
        }
    float *d_q = dev_put(q, sizeof(float) * (size_t)(n_rows * n_head * hd));
    uint16_t *d_k = dev_put(kc, sizeof(uint16_t) * (size_t)(n_ctx * n_kv));
    uint16_t *d_v = dev_put(vc, sizeof(uint16_t) * (size_t)(n_ctx * n_kv));
    float *d_o = dev_alloc(sizeof(float) * (size_t)(n_rows * n_head * hd));
    const size_t sb = mp_cuda_attention_scratch_bytes(n_rows, n_head, hd, n_ctx);
    void *d_s = dev_alloc(sb);
    MPC_OK(mp_cuda_attention(d_q, d_k, d_v, d_o, n_rows, pos0, n_head, n_head_kv, hd, d_s, sb, NULL));
    float *got = malloc(sizeof(float) * (size_t)(n_rows * n_head * hd));
    dev_get(got, d_o, sizeof(float) * (size_t)(n_rows * n_head * hd));

    float *sc = malloc(sizeof(float) * (size_t)n_ctx), *ref = malloc(sizeof(float) * (size_t)(n_rows * n_head * hd));
    const float scale = 1.0f / sqrtf((float)hd);
    for (int64_t r = 0; r < n_rows; r++)
        for (int64_t h = 0; h < n_head; h++) {
            const int64_t kvh = h / (n_head / n_head_kv), n_keys = pos0 + r + 1;
            const float *qh = q + (r * n_head + h) * hd;
            float *rh = ref + (r * n_head + h) * hd;
            for (int64_t t = 0; t < n_keys; t++)
                sc[t] = mp_dot_f32(qh, kf + t * n_kv + kvh * hd, hd) * scale;
            mp_softmax(sc, n_keys);
            for (int64_t d = 0; d < hd; d++)
                rh[d] = 0.0f;
            for (int64_t t = 0; t < n_keys; t++)
                mp_axpy(rh, sc[t], vf + t * n_kv + kvh * hd, hd);
        }
    check_against(got, ref, vmax, "attention", n_rows, pos0, n_head, n_head_kv, hd);
    cr_assert_eq(mp_cuda_attention(d_q, d_k, d_v, d_o, n_rows, pos0, n_head, n_head_kv, hd, d_s,
                                   sb - 1, NULL), MP_CUDA_ENOMEM);
    /* positions from the device, keys split for a longer context (the CUDA-graph decode path):
     * the extra chunks are empty, so a split-K step's result is bit-identical; a tiled step may
     * split its keys differently for the longer bound, and is held to the reference */
    int32_t *pos = malloc(sizeof(int32_t) * (size_t)n_rows);
    for (int64_t r = 0; r < n_rows; r++)
        pos[r] = (int32_t)(pos0 + r);
    int32_t *d_pos = dev_put(pos, sizeof(int32_t) * (size_t)n_rows);
    const int64_t keys_max = n_ctx + 700;
    const size_t sb2 = mp_cuda_attention_scratch_bytes(n_rows, n_head, hd, keys_max);
    void *d_s2 = dev_alloc(sb2);
    /* with the output converted for the output projection (Q8_K where the row makes whole blocks
     * of 256, else Q8_0): the bytes mp_cuda_quantize_act makes of the f32 output */
    const int64_t Q = n_head * hd;
    const int act_vdt = Q % 256 == 0 ? MP_TYPE_Q8_K : MP_TYPE_Q8_0;
    const size_t act_bytes = mp_cuda_row_bytes(act_vdt, Q) * (size_t)n_rows;
    void *d_act = dev_alloc(act_bytes), *d_act_ref = dev_alloc(act_bytes);
    MPC_OK(mp_cuda_attention_at(d_q, d_k, d_v, d_o, n_rows, d_pos, keys_max, n_head, n_head_kv, hd,
                                d_s2, sb2, act_vdt, d_act, 0, NULL, NULL));
    float *got_at = malloc(sizeof(float) * (size_t)(n_rows * n_head * hd));
    dev_get(got_at, d_o, sizeof(float) * (size_t)(n_rows * n_head * hd));
    MPC_OK(mp_cuda_quantize_act(act_vdt, d_o, Q, n_rows, Q, d_act_ref, NULL));
    uint8_t *act = malloc(act_bytes), *act_ref = malloc(act_bytes);
    dev_get(act, d_act, act_bytes);
    dev_get(act_ref, d_act_ref, act_bytes);
    cr_assert_eq(memcmp(act, act_ref, act_bytes), 0, "seed %llu: attention_at's %s output differs from "
                 "mp_cuda_quantize_act's (rows %ld heads %ld hd %ld)", (unsigned long long)g_seed,
                 act_vdt == MP_TYPE_Q8_K ? "Q8_K" : "Q8_0", (long)n_rows, (long)n_head, (long)hd);
    cudaFree(d_act); cudaFree(d_act_ref);
    free(act); free(act_ref);
    if (n_rows <= MP_CUDA_ATT_SMALL_ROWS)
        for (int64_t i = 0; i < n_rows * n_head * hd; i++)
            cr_assert(got_at[i] == got[i] || (!isfinite(got_at[i]) && !isfinite(got[i])), "seed %llu: attention_at differs at %ld: %.9g vs %.9g",
                         (unsigned long long)g_seed, (long)i, got_at[i], got[i]);
    else
        check_against(got_at, ref, vmax, "attention_at", n_rows, pos0, n_head, n_head_kv, hd);
    /* the cache rows stored at device positions equal the ones stored at pos0 */
    uint16_t *d_c1 = dev_alloc(sizeof(uint16_t) * (size_t)(n_ctx * n_kv));
    uint16_t *d_c2 = dev_alloc(sizeof(uint16_t) * (size_t)(n_ctx * n_kv));
    float *src = malloc(sizeof(float) * (size_t)(n_rows * n_kv));
    rnd_floats(src, n_rows * n_kv, 3.0f);
    float *d_src = dev_put(src, sizeof(float) * (size_t)(n_rows * n_kv));
    cudaMemset(d_c1, 0, sizeof(uint16_t) * (size_t)(n_ctx * n_kv));
    cudaMemset(d_c2, 0, sizeof(uint16_t) * (size_t)(n_ctx * n_kv));
    MPC_OK(mp_cuda_kv_store(d_c1, d_src, n_rows, n_kv, pos0, NULL));
    MPC_OK(mp_cuda_kv_store_at(d_c2, d_src, n_rows, n_kv, d_pos, NULL));
    uint16_t *c1 = malloc(sizeof(uint16_t) * (size_t)(n_ctx * n_kv)), *c2 = malloc(sizeof(uint16_t) * (size_t)(n_ctx * n_kv));
    dev_get(c1, d_c1, sizeof(uint16_t) * (size_t)(n_ctx * n_kv));
    dev_get(c2, d_c2, sizeof(uint16_t) * (size_t)(n_ctx * n_kv));
    cr_assert_eq(memcmp(c1, c2, sizeof(uint16_t) * (size_t)(n_ctx * n_kv)), 0, "seed %llu: kv_store_at",
                 (unsigned long long)g_seed);
    cr_assert_eq(c1[pos0 * n_kv], mp_f32_to_f16(src[0]), "seed %llu", (unsigned long long)g_seed);
    /* K and V in one launch: V from the same source, so both caches equal the single stores */
    uint16_t *d_c3 = dev_alloc(sizeof(uint16_t) * (size_t)(n_ctx * n_kv));
    cudaMemset(d_c2, 0, sizeof(uint16_t) * (size_t)(n_ctx * n_kv));
    cudaMemset(d_c3, 0, sizeof(uint16_t) * (size_t)(n_ctx * n_kv));
    MPC_OK(mp_cuda_kv_store2_at(d_c2, d_c3, d_src, d_src, n_rows, n_kv, d_pos, NULL));
    dev_get(c2, d_c2, sizeof(uint16_t) * (size_t)(n_ctx * n_kv));
    cr_assert_eq(memcmp(c1, c2, sizeof(uint16_t) * (size_t)(n_ctx * n_kv)), 0, "seed %llu: kv_store2_at K",
                 (unsigned long long)g_seed);
    dev_get(c2, d_c3, sizeof(uint16_t) * (size_t)(n_ctx * n_kv));
    cr_assert_eq(memcmp(c1, c2, sizeof(uint16_t) * (size_t)(n_ctx * n_kv)), 0, "seed %llu: kv_store2_at V",
                 (unsigned long long)g_seed);
    cudaFree(d_c3);
    cudaFree(d_pos); cudaFree(d_s2); cudaFree(d_c1); cudaFree(d_c2); cudaFree(d_src);
    free(pos); free(got_at); free(src); free(c1); free(c2);
    cudaFree(d_q); cudaFree(d_k); cudaFree(d_v); cudaFree(d_o); cudaFree(d_s);
    free(q); free(kc); free(vc); free(kf); free(vf); free(got); free(sc); free(ref);
}

static void check_attention(int64_t n_rows, int64_t pos0, int64_t n_head, int64_t n_head_kv,
                            int64_t hd)
{
    check_attention_with(n_rows, pos0, n_head, n_head_kv, hd, -1);
}

/* Steps of up to 8 rows split the keys in chunks of 64; larger ones walk them in tiles of 32 query
 * rows and 32 keys (attention.cu). */
Test(cuda_attention, decode)
{
    seed_rng();
    check_attention(1, 0, 32, 4, 128);    /* first token: one key */
    check_attention(1, 40, 32, 4, 128);   /* one chunk, partial */
    check_attention(1, 1000, 32, 4, 128); /* split-K over 16 chunks, the last partial */
    check_attention(1, 4200, 32, 4, 128); /* 66 chunks */
    check_attention(1, 511, 16, 16, 64);  /* MHA, exactly 8 chunks */
    check_attention(1, 300, 8, 2, 256);   /* the largest head: two batches of loads per thread */
    check_attention(1, 130, 4, 2, 80);    /* a head that leaves some dimension pairs empty */
    check_attention(8, 70, 32, 4, 128);   /* the largest split-K step */
    check_attention(5, 250, 4, 1, 80);    /* rows straddle a chunk boundary */
    check_attention(2, 90, 6, 2, 48);     /* a head below 64 dimensions (padded to the 64 kernel) */
    check_attention(1, 200, 4, 4, 192);   /* 192 of the 256 kernel's dimensions */
}

/* Tiled steps with fewer (head, row tile) blocks than 4 per SM split their keys too, as far as the
 * scratch holds the partials: the cases with keys beyond a chunk or two do (on any GPU of 9 SMs or
 * more), 37 rows from an empty cache and 300 rows of 64 heads do not. */
Test(cuda_attention, prefill_tiles)
{
    seed_rng();
    check_attention(9, 600, 8, 4, 128);   /* the smallest tiled step, one partial tile of rows */
    check_attention(37, 0, 8, 2, 128);    /* from an empty cache: the first key tile only for row 0 */
    check_attention(300, 0, 64, 8, 64);   /* 640 blocks: no key split */
    check_attention(16, 3000, 32, 4, 128); /* few blocks, many keys: split over blocks and merged */
    check_attention(19, 300, 32, 4, 128); /* continuing a prompt, key tiles past a row's bound */
    check_attention(64, 0, 32, 4, 128);   /* two full row tiles, the diagonal tile of each */
    check_attention(100, 37, 8, 2, 128);  /* a partial last row tile at an odd position */
    check_attention(45, 300, 4, 1, 80);   /* padded dimensions (80 of 128), one kv head */
    check_attention(33, 5, 4, 4, 64);     /* the 64-dimension tile, MHA */
    check_attention(40, 90, 4, 2, 256);   /* the 256-dimension tile (more than 48 KB of shared memory) */
    check_attention(50, 20, 6, 3, 48);    /* a head below 64 dimensions in the 64 tile */
    check_attention(33, 70, 4, 2, 192);   /* 192 of the 256 tile's dimensions */
}

/* A value row that is not finite reaches only the rows whose causal bound covers it: in a tile of
 * rows that straddles it (keys 0 ... 40 of rows 0 ... 36, the infinity at key 20; keys 300 ...
 * 318 of 19 rows, at key 310), and in split-K steps. */
Test(cuda_attention, non_finite_value_stays_in_its_rows)
{
    seed_rng();
    check_attention_with(37, 0, 8, 2, 128, 20);
    check_attention_with(19, 300, 32, 4, 128, 310);
    check_attention_with(50, 20, 6, 3, 64, 45);
    check_attention_with(8, 70, 32, 4, 128, 74);
    mp_cuda_attention_set_tiles(0);
    check_attention_with(37, 0, 8, 2, 128, 20);
    mp_cuda_attention_set_tiles(1);
}

/* Without the tiled kernel (a device without its shared memory), larger steps run split-K in steps
 * of 8 rows through the same scratch. */
Test(cuda_attention, prefill_without_tiles)
{
    seed_rng();
    mp_cuda_attention_set_tiles(0);
    check_attention(37, 0, 8, 2, 128);
    check_attention(19, 300, 32, 4, 128);
    check_attention(45, 300, 4, 1, 80);
    mp_cuda_attention_set_tiles(1);
}

/* gpt-oss's attention: a window of the last `window` keys (0: all) and a sink logit per head in the
 * softmax, against a scalar reference of the definition (runtime/attention.c computes it the same
 * way), on the split-K path (up to 8 rows), the tiles, and the tiles' fallback. */
static void check_window_sinks(int64_t n_rows, int64_t pos0, int64_t n_head, int64_t n_head_kv, int64_t hd,
                               int64_t window, bool sinks)
{
    const int64_t n_ctx = pos0 + n_rows, n_kv = n_head_kv * hd, nq = n_rows * n_head * hd;
    float *q = malloc(sizeof(float) * (size_t)nq), *sk = malloc(sizeof(float) * (size_t)n_head);
    rnd_floats(q, nq, 1.0f);
    rnd_floats(sk, n_head, 3.0f);
    uint16_t *kc = malloc(sizeof(uint16_t) * (size_t)(n_ctx * n_kv)), *vc = malloc(sizeof(uint16_t) * (size_t)(n_ctx * n_kv));
    float *kf = malloc(sizeof(float) * (size_t)(n_ctx * n_kv)), *vf = malloc(sizeof(float) * (size_t)(n_ctx * n_kv));
    float vmax = 0.0f;
    for (int64_t i = 0; i < n_ctx * n_kv; i++) {
        kf[i] = mp_f16_to_f32(kc[i] = mp_f32_to_f16(rnd_gauss()));
        vf[i] = mp_f16_to_f32(vc[i] = mp_f32_to_f16(rnd_gauss()));
        vmax = fmaxf(vmax, fabsf(vf[i]));
    }
    float *ref = malloc(sizeof(float) * (size_t)nq), *sc = malloc(sizeof(float) * (size_t)n_ctx);
    const float scale = 1.0f / sqrtf((float)hd);
    for (int64_t r = 0; r < n_rows; r++)
        for (int64_t h = 0; h < n_head; h++) {
            const int64_t kvh = h / (n_head / n_head_kv), end = pos0 + r + 1;
            const int64_t t0 = window > 0 && end > window ? end - window : 0;
            float mx = sinks ? sk[h] : -INFINITY, sum = 0.0f;
            for (int64_t t = t0; t < end; t++) {
                sc[t] = mp_dot_f32(q + (r * n_head + h) * hd, kf + t * n_kv + kvh * hd, hd) * scale;
                mx = fmaxf(mx, sc[t]);
            }
            for (int64_t t = t0; t < end; t++)
                sum += (sc[t] = expf(sc[t] - mx));
            if (sinks)
                sum += expf(sk[h] - mx);
            float *o = ref + (r * n_head + h) * hd;
            for (int64_t d = 0; d < hd; d++)
                o[d] = 0.0f;
            for (int64_t t = t0; t < end; t++)
                mp_axpy(o, sc[t] / sum, vf + t * n_kv + kvh * hd, hd);
        }
    int32_t *pos = malloc(sizeof(int32_t) * (size_t)n_rows);
    for (int64_t r = 0; r < n_rows; r++)
        pos[r] = (int32_t)(pos0 + r);
    float *d_q = dev_put(q, sizeof(float) * (size_t)nq), *d_sk = sinks ? dev_put(sk, sizeof(float) * (size_t)n_head) : NULL;
    uint16_t *d_k = dev_put(kc, sizeof(uint16_t) * (size_t)(n_ctx * n_kv));
    uint16_t *d_v = dev_put(vc, sizeof(uint16_t) * (size_t)(n_ctx * n_kv));
    int32_t *d_pos = dev_put(pos, sizeof(int32_t) * (size_t)n_rows);
    float *d_o = dev_alloc(sizeof(float) * (size_t)nq), *got = malloc(sizeof(float) * (size_t)nq);
    const int64_t keys_max = n_ctx + 200; /* as a graph's launch: keys split for a longer context */
    const size_t sb = mp_cuda_attention_scratch_bytes(n_rows, n_head, hd, keys_max);
    void *d_s = dev_alloc(sb);
    for (int tiles = 1; tiles >= 0; tiles--) {
        mp_cuda_attention_set_tiles(tiles);
        MPC_OK(mp_cuda_attention_at(d_q, d_k, d_v, d_o, n_rows, d_pos, keys_max, n_head, n_head_kv, hd, d_s, sb,
                                    MP_TYPE_F32, NULL, window, d_sk, NULL));
        dev_get(got, d_o, sizeof(float) * (size_t)nq);
        char what[64];
        snprintf(what, sizeof what, "window %ld sinks %d tiles %d", (long)window, sinks, tiles);
        check_against(got, ref, vmax, what, n_rows, pos0, n_head, n_head_kv, hd);
    }
    mp_cuda_attention_set_tiles(1);
    cudaFree(d_q); cudaFree(d_sk); cudaFree(d_k); cudaFree(d_v); cudaFree(d_pos); cudaFree(d_o); cudaFree(d_s);
    free(q); free(sk); free(kc); free(vc); free(kf); free(vf); free(ref); free(sc); free(pos); free(got);
}

Test(cuda_attention, sliding_window_and_sinks)
{
    seed_rng();
    check_window_sinks(1, 0, 8, 2, 64, 128, true);     /* first token */
    check_window_sinks(1, 40, 8, 2, 64, 128, true);    /* inside the window */
    check_window_sinks(1, 1000, 8, 2, 64, 128, true);  /* decode past it: chunks before it skipped */
    check_window_sinks(1, 1000, 8, 2, 64, 100, false); /* a window that cuts a chunk */
    check_window_sinks(1, 1000, 8, 2, 64, 0, true);    /* sinks alone (gpt-oss's full layers) */
    check_window_sinks(8, 300, 64, 8, 64, 128, true);  /* gpt-oss-20b's heads, the largest split-K step */
    check_window_sinks(37, 0, 8, 2, 64, 16, true);     /* a prompt longer than the window */
    check_window_sinks(100, 900, 8, 2, 64, 128, true); /* tiles whose rows start at different keys */
    check_window_sinks(16, 3000, 16, 2, 128, 128, true); /* few blocks: keys split over blocks, merged */
    check_window_sinks(16, 3000, 16, 2, 128, 0, true);
}

Test(cuda_attention, refuses_an_odd_head_dim_or_output_format)
{
    void *d_s = dev_alloc(1 << 20);
    float *d_f = dev_alloc(1 << 20);
    cr_assert_eq(mp_cuda_attention(d_f, (const uint16_t *)d_f, (const uint16_t *)d_f, d_f, 1, 0, 2, 1, 63,
                                   d_s, 1 << 20, NULL), MP_CUDA_EINVAL);
    /* the output converted only to an activation format, in rows of whole blocks: 2 heads of 64
     * make no Q8_K block; Q4_K is a weight format */
    int32_t *d_pos = dev_alloc(sizeof(int32_t));
    cudaMemset(d_pos, 0, sizeof(int32_t));
    cr_assert_eq(mp_cuda_attention_at(d_f, (const uint16_t *)d_f, (const uint16_t *)d_f, d_f, 1, d_pos, 1, 2, 1, 64,
                                      d_s, 1 << 20, MP_TYPE_Q8_K, d_f + (1 << 16), 0, NULL, NULL), MP_CUDA_EINVAL);
    cr_assert_eq(mp_cuda_attention_at(d_f, (const uint16_t *)d_f, (const uint16_t *)d_f, d_f, 1, d_pos, 1, 4, 1, 64,
                                      d_s, 1 << 20, MP_TYPE_Q4_K, d_f + (1 << 16), 0, NULL, NULL), MP_CUDA_EINVAL);
    cr_assert_eq(mp_cuda_attention_at(d_f, (const uint16_t *)d_f, (const uint16_t *)d_f, d_f, 1, d_pos, 1, 4, 1, 64,
                                      d_s, 1 << 20, MP_TYPE_F32, NULL, -1, NULL, NULL), MP_CUDA_EINVAL, "window < 0");
    cudaFree(d_pos);
    cudaFree(d_s);
    cudaFree(d_f);
}
#endif
