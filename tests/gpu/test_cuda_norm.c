/* tests/gpu/test_cuda_norm.c — CUDA RMSNorm against the CPU scalar reference on random inputs.
 * Where no CUDA device exists, gpu_main.c skips the executable (exit 77) saying why. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <time.h>

#include "kernels/ops.h"
#include "kernels/quant.h"
#include "mp_config.h"
#if MP_HAVE_CUDA && !defined(MP_NO_CUDA)
#include "kernels/cuda/cuda_ops.h"
#endif

Test(cuda_norm, matches_scalar_reference)
{
#if MP_HAVE_CUDA && !defined(MP_NO_CUDA) /* else gpu_main.c skips before any test runs */
    const int64_t rows = 37, n = 2048;
    unsigned seed = (unsigned)time(NULL);
    srand(seed);
    float *x = malloc(sizeof(float) * rows * n), *w = malloc(sizeof(float) * n);
    float *ref = malloc(sizeof(float) * rows * n), *got = malloc(sizeof(float) * rows * n);
    for (int64_t i = 0; i < rows * n; i++)
        x[i] = (float)rand() / RAND_MAX * 4.0f - 2.0f;
    for (int64_t i = 0; i < n; i++)
        w[i] = (float)rand() / RAND_MAX + 0.5f;
    for (int64_t r = 0; r < rows; r++)
        mp_rmsnorm(ref + r * n, x + r * n, w, n, 1e-6f);
    cr_assert_eq(mp_cuda_rmsnorm_host(got, x, w, rows, n, 1e-6f), 0);
    for (int64_t i = 0; i < rows * n; i++)
        cr_assert(fabsf(got[i] - ref[i]) <= 1e-5f * (1.0f + fabsf(ref[i])),
                  "seed %u: element %ld: gpu %g, reference %g", seed, (long)i, got[i], ref[i]);
    free(x); free(w); free(ref); free(got);
#endif
}

#if MP_HAVE_CUDA && !defined(MP_NO_CUDA)
#include <cuda_runtime_api.h>
#include <string.h>

/* The fused residual add + norm equals mp_cuda_add then mp_cuda_rmsnorm bit for bit (x and out). */
Test(cuda_norm, add_rmsnorm_equals_add_then_rmsnorm)
{
    const int64_t rows = 19, n = 2048;
    unsigned seed = (unsigned)time(NULL);
    srand(seed);
    const size_t bytes = sizeof(float) * (size_t)(rows * n);
    float *x = malloc(bytes), *y = malloc(bytes), *w = malloc(sizeof(float) * n);
    float *x1 = malloc(bytes), *o1 = malloc(bytes), *x2 = malloc(bytes), *o2 = malloc(bytes);
    for (int64_t i = 0; i < rows * n; i++) {
        x[i] = (float)rand() / RAND_MAX * 4.0f - 2.0f;
        y[i] = (float)rand() / RAND_MAX * 2.0f - 1.0f;
    }
    for (int64_t i = 0; i < n; i++)
        w[i] = (float)rand() / RAND_MAX + 0.5f;
    float *dx, *dy, *dw, *dout;
    cr_assert_eq(cudaMalloc((void **)&dx, bytes), cudaSuccess);
    cr_assert_eq(cudaMalloc((void **)&dy, bytes), cudaSuccess);
    cr_assert_eq(cudaMalloc((void **)&dout, bytes), cudaSuccess);
    cr_assert_eq(cudaMalloc((void **)&dw, sizeof(float) * n), cudaSuccess);
    cudaMemcpy(dy, y, bytes, cudaMemcpyHostToDevice);
    cudaMemcpy(dw, w, sizeof(float) * n, cudaMemcpyHostToDevice);
    cudaMemcpy(dx, x, bytes, cudaMemcpyHostToDevice);
    cr_assert_eq(mp_cuda_add(dx, dy, rows * n, NULL), 0);
    cr_assert_eq(mp_cuda_rmsnorm(dout, dx, dw, rows, n, 1e-6f, NULL), 0);
    cudaMemcpy(x1, dx, bytes, cudaMemcpyDeviceToHost);
    cudaMemcpy(o1, dout, bytes, cudaMemcpyDeviceToHost);
    cudaMemcpy(dx, x, bytes, cudaMemcpyHostToDevice);
    cudaMemset(dout, 0, bytes);
    cr_assert_eq(mp_cuda_add_rmsnorm(dout, dx, dy, dw, rows, n, 1e-6f, NULL), 0);
    cudaMemcpy(x2, dx, bytes, cudaMemcpyDeviceToHost);
    cudaMemcpy(o2, dout, bytes, cudaMemcpyDeviceToHost);
    cr_assert_eq(memcmp(x1, x2, bytes), 0, "seed %u: x after the fused add differs", seed);
    cr_assert_eq(memcmp(o1, o2, bytes), 0, "seed %u: the fused norm differs", seed);
    cr_assert_eq(mp_cuda_add_rmsnorm(dx, dx, dy, dw, rows, n, 1e-6f, NULL), MP_CUDA_EINVAL);
    cudaFree(dx); cudaFree(dy); cudaFree(dw); cudaFree(dout);
    free(x); free(y); free(w); free(x1); free(o1); free(x2); free(o2);
}
#endif

#if MP_HAVE_CUDA && !defined(MP_NO_CUDA)
/* mp_cuda_qkv_finish equals the five launches it replaces — per-head mp_cuda_rmsnorm of Q and K
 * (when norm), mp_cuda_rope of Q and K, mp_cuda_kv_store2_at — bit for bit in Q, K and both
 * caches, for both RoPE styles, partial rotation, with and without the norm, at scattered
 * positions (the cache rows not written must stay as they were). */
static void check_qkv_finish(int64_t rows, int64_t n_head, int64_t n_head_kv, int64_t hd, int64_t rot_dim,
                             int style, int norm, unsigned seed)
{
    const int64_t Q = n_head * hd, KV = n_head_kv * hd, n_ctx = 64;
    const size_t qb = sizeof(float) * (size_t)(rows * Q), kb = sizeof(float) * (size_t)(rows * KV);
    const size_t cb = sizeof(uint16_t) * (size_t)(n_ctx * KV);
    float *q = malloc(qb), *k = malloc(kb), *v = malloc(kb), *qw = malloc(sizeof(float) * hd),
          *kw = malloc(sizeof(float) * hd);
    int32_t pos[64];
    uint16_t *cache0 = malloc(cb);
    for (int64_t i = 0; i < rows * Q; i++)
        q[i] = (float)rand() / RAND_MAX * 4.0f - 2.0f;
    for (int64_t i = 0; i < rows * KV; i++) {
        k[i] = (float)rand() / RAND_MAX * 4.0f - 2.0f;
        v[i] = (float)rand() / RAND_MAX * 2.0f - 1.0f;
    }
    for (int64_t i = 0; i < hd; i++) {
        qw[i] = (float)rand() / RAND_MAX + 0.5f;
        kw[i] = (float)rand() / RAND_MAX + 0.5f;
    }
    for (int64_t r = 0; r < rows; r++)
        pos[r] = (int32_t)((r * 7 + seed) % n_ctx); /* distinct for rows <= 64: 7 is prime to 64 */
    for (int64_t i = 0; i < n_ctx * KV; i++)
        cache0[i] = (uint16_t)(rand() & 0x3bff); /* finite f16 patterns */
    float *dq, *dk, *dv, *dqw, *dkw;
    uint16_t *dkc, *dvc;
    int32_t *dpos;
    float *dcs; /* the rows' RoPE angles (mp_cuda_rope_table) */
    cr_assert_eq(cudaMalloc((void **)&dcs, sizeof(float) * (size_t)(rows * rot_dim)), cudaSuccess);
    cr_assert_eq(cudaMalloc((void **)&dq, qb), cudaSuccess);
    cr_assert_eq(cudaMalloc((void **)&dk, kb), cudaSuccess);
    cr_assert_eq(cudaMalloc((void **)&dv, kb), cudaSuccess);
    cr_assert_eq(cudaMalloc((void **)&dqw, sizeof(float) * hd), cudaSuccess);
    cr_assert_eq(cudaMalloc((void **)&dkw, sizeof(float) * hd), cudaSuccess);
    cr_assert_eq(cudaMalloc((void **)&dkc, cb), cudaSuccess);
    cr_assert_eq(cudaMalloc((void **)&dvc, cb), cudaSuccess);
    cr_assert_eq(cudaMalloc((void **)&dpos, sizeof pos), cudaSuccess);
    cudaMemcpy(dqw, qw, sizeof(float) * hd, cudaMemcpyHostToDevice);
    cudaMemcpy(dkw, kw, sizeof(float) * hd, cudaMemcpyHostToDevice);
    cudaMemcpy(dpos, pos, sizeof pos, cudaMemcpyHostToDevice);
    double theta[2048], *dtheta; /* base 10000; rot_dim up to the kernel's 4096 */
    for (int64_t i = 0; i < rot_dim / 2; i++)
        theta[i] = pow(10000.0, -2.0 * (double)i / (double)rot_dim);
    cr_assert_eq(cudaMalloc((void **)&dtheta, sizeof theta), cudaSuccess);
    cudaMemcpy(dtheta, theta, sizeof theta, cudaMemcpyHostToDevice);
    float *q1 = malloc(qb), *k1 = malloc(kb), *q2 = malloc(qb), *k2 = malloc(kb);
    uint16_t *kc1 = malloc(cb), *vc1 = malloc(cb), *kc2 = malloc(cb), *vc2 = malloc(cb);
    for (int pass = 0; pass < 2; pass++) {
        cudaMemcpy(dq, q, qb, cudaMemcpyHostToDevice);
        cudaMemcpy(dk, k, kb, cudaMemcpyHostToDevice);
        cudaMemcpy(dv, v, kb, cudaMemcpyHostToDevice);
        cudaMemcpy(dkc, cache0, cb, cudaMemcpyHostToDevice);
        cudaMemcpy(dvc, cache0, cb, cudaMemcpyHostToDevice);
        if (pass == 0) {
            if (norm) {
                cr_assert_eq(mp_cuda_rmsnorm(dq, dq, dqw, rows * n_head, hd, 1e-6f, NULL), 0);
                cr_assert_eq(mp_cuda_rmsnorm(dk, dk, dkw, rows * n_head_kv, hd, 1e-6f, NULL), 0);
            }
            cr_assert_eq(mp_cuda_rope(dq, rows, Q, n_head, hd, rot_dim, dpos, dtheta, 1.0f, style, NULL), 0);
            cr_assert_eq(mp_cuda_rope(dk, rows, KV, n_head_kv, hd, rot_dim, dpos, dtheta, 1.0f, style, NULL), 0);
            cr_assert_eq(mp_cuda_kv_store2_at(dkc, dvc, dk, dv, rows, KV, dpos, NULL), 0);
        } else {
            cr_assert_eq(mp_cuda_rope_table(dcs, dpos, rows, rot_dim, dtheta, 1.0f, NULL), 0);
            cr_assert_eq(mp_cuda_qkv_finish(dq, dk, dv, dqw, dkw, norm, rows, n_head, n_head_kv, hd, rot_dim, dpos,
                                            dcs, style, 1e-6f, dkc, dvc, NULL), 0);
        }
        cr_assert_eq(cudaDeviceSynchronize(), cudaSuccess);
        cudaMemcpy(pass ? q2 : q1, dq, qb, cudaMemcpyDeviceToHost);
        cudaMemcpy(pass ? k2 : k1, dk, kb, cudaMemcpyDeviceToHost);
        cudaMemcpy(pass ? kc2 : kc1, dkc, cb, cudaMemcpyDeviceToHost);
        cudaMemcpy(pass ? vc2 : vc1, dvc, cb, cudaMemcpyDeviceToHost);
    }
    const char *what = style == MP_CUDA_ROPE_NEOX ? "neox" : "norm";
    cr_assert_eq(memcmp(q1, q2, qb), 0, "seed %u: %s rope, norm %d, hd %ld rot %ld: Q differs", seed, what, norm,
                 (long)hd, (long)rot_dim);
    cr_assert_eq(memcmp(k1, k2, kb), 0, "seed %u: %s rope, norm %d: K differs", seed, what, norm);
    cr_assert_eq(memcmp(kc1, kc2, cb), 0, "seed %u: %s rope, norm %d: K cache differs", seed, what, norm);
    cr_assert_eq(memcmp(vc1, vc2, cb), 0, "seed %u: %s rope, norm %d: V cache differs", seed, what, norm);
    /* the work happened: Q moved, and a written cache row is no longer the old pattern */
    cr_assert_neq(memcmp(q, q2, qb), 0, "seed %u: Q unchanged", seed);
    cr_assert_neq(memcmp(cache0 + (size_t)pos[0] * KV, vc2 + (size_t)pos[0] * KV, sizeof(uint16_t) * KV), 0,
                  "seed %u: V row not stored", seed);
    cudaFree(dq); cudaFree(dk); cudaFree(dv); cudaFree(dqw); cudaFree(dkw); cudaFree(dkc); cudaFree(dvc);
    cudaFree(dpos); cudaFree(dcs); cudaFree(dtheta);
    free(q); free(k); free(v); free(qw); free(kw); free(cache0);
    free(q1); free(k1); free(q2); free(k2); free(kc1); free(vc1); free(kc2); free(vc2);
}

Test(cuda_norm, qkv_finish_equals_norm_rope_and_store)
{
    unsigned seed = (unsigned)time(NULL);
    srand(seed);
    /* both kernels: a block per head (below 16 rows), and a warp per head (from 16 rows) */
    for (int norm = 0; norm < 2; norm++) {
        check_qkv_finish(1, 32, 4, 128, 128, MP_CUDA_ROPE_NEOX, norm, seed);      /* qwen3 decode */
        check_qkv_finish(5, 32, 4, 128, 128, MP_CUDA_ROPE_NEOX, norm, seed + 1);  /* several rows */
        check_qkv_finish(3, 8, 8, 64, 32, MP_CUDA_ROPE_NORM, norm, seed + 2);     /* partial, interleaved */
        check_qkv_finish(2, 6, 2, 320, 320, MP_CUDA_ROPE_NEOX, norm, seed + 3);   /* head wider than a block */
        check_qkv_finish(9, 6, 3, 96, 64, MP_CUDA_ROPE_NORM, norm, seed + 4);     /* partial rotation */
        check_qkv_finish(16, 32, 4, 128, 128, MP_CUDA_ROPE_NEOX, norm, seed + 5); /* qwen3 prefill: warps */
        check_qkv_finish(17, 8, 8, 64, 32, MP_CUDA_ROPE_NORM, norm, seed + 6);    /* partial, interleaved */
        check_qkv_finish(16, 6, 2, 320, 320, MP_CUDA_ROPE_NEOX, norm, seed + 7);  /* 320-wide heads: 10 elements a lane */
        check_qkv_finish(19, 6, 3, 96, 64, MP_CUDA_ROPE_NORM, norm, seed + 8);    /* 228 heads: a partial block */
    }
    /* bad shapes are refused */
    cr_assert_eq(mp_cuda_qkv_finish(NULL, NULL, NULL, NULL, NULL, 0, 1, 32, 4, 128, 128, NULL, NULL, 0, 1e-6f, NULL,
                                    NULL, NULL), MP_CUDA_EINVAL);
    cr_assert_eq(mp_cuda_rope_table(NULL, NULL, 1, 128, NULL, 1.0f, NULL), MP_CUDA_EINVAL);
}
#endif

#if MP_HAVE_CUDA && !defined(MP_NO_CUDA)
/* mp_cuda_rmsnorm_quant equals (mp_cuda_add +) mp_cuda_rmsnorm then mp_cuda_quantize_act, bit for
 * bit in x, out and the converted rows, for Q8_0 and Q8_K, with and without the residual add. */
Test(cuda_norm, rmsnorm_quant_equals_norm_then_quantize)
{
    unsigned seed = (unsigned)time(NULL);
    srand(seed);
    const int64_t shapes[][2] = {{1, 2048}, {7, 2048}, {3, 768}};
    const int vdts[] = {MP_TYPE_Q8_0, MP_TYPE_Q8_K};
    for (size_t si = 0; si < 3; si++)
        for (int vi = 0; vi < 2; vi++)
            for (int add = 0; add < 2; add++) {
                const int64_t rows = shapes[si][0], n = shapes[si][1];
                const int vdt = vdts[vi];
                const size_t bytes = sizeof(float) * (size_t)(rows * n), qb = mp_cuda_row_bytes(vdt, n) * (size_t)rows;
                float *x = malloc(bytes), *y = malloc(bytes), *w = malloc(sizeof(float) * n);
                for (int64_t i = 0; i < rows * n; i++) {
                    x[i] = (float)rand() / RAND_MAX * 4.0f - 2.0f;
                    y[i] = (float)rand() / RAND_MAX * 2.0f - 1.0f;
                }
                for (int64_t i = 0; i < n; i++)
                    w[i] = (float)rand() / RAND_MAX + 0.5f;
                float *dx, *dy, *dw, *dout;
                void *dq;
                cr_assert_eq(cudaMalloc((void **)&dx, bytes), cudaSuccess);
                cr_assert_eq(cudaMalloc((void **)&dy, bytes), cudaSuccess);
                cr_assert_eq(cudaMalloc((void **)&dout, bytes), cudaSuccess);
                cr_assert_eq(cudaMalloc((void **)&dw, sizeof(float) * n), cudaSuccess);
                cr_assert_eq(cudaMalloc(&dq, qb), cudaSuccess);
                cudaMemcpy(dy, y, bytes, cudaMemcpyHostToDevice);
                cudaMemcpy(dw, w, sizeof(float) * n, cudaMemcpyHostToDevice);
                float *x1 = malloc(bytes), *o1 = malloc(bytes), *x2 = malloc(bytes), *o2 = malloc(bytes);
                unsigned char *q1 = malloc(qb), *q2 = malloc(qb);
                /* the separate launches */
                cudaMemcpy(dx, x, bytes, cudaMemcpyHostToDevice);
                if (add)
                    cr_assert_eq(mp_cuda_add_rmsnorm(dout, dx, dy, dw, rows, n, 1e-6f, NULL), 0);
                else
                    cr_assert_eq(mp_cuda_rmsnorm(dout, dx, dw, rows, n, 1e-6f, NULL), 0);
                cr_assert_eq(mp_cuda_quantize_act(vdt, dout, n, rows, n, dq, NULL), 0);
                cudaMemcpy(x1, dx, bytes, cudaMemcpyDeviceToHost);
                cudaMemcpy(o1, dout, bytes, cudaMemcpyDeviceToHost);
                cudaMemcpy(q1, dq, qb, cudaMemcpyDeviceToHost);
                /* the fused one */
                cudaMemcpy(dx, x, bytes, cudaMemcpyHostToDevice);
                cudaMemset(dout, 0, bytes);
                cudaMemset(dq, 0, qb);
                cr_assert_eq(mp_cuda_rmsnorm_quant(dout, dx, add ? dy : NULL, dw, rows, n, 1e-6f, vdt, dq, NULL), 0);
                cr_assert_eq(cudaDeviceSynchronize(), cudaSuccess);
                cudaMemcpy(x2, dx, bytes, cudaMemcpyDeviceToHost);
                cudaMemcpy(o2, dout, bytes, cudaMemcpyDeviceToHost);
                cudaMemcpy(q2, dq, qb, cudaMemcpyDeviceToHost);
                cr_assert_eq(memcmp(x1, x2, bytes), 0, "seed %u: rows %ld n %ld vdt %d add %d: x differs", seed,
                             (long)rows, (long)n, vdt, add);
                cr_assert_eq(memcmp(o1, o2, bytes), 0, "seed %u: rows %ld n %ld vdt %d add %d: norm differs", seed,
                             (long)rows, (long)n, vdt, add);
                cr_assert_eq(memcmp(q1, q2, qb), 0, "seed %u: rows %ld n %ld vdt %d add %d: conversion differs",
                             seed, (long)rows, (long)n, vdt, add);
                cudaFree(dx); cudaFree(dy); cudaFree(dw); cudaFree(dout); cudaFree(dq);
                free(x); free(y); free(w); free(x1); free(o1); free(x2); free(o2); free(q1); free(q2);
            }
    /* F32 is not a conversion it does, and out must not alias x */
    cr_assert_eq(mp_cuda_rmsnorm_quant((float *)8, (float *)16, NULL, NULL, 1, 256, 1e-6f, MP_TYPE_F32, (void *)32,
                                       NULL), MP_CUDA_EINVAL);
    cr_assert_eq(mp_cuda_rmsnorm_quant((float *)8, (float *)8, NULL, NULL, 1, 256, 1e-6f, MP_TYPE_Q8_K, (void *)32,
                                       NULL), MP_CUDA_EINVAL);
}
#endif
