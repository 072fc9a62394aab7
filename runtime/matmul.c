/* runtime/matmul.c — weight × activations over the thread pool (see matmul.h). Most of a
 * decode step's time is spent in the mp_gemv_rows / mp_gemm_rows calls made from here and from
 * the MoE block: they stream the weights, and decode speed is memory bandwidth over bytes. */
#include "runtime/matmul.h"

#include <string.h>

#include "kernels/quant.h"

/* values up to which mp_act_quantize runs on the caller instead of the pool */
#define MP_ACT_QUANTIZE_INLINE 16384

typedef struct quant_job {
    int vdt;
    const float *x;
    int64_t x_stride, n_cols;
    char *q;
    size_t q_row_bytes;
} quant_job;

static void quant_task(void *ctx, int64_t row, int thread)
{
    const quant_job *j = ctx;
    /* vdt comes from a weight type's ops table, so it is always an activation format */
    (void)mp_quantize_activation(j->vdt, j->x + row * j->x_stride,
                                 j->q + (size_t)row * j->q_row_bytes, j->n_cols);
}

void mp_act_quantize(mp_pool *pool, int vdt, const float *x, int64_t x_stride, int64_t n_rows,
                     int64_t n_cols, void *q)
{
    quant_job j = {vdt, x, x_stride, n_cols, q, mp_type_row_bytes(vdt, n_cols)};
    /* a few rows (a decode step's 8 expert hiddens: 6,144 values, ~2 µs on one core) cost less
     * on the caller than a parallel region's start and finish across the pool */
    if (n_rows * n_cols <= MP_ACT_QUANTIZE_INLINE) {
        for (int64_t r = 0; r < n_rows; r++)
            quant_task(&j, r, 0);
        return;
    }
    mp_pool_run(pool, n_rows, quant_task, &j);
}

int64_t mp_chunk_rows(int64_t n_out, int64_t n_tasks)
{
    /* 16 rows keep a task well above the ~1 us cost of claiming it */
    const int64_t chunk = (n_out + n_tasks - 1) / n_tasks;
    return chunk < 16 ? 16 : chunk;
}

int64_t mp_matmul_chunk_rows(int64_t n_out, int n_threads)
{
    /* several tasks per thread absorb uneven thread speeds (hyper-threads, a busy core) */
    return mp_chunk_rows(n_out, MP_MATMUL_TASKS_PER_THREAD * (int64_t)n_threads);
}

typedef struct matmul_job {
    const mp_type_ops *ops;
    const mp_tensor *w;
    const void *xq;      /* (n_rows, W.ne[0]) in vec_dot_type, xq_row_bytes apart */
    size_t xq_row_bytes;
    int64_t n_rows;
    float *y;            /* (n_rows, W.ne[1]) */
    int64_t chunk;
} matmul_job;

static void matmul_task(void *ctx, int64_t task, int thread)
{
    const matmul_job *j = ctx;
    const int64_t n_out = j->w->ne[1];
    const int64_t r0 = task * j->chunk;
    const int64_t r1 = r0 + j->chunk < n_out ? r0 + j->chunk : n_out;
    if (j->n_rows == 1)
        mp_gemv_rows(j->ops, j->w->data, j->w->row_bytes, j->w->ne[0], r0, r1, j->xq, j->y + r0);
    else
        mp_gemm_rows(j->ops, j->w->data, j->w->row_bytes, j->w->ne[0], r0, r1, j->xq,
                     j->xq_row_bytes, j->n_rows, j->y + r0, n_out);
}

void mp_matmul(mp_pool *pool, const mp_tensor *w, const float *x, int64_t n_rows, float *y,
               void *qbuf)
{
    const mp_type_ops *ops = mp_type_ops_get(w->type);
    const int64_t n_in = w->ne[0];
    const void *xq = x;
    size_t xq_row_bytes = (size_t)n_in * sizeof(float);
    if (ops->vec_dot_type != MP_TYPE_F32) {
        mp_act_quantize(pool, ops->vec_dot_type, x, n_in, n_rows, n_in, qbuf);
        xq = qbuf;
        xq_row_bytes = mp_type_row_bytes(ops->vec_dot_type, n_in);
    }
    const int64_t chunk = mp_matmul_chunk_rows(w->ne[1], mp_pool_n_threads(pool));
    matmul_job j = {ops, w, xq, xq_row_bytes, n_rows, y, chunk};
    mp_pool_run(pool, (w->ne[1] + chunk - 1) / chunk, matmul_task, &j);
}
