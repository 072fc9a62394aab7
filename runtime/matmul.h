/* runtime/matmul.h — weight × activations over the thread pool (internal to the runtime).
 *
 * y (n_rows, W.ne[1]) = x (n_rows, W.ne[0]) · Wᵀ for any weight type: the activations are
 * converted once per call to the weight type's vec_dot_type (F32 rows are used in place), then
 * the weight's output rows are split into chunks, one pool task each, so that every weight row
 * is streamed from memory once per call whatever the number of activation rows.
 */
#ifndef MP_RUNTIME_MATMUL_H
#define MP_RUNTIME_MATMUL_H

#include <stddef.h>
#include <stdint.h>

#include "runtime/model.h"
#include "runtime/threadpool.h"

/* Upper bound of the bytes of one activation row of n elements in any vec_dot_type (F32 is the
 * widest: 4 bytes per element; Q8_0 and Q8_K need less). Scratch buffers are sized with it. */
static inline size_t mp_act_row_bytes_max(int64_t n)
{
    return (size_t)n * sizeof(float);
}

/* Convert n_rows rows of n_cols floats (x_stride floats apart) to type vdt, rows act_row_bytes
 * apart in q (act_row_bytes = mp_type_row_bytes(vdt, n_cols)). Parallel over rows. */
void mp_act_quantize(mp_pool *pool, int vdt, const float *x, int64_t x_stride, int64_t n_rows,
                     int64_t n_cols, void *q);

/* Rows per pool task for a matrix of n_out rows: enough tasks to balance the threads, few
 * enough that per-task overhead stays small. mp_matmul_chunk_rows cuts about
 * MP_MATMUL_TASKS_PER_THREAD tasks per thread; mp_chunk_rows about n_tasks in all; both give at
 * least 16 rows per task. */
#define MP_MATMUL_TASKS_PER_THREAD 4
int64_t mp_chunk_rows(int64_t n_out, int64_t n_tasks);
int64_t mp_matmul_chunk_rows(int64_t n_out, int n_threads);

/* y = x · Wᵀ. qbuf holds n_rows × mp_act_row_bytes_max(W.ne[0]) bytes (unused for float
 * weights). */
void mp_matmul(mp_pool *pool, const mp_tensor *w, const float *x, int64_t n_rows, float *y,
               void *qbuf);

#endif
