/* tests/gpu/test_cupti.c — `collect --cupti` on a real device: real kernels (RMSNorm, GEMV, add)
 * and copies issued inside the --cupti hooks' steps and layers must land in the trace's cupti
 * table with their (request, step, node), their names, positive durations and copy sizes, through
 * both writer paths; nothing may be dropped. Built only where the toolkit has CUPTI; where no
 * device exists gpu_main.c skips the executable (exit 77) saying why. */
#include <criterion/criterion.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "collector/cupti.h"
#include "collector/trace.h"
#include "kernels/quant.h"
#include "mp_config.h"
#if MP_HAVE_CUDA && !defined(MP_NO_CUDA)
#include "kernels/cuda/cuda_ops.h"
#include "tests/gpu/gpu_util.h"
#include "tests/unit/trace_fixture.h"
#endif

#if MP_HAVE_CUDA && !defined(MP_NO_CUDA)

static char g_dir[256];

/* One scalar answer of a query over the trace (the test fails if the query does not run). */
static int64_t q1(sqlite3 *db, const char *sql)
{
    sqlite3_stmt *st;
    cr_assert_eq(sqlite3_prepare_v2(db, sql, -1, &st, NULL), SQLITE_OK, "%s: %s", sql,
                 sqlite3_errmsg(db));
    cr_assert_eq(sqlite3_step(st), SQLITE_ROW, "%s", sql);
    int64_t v = sqlite3_column_type(st, 0) == SQLITE_NULL ? -1 : sqlite3_column_int64(st, 0);
    sqlite3_finalize(st);
    return v;
}

static void run(bool async)
{
    seed_rng();
    snprintf(g_dir, sizeof g_dir, "/tmp/mp_test_gpu_cupti_XXXXXX");
    cr_assert_not_null(mkdtemp(g_dir));
    char path[300];
    snprintf(path, sizeof path, "%s/t.db", g_dir);

    /* device data, uploaded before CUPTI starts */
    const int64_t rows = 8, n = 1024, n_out = 256;
    float *h_x = malloc(sizeof(float) * rows * n), *h_w = malloc(sizeof(float) * n);
    float *h_gw = malloc(sizeof(float) * n_out * n), *h_y = malloc(sizeof(float) * n_out);
    rnd_floats(h_x, rows * n, 1.0f);
    rnd_floats(h_w, n, 1.0f);
    rnd_floats(h_gw, n_out * n, 0.05f);
    float *d_x = dev_put(h_x, sizeof(float) * rows * n), *d_w = dev_put(h_w, sizeof(float) * n);
    float *d_gw = dev_put(h_gw, sizeof(float) * n_out * n);
    float *d_norm = dev_alloc(sizeof(float) * rows * n), *d_y = dev_alloc(sizeof(float) * n_out);
    float *d_in = dev_alloc(sizeof(float) * n);
    /* copy sizes the test can recognize: random, 4-byte multiples */
    const size_t up_bytes = 4 * (size_t)(256 + rnd_u64() % 768);      /* <= n floats */
    const size_t down_bytes = 4 * (size_t)(16 + rnd_u64() % 200);     /* <= n_out floats */

    mp_error err;
    mp_cupti *c;
    cr_assert_eq(mp_cupti_start(&c, &err), MP_OK, "seed %llu: %s", (unsigned long long)g_seed,
                 err.msg);
    mp_trace_writer *w = open_three_node_trace(path);
    mp_trace_hooks_state hs;
    mp_trace_async *as = NULL;
    mp_hooks inner;
    if (async)
        cr_assert_eq(mp_trace_async_start(w, &as, &inner, &err), MP_OK, "%s", err.msg);
    else
        inner = mp_trace_hooks(&hs, w);
    mp_cupti_hooks_state chs;
    mp_hooks h = async ? mp_cupti_hooks(&chs, c, &inner, mp_cupti_sink_async, as)
                       : mp_cupti_hooks(&chs, c, &inner, mp_cupti_sink_trace, w);

    /* request 7 (any id works), step 0: layer 0 RMSNorm; layer 1 an upload and a GEMV; then an
     * add outside any layer. Step 1: layer 2 a download. */
    const int64_t rq = 7;
    h.request_begin(h.user, rq, NULL, -1);
    h.step_begin(h.user, rq, 0, MP_PHASE_PREFILL, rows, 0);
    h.layer_begin(h.user, 0);
    MPC_OK(mp_cuda_rmsnorm(d_norm, d_x, d_w, rows, n, 1e-6f, NULL));
    h.layer_end(h.user, 0);
    h.layer_begin(h.user, 1);
    CUDA_OK(cudaMemcpy(d_in, h_x, up_bytes, cudaMemcpyHostToDevice));
    MPC_OK(mp_cuda_gemv(MP_TYPE_F32, d_gw, (size_t)n * sizeof(float), n_out, n, d_norm,
                        (size_t)n * sizeof(float), 1, d_y, n_out, NULL));
    h.layer_end(h.user, 1);
    MPC_OK(mp_cuda_add(d_y, d_y, n_out, NULL));
    h.step_end(h.user, 1000);
    h.step_begin(h.user, rq, 1, MP_PHASE_DECODE, 1, rows);
    h.layer_begin(h.user, 2);
    CUDA_OK(cudaMemcpy(h_y, d_y, down_bytes, cudaMemcpyDeviceToHost));
    h.layer_end(h.user, 2);
    h.step_end(h.user, 1000);
    h.request_end(h.user, 1);

    cr_assert_eq(chs.status, MP_OK, "seed %llu: %s", (unsigned long long)g_seed, chs.error.msg);
    if (async)
        cr_assert_eq(mp_trace_async_stop(as, &err), MP_OK, "%s", err.msg);
    else
        cr_assert_eq(hs.status, MP_OK, "%s", hs.error.msg);
    mp_cupti_counts cc;
    cr_assert_eq(mp_cupti_stop(c, &cc, &err), MP_OK, "%s", err.msg);
    cr_assert_eq(mp_trace_finish(w, &err), MP_OK, "%s", err.msg);
    mp_trace_writer_close(w);
    printf("cupti (%s writer): %lld kernels, %lld copies, %lld flushes in %.1f us each, "
           "max %lld buffers\n", async ? "async" : "sync", (long long)cc.n_kernel,
           (long long)cc.n_memcpy, (long long)cc.n_flushes,
           cc.n_flushes ? (double)cc.flush_ns * 1e-3 / (double)cc.n_flushes : 0.0,
           (long long)cc.max_buffers);
    cr_assert_eq(cc.n_dropped, 0, "CUPTI dropped %lld records", (long long)cc.n_dropped);
    cr_assert_eq(cc.n_incomplete, 0, "%lld incomplete records", (long long)cc.n_incomplete);
    cr_assert_eq(cc.n_unwritten, 0, "%lld records after the last step", (long long)cc.n_unwritten);
    cr_assert_eq(cc.n_flushes, 2);

    sqlite3 *db;
    cr_assert_eq(sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
    char sql[1024];
    /* every record counted is stored, and the footer agrees */
    cr_assert_eq(q1(db, "SELECT count(*) FROM cupti WHERE kind = 'kernel'"), cc.n_kernel);
    cr_assert_eq(q1(db, "SELECT count(*) FROM cupti WHERE kind = 'memcpy'"), cc.n_memcpy);
    cr_assert_eq(q1(db, "SELECT n_cupti FROM footer"), cc.n_kernel + cc.n_memcpy);
    cr_assert_eq(q1(db, "SELECT count(*) FROM cupti WHERE end_ns < start_ns OR start_ns <= 0"),
                 0, "records with impossible timestamps");
    /* the RMSNorm: one kernel, step 0, node 0 */
    cr_assert_eq(q1(db, "SELECT count(*) FROM cupti WHERE name LIKE '%rmsnorm_kernel%'"), 1);
    snprintf(sql, sizeof sql, "SELECT count(*) FROM cupti WHERE name LIKE '%%rmsnorm_kernel%%' AND "
             "kind = 'kernel' AND request_id = %lld AND step = 0 AND node_index = 0 AND "
             "end_ns > start_ns AND stream_id IS NOT NULL AND device_id IS NOT NULL",
             (long long)rq);
    cr_assert_eq(q1(db, sql), 1, "rmsnorm not tagged (request %lld, step 0, node 0)",
                 (long long)rq);
    /* the GEMV: at least one kernel, all of them step 0, node 1 */
    cr_assert_geq(q1(db, "SELECT count(*) FROM cupti WHERE name LIKE '%gemv%'"), 1);
    snprintf(sql, sizeof sql, "SELECT count(*) FROM cupti WHERE name LIKE '%%gemv%%' AND NOT "
             "(request_id = %lld AND step = 0 AND node_index = 1 AND end_ns > start_ns)",
             (long long)rq);
    cr_assert_eq(q1(db, sql), 0, "a gemv kernel not tagged (request %lld, step 0, node 1)",
                 (long long)rq);
    /* the add: inside step 0 but outside any layer */
    snprintf(sql, sizeof sql, "SELECT count(*) FROM cupti WHERE name LIKE '%%add_kernel%%' AND "
             "request_id = %lld AND step = 0 AND node_index IS NULL AND end_ns > start_ns",
             (long long)rq);
    cr_assert_eq(q1(db, sql), 1, "add kernel not tagged (request %lld, step 0, no node)",
                 (long long)rq);
    /* the copies: their bytes on their (step, node), kind named */
    snprintf(sql, sizeof sql, "SELECT sum(bytes) FROM cupti WHERE kind = 'memcpy' AND name = "
             "'HtoD' AND request_id = %lld AND step = 0 AND node_index = 1 AND end_ns > start_ns",
             (long long)rq);
    cr_assert_eq(q1(db, sql), (int64_t)up_bytes, "seed %llu: upload of %zu bytes",
                 (unsigned long long)g_seed, up_bytes);
    snprintf(sql, sizeof sql, "SELECT sum(bytes) FROM cupti WHERE kind = 'memcpy' AND name = "
             "'DtoH' AND request_id = %lld AND step = 1 AND node_index = 2 AND end_ns > start_ns",
             (long long)rq);
    cr_assert_eq(q1(db, sql), (int64_t)down_bytes, "seed %llu: download of %zu bytes",
                 (unsigned long long)g_seed, down_bytes);
    /* nothing else was issued inside step 1 */
    snprintf(sql, sizeof sql, "SELECT count(*) FROM cupti WHERE step = 1 AND NOT (kind = "
             "'memcpy' AND ifnull(node_index, -1) = 2)");
    cr_assert_eq(q1(db, sql), 0);
    /* an untagged record has request and step both NULL (node then NULL too) */
    cr_assert_eq(q1(db, "SELECT count(*) FROM cupti WHERE (request_id IS NULL) != (step IS NULL) "
                    "OR (request_id IS NULL AND node_index IS NOT NULL)"), 0);
    sqlite3_close(db);

    cudaFree(d_x); cudaFree(d_w); cudaFree(d_gw); cudaFree(d_norm); cudaFree(d_y); cudaFree(d_in);
    free(h_x); free(h_w); free(h_gw); free(h_y);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_dir);
    cr_assert_eq(system(cmd), 0);
}

Test(cupti, records_tagged_with_step_and_node_sync_writer) { run(false); }
Test(cupti, records_tagged_with_step_and_node_async_writer) { run(true); }

Test(cupti, second_session_refused_while_one_runs)
{
    mp_error err;
    mp_cupti *a, *b = NULL;
    cr_assert_eq(mp_cupti_start(&a, &err), MP_OK, "%s", err.msg);
    cr_assert_neq(mp_cupti_start(&b, &err), MP_OK);
    cr_assert_null(b);
    cr_assert(strstr(err.msg, "already running"), "%s", err.msg);
    cr_assert_eq(mp_cupti_stop(a, NULL, &err), MP_OK, "%s", err.msg);
    cr_assert_eq(mp_cupti_start(&b, &err), MP_OK, "after stop: %s", err.msg);
    cr_assert_eq(mp_cupti_stop(b, NULL, &err), MP_OK, "%s", err.msg);
}

#endif
