/* tests/unit/test_gguf.c — the GGUF reader and writer (gguf/gguf.c, gguf/gguf_write.c).
 *
 *  - round trip: every value type, arrays, every supported tensor type with random data (the seed
 *    is printed on failure), a custom alignment, data streamed in uneven chunks;
 *  - independence: a file written by the PyPI `gguf` package's GGUFWriter
 *    (tests/fixtures/gen_gguf_fixture.py) reads back with the expected keys, values and tensors;
 *  - fail closed: crafted corrupt images, each asserting the error code AND that the message
 *    names the byte offset of the bad field; every truncation of a valid image is rejected;
 *  - the writer removes its temporary file on abort and on every failure.
 */
#include <criterion/criterion.h>
#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "kernels/quant.h"
#include "gguf/gguf.h"
#include "gguf/gguf_experts.h"
#include "runtime/model.h"

/* ---- helpers ---- */

static char tmpdir[256];

static void make_tmpdir(void)
{
    snprintf(tmpdir, sizeof tmpdir, "/tmp/mp_test_gguf_XXXXXX");
    cr_assert_not_null(mkdtemp(tmpdir), "mkdtemp: %s", strerror(errno));
}

/* Number of entries in tmpdir (to prove no temporary file was left behind). */
static int tmpdir_entries(void)
{
    DIR *d = opendir(tmpdir);
    cr_assert_not_null(d);
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)))
        if (e->d_name[0] != '.')
            n++;
    closedir(d);
    return n;
}

static void remove_tmpdir(void)
{
    DIR *d = opendir(tmpdir);
    if (!d)
        return;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.')
            continue;
        char p[512];
        snprintf(p, sizeof p, "%s/%s", tmpdir, e->d_name);
        unlink(p);
    }
    closedir(d);
    rmdir(tmpdir);
}

static char *tmp_path(const char *name)
{
    static char p[512];
    snprintf(p, sizeof p, "%s/%s", tmpdir, name);
    return p;
}

static bool mp_str_is(mp_str s, const char *c) { return mp_str_eq(s, c); }

/* ---- an image builder for crafted files (little-endian, per the GGUF spec) ---- */

typedef struct img {
    uint8_t *p;
    size_t len, cap;
} img;

static size_t put(img *b, const void *d, size_t n)
{
    size_t at = b->len;
    if (b->len + n > b->cap) {
        b->cap = (b->len + n) * 2 + 64;
        b->p = realloc(b->p, b->cap);
        cr_assert_not_null(b->p);
    }
    if (n)
        memcpy(b->p + b->len, d, n);
    b->len += n;
    return at;
}
static size_t u32(img *b, uint32_t v) { return put(b, &v, 4); }
static size_t u64(img *b, uint64_t v) { return put(b, &v, 8); }
static size_t str(img *b, const char *s)
{
    size_t at = u64(b, strlen(s));
    put(b, s, strlen(s));
    return at;
}
static void header(img *b, uint32_t version, uint64_t n_tensors, uint64_t n_kv)
{
    put(b, "GGUF", 4);
    u32(b, version);
    u64(b, n_tensors);
    u64(b, n_kv);
}
static void pad(img *b, size_t alignment)
{
    static const uint8_t z[256];
    put(b, z, (alignment - b->len % alignment) % alignment);
}
static void zeros(img *b, size_t n)
{
    for (size_t i = 0; i < n; i++)
        put(b, "", 1);
}
/* Tensor info; returns the position of its data-offset field. */
static size_t tinfo(img *b, const char *name, uint32_t n_dims, const uint64_t *ne, uint32_t type,
                    uint64_t offset)
{
    str(b, name);
    u32(b, n_dims);
    for (uint32_t d = 0; d < n_dims; d++)
        u64(b, ne[d]);
    u32(b, type);
    return u64(b, offset);
}

/* Open b and expect failure with code, the message naming "offset <at>:" and the file name. */
static void expect_fail(img *b, mp_status code, size_t at, const char *what)
{
    mp_gguf *g = (mp_gguf *)0x1;
    mp_error err;
    mp_status st = mp_gguf_open_buffer(b->p, b->len, "crafted.gguf", &g, &err);
    char want[64];
    snprintf(want, sizeof want, "offset %zu:", at);
    cr_assert_eq(st, code, "%s: expected code %d, got %d (%s)", what, code, st,
                 st ? err.msg : "accepted");
    cr_assert_eq(err.code, code);
    cr_assert_null(g, "%s: handle must be NULL on failure", what);
    cr_assert_not_null(strstr(err.msg, want), "%s: message must name %s: %s", what, want, err.msg);
    cr_assert_not_null(strstr(err.msg, "crafted.gguf"), "%s: message must name the file: %s",
                       what, err.msg);
    cr_assert_null(strchr(err.msg, '\n'));
    free(b->p);
    memset(b, 0, sizeof *b);
}

static mp_gguf *expect_ok(img *b)
{
    mp_gguf *g = NULL;
    mp_error err;
    mp_status st = mp_gguf_open_buffer(b->p, b->len, "crafted.gguf", &g, &err);
    cr_assert_eq(st, MP_OK, "expected a valid image: %s", err.msg);
    return g;
}

/* ---- round trip ---- */

TestSuite(gguf, .init = make_tmpdir, .fini = remove_tmpdir);

static const int round_trip_types[] = {MP_TYPE_F32, MP_TYPE_F16, MP_TYPE_BF16, MP_TYPE_Q4_0, MP_TYPE_Q4_1,
                                       MP_TYPE_Q5_0, MP_TYPE_Q5_1, MP_TYPE_IQ4_NL, MP_TYPE_MXFP4,
                                       MP_TYPE_Q8_0, MP_TYPE_Q2_K, MP_TYPE_Q3_K, MP_TYPE_Q4_K, MP_TYPE_Q5_K,
                                       MP_TYPE_Q6_K, MP_TYPE_IQ4_XS};
#define N_RT_TYPES ((int)(sizeof round_trip_types / sizeof round_trip_types[0]))

Test(gguf, round_trip_every_value_and_tensor_type)
{
    unsigned seed = (unsigned)time(NULL);
    srand(seed);
    const char *path = tmp_path("rt.gguf");
    mp_gguf_writer *w;
    mp_error err;
    cr_assert_eq(mp_gguf_writer_open(path, &w, &err), MP_OK, "%s", err.msg);
    cr_assert_eq(mp_gguf_writer_set_alignment(w, 64, &err), MP_OK, "%s", err.msg);
    uint8_t v_u8 = 250;
    int8_t v_i8 = -120;
    uint16_t v_u16 = 65000;
    int16_t v_i16 = -32000;
    int64_t v_i64 = INT64_MIN + 5;
    double v_f64 = -1.0 / 3.0;
    cr_assert_eq(mp_gguf_add_val(w, "t.u8", MP_GGUF_UINT8, &v_u8, &err), MP_OK, "%s", err.msg);
    cr_assert_eq(mp_gguf_add_val(w, "t.i8", MP_GGUF_INT8, &v_i8, &err), MP_OK);
    cr_assert_eq(mp_gguf_add_val(w, "t.u16", MP_GGUF_UINT16, &v_u16, &err), MP_OK);
    cr_assert_eq(mp_gguf_add_val(w, "t.i16", MP_GGUF_INT16, &v_i16, &err), MP_OK);
    cr_assert_eq(mp_gguf_add_u32(w, "t.u32", 4000000000u, &err), MP_OK);
    cr_assert_eq(mp_gguf_add_i32(w, "t.i32", -2000000000, &err), MP_OK);
    cr_assert_eq(mp_gguf_add_f32(w, "t.f32", 1e-6f, &err), MP_OK);
    cr_assert_eq(mp_gguf_add_bool(w, "t.bool", true, &err), MP_OK);
    cr_assert_eq(mp_gguf_add_str(w, "t.str", "tab\there \xc3\xa9", &err), MP_OK);
    cr_assert_eq(mp_gguf_add_u64(w, "t.u64", UINT64_MAX, &err), MP_OK);
    cr_assert_eq(mp_gguf_add_val(w, "t.i64", MP_GGUF_INT64, &v_i64, &err), MP_OK);
    cr_assert_eq(mp_gguf_add_val(w, "t.f64", MP_GGUF_FLOAT64, &v_f64, &err), MP_OK);
    const char *strs[] = {"<s>", "", "hello", "\xe2\x96\x81world"};
    cr_assert_eq(mp_gguf_add_arr_str(w, "t.arr_str", strs, 4, &err), MP_OK);
    const int32_t i32s[] = {-1, 0, 2147483647};
    const float f32s[] = {0.5f, -2.25f};
    const uint8_t bools[] = {1, 0, 1};
    const uint64_t u64s[] = {0, (uint64_t)1 << 63};
    const double f64s[] = {1e300};
    const int16_t i16s[] = {-7};
    cr_assert_eq(mp_gguf_add_arr(w, "t.arr_i32", MP_GGUF_INT32, i32s, 3, &err), MP_OK);
    cr_assert_eq(mp_gguf_add_arr(w, "t.arr_f32", MP_GGUF_FLOAT32, f32s, 2, &err), MP_OK);
    cr_assert_eq(mp_gguf_add_arr(w, "t.arr_bool", MP_GGUF_BOOL, bools, 3, &err), MP_OK);
    cr_assert_eq(mp_gguf_add_arr(w, "t.arr_u64", MP_GGUF_UINT64, u64s, 2, &err), MP_OK);
    cr_assert_eq(mp_gguf_add_arr(w, "t.arr_f64", MP_GGUF_FLOAT64, f64s, 1, &err), MP_OK);
    cr_assert_eq(mp_gguf_add_arr(w, "t.arr_i16", MP_GGUF_INT16, i16s, 1, &err), MP_OK);
    cr_assert_eq(mp_gguf_add_arr(w, "t.arr_empty", MP_GGUF_UINT8, NULL, 0, &err), MP_OK);

    /* One tensor per supported type, shapes of 1..4 dims; data random. */
    uint8_t *data[N_RT_TYPES];
    size_t nbytes[N_RT_TYPES];
    int64_t shapes[N_RT_TYPES][4];
    char name[N_RT_TYPES][32];
    for (int i = 0; i < N_RT_TYPES; i++) {
        int type = round_trip_types[i];
        uint32_t n_dims = (uint32_t)(i % 4) + 1;
        int64_t *ne = shapes[i];
        ne[0] = mp_type_block_elems(type) * (1 + rand() % 3);
        for (int d = 1; d < 4; d++)
            ne[d] = (uint32_t)d < n_dims ? 1 + rand() % 3 : 1;
        nbytes[i] = mp_type_row_bytes(type, ne[0]) * (size_t)(ne[1] * ne[2] * ne[3]);
        data[i] = malloc(nbytes[i]);
        for (size_t k = 0; k < nbytes[i]; k++)
            data[i][k] = (uint8_t)rand();
        snprintf(name[i], sizeof name[i], "blk.%d.%s.weight", i, mp_type_name(type));
        cr_assert_eq(mp_gguf_add_tensor_info(w, name[i], n_dims, ne, type, &err), MP_OK, "%s",
                     err.msg);
    }
    for (int i = 0; i < N_RT_TYPES; i++) {
        /* Uneven chunks: the writer must track partial tensors. */
        size_t done = 0;
        while (done < nbytes[i]) {
            size_t n = 1 + (size_t)rand() % 50;
            if (n > nbytes[i] - done)
                n = nbytes[i] - done;
            cr_assert_eq(mp_gguf_write_data(w, data[i] + done, n, &err), MP_OK, "%s", err.msg);
            done += n;
        }
    }
    cr_assert_eq(mp_gguf_writer_finish(w, &err), MP_OK, "%s", err.msg);
    cr_assert_eq(tmpdir_entries(), 1, "only the final file remains");

    mp_gguf *g;
    cr_assert_eq(mp_gguf_open(path, &g, &err), MP_OK, "seed %u: %s", seed, err.msg);
    cr_assert_eq(mp_gguf_version(g), 3);
    cr_assert_eq(mp_gguf_alignment(g), 64);
    cr_assert_eq(mp_gguf_data_offset(g) % 64, 0);
    cr_assert_eq(mp_gguf_n_kv(g), 21);
    cr_assert_eq(mp_gguf_find_key(g, "general.alignment"), 0);
    uint64_t u;
    int64_t i;
    uint32_t u32v;
    float f;
    double d;
    bool b;
    mp_str s;
    cr_assert_eq(mp_gguf_kv_type(g, mp_gguf_find_key(g, "t.u8")), MP_GGUF_UINT8);
    cr_assert_eq(mp_gguf_get_u64(g, "t.u8", &u, &err), MP_OK);
    cr_assert_eq(u, 250);
    cr_assert_eq(mp_gguf_kv_type(g, mp_gguf_find_key(g, "t.i8")), MP_GGUF_INT8);
    cr_assert_eq(mp_gguf_get_i64(g, "t.i8", &i, &err), MP_OK);
    cr_assert_eq(i, -120);
    cr_assert_eq(mp_gguf_kv_type(g, mp_gguf_find_key(g, "t.u16")), MP_GGUF_UINT16);
    cr_assert_eq(mp_gguf_get_u32(g, "t.u16", &u32v, &err), MP_OK);
    cr_assert_eq(u32v, 65000);
    cr_assert_eq(mp_gguf_kv_type(g, mp_gguf_find_key(g, "t.i16")), MP_GGUF_INT16);
    cr_assert_eq(mp_gguf_get_i64(g, "t.i16", &i, &err), MP_OK);
    cr_assert_eq(i, -32000);
    cr_assert_eq(mp_gguf_get_u32(g, "t.u32", &u32v, &err), MP_OK);
    cr_assert_eq(u32v, 4000000000u);
    cr_assert_eq(mp_gguf_get_i64(g, "t.i32", &i, &err), MP_OK);
    cr_assert_eq(i, -2000000000);
    cr_assert_eq(mp_gguf_get_f32(g, "t.f32", &f, &err), MP_OK);
    cr_assert_eq(f, 1e-6f);
    cr_assert_eq(mp_gguf_get_bool(g, "t.bool", &b, &err), MP_OK);
    cr_assert(b);
    cr_assert_eq(mp_gguf_get_str(g, "t.str", &s, &err), MP_OK);
    cr_assert(mp_str_is(s, "tab\there \xc3\xa9"));
    cr_assert_eq(mp_gguf_get_u64(g, "t.u64", &u, &err), MP_OK);
    cr_assert_eq(u, UINT64_MAX);
    cr_assert_eq(mp_gguf_get_i64(g, "t.i64", &i, &err), MP_OK);
    cr_assert_eq(i, INT64_MIN + 5);
    cr_assert_eq(mp_gguf_get_f64(g, "t.f64", &d, &err), MP_OK);
    cr_assert_eq(d, -1.0 / 3.0);

    /* Conversions only when the value fits; wrong types and missing keys name key and file. */
    cr_assert_eq(mp_gguf_get_u32(g, "t.i8", &u32v, &err), MP_ERR_FORMAT);
    cr_assert_eq(mp_gguf_get_u32(g, "t.u64", &u32v, &err), MP_ERR_FORMAT);
    cr_assert_eq(mp_gguf_get_i64(g, "t.u64", &i, &err), MP_ERR_FORMAT);
    cr_assert_not_null(strstr(err.msg, "t.u64"), "%s", err.msg);
    cr_assert_eq(mp_gguf_get_str(g, "t.u32", &s, &err), MP_ERR_FORMAT);
    cr_assert_not_null(strstr(err.msg, "expected a string"), "%s", err.msg);
    cr_assert_eq(mp_gguf_get_bool(g, "t.u8", &b, &err), MP_ERR_FORMAT);
    cr_assert_eq(mp_gguf_get_u32(g, "t.str", &u32v, &err), MP_ERR_FORMAT);
    cr_assert_eq(mp_gguf_get_u32(g, "no.such.key", &u32v, &err), MP_ERR_FORMAT);
    cr_assert_not_null(strstr(err.msg, "no.such.key"), "%s", err.msg);
    cr_assert_not_null(strstr(err.msg, path), "%s", err.msg);
    cr_assert_eq(mp_gguf_find_key(g, "no.such.key"), -1);

    /* Arrays. */
    mp_gguf_vtype et;
    uint64_t n;
    cr_assert_eq(mp_gguf_get_arr(g, "t.arr_str", &et, &n, &err), MP_OK);
    cr_assert_eq(et, MP_GGUF_STRING);
    cr_assert_eq(n, 4);
    for (uint64_t k = 0; k < 4; k++) {
        cr_assert_eq(mp_gguf_get_arr_str(g, "t.arr_str", k, &s, &err), MP_OK);
        cr_assert(mp_str_is(s, strs[k]), "element %llu", (unsigned long long)k);
    }
    cr_assert_eq(mp_gguf_get_arr_str(g, "t.arr_str", 4, &s, &err), MP_ERR_ARG);
    cr_assert_null(mp_gguf_arr_data(g, "t.arr_str"));
    for (uint64_t k = 0; k < 3; k++) {
        cr_assert_eq(mp_gguf_get_arr_i64(g, "t.arr_i32", k, &i, &err), MP_OK);
        cr_assert_eq(i, i32s[k]);
    }
    cr_assert_eq(mp_gguf_get_arr_f64(g, "t.arr_f32", 1, &d, &err), MP_OK);
    cr_assert_eq(d, -2.25);
    cr_assert_eq(mp_gguf_get_arr_i64(g, "t.arr_f32", 0, &i, &err), MP_ERR_FORMAT);
    cr_assert_eq(mp_gguf_get_arr_str(g, "t.arr_f32", 0, &s, &err), MP_ERR_FORMAT);
    cr_assert_eq(mp_gguf_get_arr(g, "t.arr_bool", &et, &n, &err), MP_OK);
    cr_assert_eq(et, MP_GGUF_BOOL);
    cr_assert_eq(memcmp(mp_gguf_arr_data(g, "t.arr_bool"), bools, 3), 0);
    cr_assert_eq(mp_gguf_get_arr_i64(g, "t.arr_u64", 1, &i, &err), MP_ERR_FORMAT, "2^63 > i64");
    cr_assert_eq(memcmp(mp_gguf_arr_data(g, "t.arr_u64"), u64s, 16), 0);
    cr_assert_eq(mp_gguf_get_arr_f64(g, "t.arr_f64", 0, &d, &err), MP_OK);
    cr_assert_eq(d, 1e300);
    cr_assert_eq(mp_gguf_get_arr_i64(g, "t.arr_i16", 0, &i, &err), MP_OK);
    cr_assert_eq(i, -7);
    cr_assert_eq(mp_gguf_get_arr(g, "t.arr_empty", &et, &n, &err), MP_OK);
    cr_assert_eq(n, 0);
    cr_assert_eq(et, MP_GGUF_UINT8);
    cr_assert_eq(mp_gguf_get_arr(g, "t.u8", &et, &n, &err), MP_ERR_FORMAT);

    /* Tensors: types, shapes, alignment, data. */
    cr_assert_eq(mp_gguf_n_tensors(g), N_RT_TYPES);
    for (int k = 0; k < N_RT_TYPES; k++) {
        const mp_gguf_tensor *t = mp_gguf_find_tensor(g, name[k]);
        cr_assert_not_null(t, "%s", name[k]);
        cr_assert_eq(t, mp_gguf_tensor_at(g, k));
        cr_assert_eq(t->type, round_trip_types[k]);
        cr_assert_eq(t->n_dims, (uint32_t)(k % 4) + 1);
        for (int dd = 0; dd < 4; dd++)
            cr_assert_eq(t->ne[dd], shapes[k][dd]);
        cr_assert_eq(t->nbytes, nbytes[k]);
        cr_assert_eq(t->file_offset % 64, 0);
        cr_assert_eq(memcmp(t->data, data[k], nbytes[k]), 0, "seed %u: tensor %s data", seed,
                     name[k]);
        free(data[k]);
    }
    cr_assert_null(mp_gguf_find_tensor(g, "absent"));
    cr_assert_null(mp_gguf_tensor_at(g, N_RT_TYPES));
    mp_gguf_close(g);
}

Test(gguf, large_string_array_elements_by_index)
{
    /* The tokenizer reads vocabularies of ~150k strings element by element. */
    enum { N = 150000 };
    char **v = malloc(N * sizeof *v);
    for (int k = 0; k < N; k++) {
        v[k] = malloc(16);
        snprintf(v[k], 16, "tok%d", k * 7);
    }
    const char *path = tmp_path("vocab.gguf");
    mp_gguf_writer *w;
    mp_error err;
    cr_assert_eq(mp_gguf_writer_open(path, &w, &err), MP_OK);
    cr_assert_eq(mp_gguf_add_arr_str(w, "tokenizer.ggml.tokens", (const char *const *)v, N, &err),
                 MP_OK);
    cr_assert_eq(mp_gguf_writer_finish(w, &err), MP_OK, "%s", err.msg);
    mp_gguf *g;
    cr_assert_eq(mp_gguf_open(path, &g, &err), MP_OK, "%s", err.msg);
    for (int k = N - 1; k >= 0; k -= 997) {
        mp_str s;
        cr_assert_eq(mp_gguf_get_arr_str(g, "tokenizer.ggml.tokens", (uint64_t)k, &s, &err), MP_OK);
        cr_assert(mp_str_is(s, v[k]), "element %d", k);
    }
    mp_gguf_close(g);
    for (int k = 0; k < N; k++)
        free(v[k]);
    free(v);
}

Test(gguf, kv_format_abbreviates_and_escapes)
{
    const char *path = tmp_path("fmt.gguf");
    mp_gguf_writer *w;
    mp_error err;
    int32_t many[100];
    for (int k = 0; k < 100; k++)
        many[k] = k;
    cr_assert_eq(mp_gguf_writer_open(path, &w, &err), MP_OK);
    cr_assert_eq(mp_gguf_add_arr(w, "many", MP_GGUF_INT32, many, 100, &err), MP_OK);
    cr_assert_eq(mp_gguf_add_str(w, "nl", "a\nb\"c", &err), MP_OK);
    cr_assert_eq(mp_gguf_add_f32(w, "f", 0.1f, &err), MP_OK);
    cr_assert_eq(mp_gguf_writer_finish(w, &err), MP_OK);
    mp_gguf *g;
    cr_assert_eq(mp_gguf_open(path, &g, &err), MP_OK, "%s", err.msg);
    char buf[256];
    mp_gguf_kv_format(g, 0, buf, sizeof buf, 3);
    cr_assert_str_eq(buf, "[0, 1, 2, ...]");
    mp_gguf_kv_format(g, 1, buf, sizeof buf, 3);
    cr_assert_str_eq(buf, "\"a\\nb\\\"c\"");
    mp_gguf_kv_format(g, 2, buf, sizeof buf, 3);
    cr_assert_str_eq(buf, "0.1", "shortest round-trip form of 0.1f");
    char small[8];
    mp_gguf_kv_format(g, 0, small, sizeof small, 100);
    cr_assert_str_eq(small, "[0, ...", "truncated output ends in ...");
    mp_gguf_close(g);
}

/* ---- the independent writer's file ---- */

Test(gguf, reads_pypi_gguf_writer_fixture)
{
    const char *root = getenv("MP_SOURCE_ROOT");
    cr_assert_not_null(root, "MP_SOURCE_ROOT must be set (tests/meson.build)");
    char path[1024];
    snprintf(path, sizeof path, "%s/tests/fixtures/gguf_pywriter.gguf", root);
    mp_gguf *g;
    mp_error err;
    cr_assert_eq(mp_gguf_open(path, &g, &err), MP_OK, "%s", err.msg);
    cr_assert_eq(mp_gguf_version(g), 3);
    cr_assert_eq(mp_gguf_alignment(g), 64);
    cr_assert_eq(mp_gguf_n_kv(g), 21);
    mp_str s;
    cr_assert_eq(mp_gguf_get_str(g, "general.architecture", &s, &err), MP_OK);
    cr_assert(mp_str_is(s, "qwen3moe"));
    cr_assert_eq(mp_gguf_get_str(g, "test.str", &s, &err), MP_OK);
    cr_assert(mp_str_is(s, "h\xc3\xa9llo"));
    uint64_t u;
    int64_t i;
    double d;
    bool b;
    struct { const char *key; mp_gguf_vtype type; int64_t value; } ints[] = {
        {"test.u8", MP_GGUF_UINT8, 200},        {"test.i8", MP_GGUF_INT8, -100},
        {"test.u16", MP_GGUF_UINT16, 60000},    {"test.i16", MP_GGUF_INT16, -30000},
        {"test.u32", MP_GGUF_UINT32, 4000000000}, {"test.i32", MP_GGUF_INT32, -2000000000},
        {"test.i64", MP_GGUF_INT64, -(1LL << 40)}, {"qwen3moe.block_count", MP_GGUF_UINT32, 2},
        {"qwen3moe.expert_count", MP_GGUF_UINT32, 4},
    };
    for (size_t k = 0; k < sizeof ints / sizeof ints[0]; k++) {
        cr_assert_eq(mp_gguf_kv_type(g, mp_gguf_find_key(g, ints[k].key)), ints[k].type, "%s",
                     ints[k].key);
        cr_assert_eq(mp_gguf_get_i64(g, ints[k].key, &i, &err), MP_OK, "%s", err.msg);
        cr_assert_eq(i, ints[k].value, "%s", ints[k].key);
    }
    cr_assert_eq(mp_gguf_get_u64(g, "test.u64", &u, &err), MP_OK);
    cr_assert_eq(u, (1ULL << 40) + 3);
    cr_assert_eq(mp_gguf_get_f64(g, "test.f32", &d, &err), MP_OK);
    cr_assert_eq(d, 0.25);
    cr_assert_eq(mp_gguf_get_f64(g, "test.f64", &d, &err), MP_OK);
    cr_assert_eq(d, 3.5);
    cr_assert_eq(mp_gguf_get_bool(g, "test.bool", &b, &err), MP_OK);
    cr_assert(b);
    const char *strs[] = {"a", "bc", "", "d\xc3\xa9" "f"};
    for (uint64_t k = 0; k < 4; k++) {
        cr_assert_eq(mp_gguf_get_arr_str(g, "test.arr_str", k, &s, &err), MP_OK);
        cr_assert(mp_str_is(s, strs[k]));
    }
    cr_assert_eq(mp_gguf_get_arr_i64(g, "test.arr_i32", 1, &i, &err), MP_OK);
    cr_assert_eq(i, -2);
    cr_assert_eq(mp_gguf_get_arr_f64(g, "test.arr_f32", 1, &d, &err), MP_OK);
    cr_assert_eq(d, -1.5);
    cr_assert_eq(mp_gguf_get_arr_i64(g, "test.arr_u8", 1, &i, &err), MP_OK);
    cr_assert_eq(i, 255);

    struct { const char *name; int type; int64_t ne[4]; uint32_t n_dims; } tens[] = {
        {"token_embd.weight", MP_TYPE_F32, {32, 8, 1, 1}, 2},
        {"blk.0.attn_norm.weight", MP_TYPE_F16, {32, 1, 1, 1}, 1},
        {"output.weight", MP_TYPE_Q6_K, {256, 2, 1, 1}, 2},
        {"blk.1.attn_q.weight", MP_TYPE_Q4_K, {256, 2, 1, 1}, 2},
        {"blk.0.ffn_gate_inp.weight", MP_TYPE_BF16, {32, 4, 1, 1}, 2},
        {"blk.0.ffn_gate_exps.weight", MP_TYPE_Q8_0, {32, 32, 4, 1}, 3},
        {"blk.0.ffn_up_exps.weight", MP_TYPE_Q4_0, {32, 32, 4, 1}, 3},
        {"blk.0.ffn_down_exps.weight", MP_TYPE_Q8_0, {32, 32, 4, 1}, 3},
        {"blk.1.ffn_gate_exps.weight", MP_TYPE_Q8_0, {32, 32, 4, 1}, 3},
        {"blk.1.ffn_up_exps.weight", MP_TYPE_Q4_0, {32, 32, 4, 1}, 3},
        {"blk.1.ffn_down_exps.weight", MP_TYPE_Q8_0, {32, 32, 4, 1}, 3},
    };
    cr_assert_eq(mp_gguf_n_tensors(g), 11);
    for (int k = 0; k < 11; k++) {
        const mp_gguf_tensor *t = mp_gguf_tensor_at(g, k);
        cr_assert(mp_str_is(t->name, tens[k].name), "tensor %d", k);
        cr_assert_eq(mp_gguf_find_tensor(g, tens[k].name), t);
        cr_assert_eq(t->type, tens[k].type, "%s", tens[k].name);
        cr_assert_eq(t->n_dims, tens[k].n_dims);
        for (int dd = 0; dd < 4; dd++)
            cr_assert_eq(t->ne[dd], tens[k].ne[dd], "%s ne[%d]", tens[k].name, dd);
        cr_assert_eq(t->file_offset % 64, 0);
        cr_assert_eq(t->nbytes, mp_type_row_bytes(t->type, t->ne[0]) *
                                    (uint64_t)(t->ne[1] * t->ne[2] * t->ne[3]));
        if (k >= 2) { /* the generator's byte pattern: byte j = (j * 7 + k) & 0xff */
            const uint8_t *p = t->data;
            for (uint64_t j = 0; j < t->nbytes; j += 13)
                cr_assert_eq(p[j], (uint8_t)((j * 7 + (uint64_t)k) & 0xff), "%s byte %llu",
                             tens[k].name, (unsigned long long)j);
        }
    }
    const float *emb = mp_gguf_find_tensor(g, "token_embd.weight")->data; /* 64-aligned */
    for (int k = 0; k < 256; k++)
        cr_assert_eq(emb[k], (float)k);
    cr_assert_eq(mp_gguf_tensor_at(g, 0)->file_offset, mp_gguf_data_offset(g));
    mp_gguf_close(g);
}

/* ---- fail closed: crafted images ---- */

Test(gguf, rejects_bad_header)
{
    img b = {0};
    expect_fail(&b, MP_ERR_FORMAT, 0, "empty image");
    put(&b, "GGUX", 4), u32(&b, 3), u64(&b, 0), u64(&b, 0);
    expect_fail(&b, MP_ERR_FORMAT, 0, "bad magic");
    header(&b, 4, 0, 0);
    expect_fail(&b, MP_ERR_FORMAT, 4, "version 4");
    header(&b, 1, 0, 0);
    expect_fail(&b, MP_ERR_UNSUPPORTED, 4, "version 1");
    header(&b, 0x03000000u, 0, 0);
    expect_fail(&b, MP_ERR_UNSUPPORTED, 4, "big-endian");
    put(&b, "GGUF", 4), u32(&b, 3), u32(&b, 0);
    expect_fail(&b, MP_ERR_FORMAT, 8, "truncated tensor count");
    put(&b, "GGUF", 4), u32(&b, 3), u64(&b, 0);
    expect_fail(&b, MP_ERR_FORMAT, 16, "truncated key count");
    header(&b, 3, 0, UINT64_MAX);
    expect_fail(&b, MP_ERR_FORMAT, 16, "n_kv = 2^64-1");
    header(&b, 3, 0, 1);
    expect_fail(&b, MP_ERR_FORMAT, 16, "n_kv = 1 with no bytes left");
    header(&b, 3, (uint64_t)1 << 62, 0);
    zeros(&b, 64);
    expect_fail(&b, MP_ERR_FORMAT, 8, "n_tensors = 2^62");
}

Test(gguf, rejects_bad_metadata)
{
    img b = {0};
    size_t at;
    header(&b, 3, 0, 1);
    at = u64(&b, UINT64_MAX);
    zeros(&b, 16);
    expect_fail(&b, MP_ERR_FORMAT, at, "key length 2^64-1");

    header(&b, 3, 0, 1);
    at = str(&b, "");
    u32(&b, 0), zeros(&b, 4);
    expect_fail(&b, MP_ERR_FORMAT, at, "empty key");

    header(&b, 3, 0, 1);
    str(&b, "k");
    at = u32(&b, 13);
    zeros(&b, 8);
    expect_fail(&b, MP_ERR_FORMAT, at, "unknown value type 13");

    header(&b, 3, 0, 1);
    str(&b, "k"), u32(&b, MP_GGUF_STRING);
    at = u64(&b, 1000);
    put(&b, "abc", 3);
    expect_fail(&b, MP_ERR_FORMAT, at, "string past the end");

    header(&b, 3, 0, 1);
    str(&b, "k"), u32(&b, MP_GGUF_UINT64);
    at = put(&b, "1234", 4);
    zeros(&b, 1); /* 5 bytes where 8 are needed; n_kv bound still passes */
    expect_fail(&b, MP_ERR_FORMAT, at, "truncated u64 value");

    header(&b, 3, 0, 1);
    str(&b, "k"), u32(&b, MP_GGUF_BOOL);
    at = put(&b, "\x02", 1);
    zeros(&b, 4);
    expect_fail(&b, MP_ERR_FORMAT, at, "bool 2");

    header(&b, 3, 0, 1);
    str(&b, "k"), u32(&b, MP_GGUF_ARRAY), u32(&b, MP_GGUF_UINT64);
    at = u64(&b, (uint64_t)1 << 61); /* × 8 bytes overflows 2^64 */
    zeros(&b, 16);
    expect_fail(&b, MP_ERR_FORMAT, at, "array length × element size overflows");

    header(&b, 3, 0, 1);
    str(&b, "k"), u32(&b, MP_GGUF_ARRAY), u32(&b, MP_GGUF_STRING);
    at = u64(&b, UINT64_MAX);
    zeros(&b, 16);
    expect_fail(&b, MP_ERR_FORMAT, at, "string array count 2^64-1");

    header(&b, 3, 0, 1);
    str(&b, "k"), u32(&b, MP_GGUF_ARRAY), u32(&b, MP_GGUF_STRING), u64(&b, 2);
    str(&b, "x");
    at = u64(&b, 99);
    expect_fail(&b, MP_ERR_FORMAT, at, "string element past the end");

    header(&b, 3, 0, 1);
    str(&b, "k"), u32(&b, MP_GGUF_ARRAY);
    at = u32(&b, MP_GGUF_ARRAY);
    u64(&b, 0);
    expect_fail(&b, MP_ERR_FORMAT, at, "nested array");

    header(&b, 3, 0, 1);
    str(&b, "k"), u32(&b, MP_GGUF_ARRAY);
    at = u32(&b, 77);
    u64(&b, 0);
    expect_fail(&b, MP_ERR_FORMAT, at, "unknown array element type");

    header(&b, 3, 0, 1);
    str(&b, "k"), u32(&b, MP_GGUF_ARRAY), u32(&b, MP_GGUF_BOOL), u64(&b, 3);
    put(&b, "\x01\x00", 2);
    at = put(&b, "\x05", 1);
    expect_fail(&b, MP_ERR_FORMAT, at, "bool array element 5");

    header(&b, 3, 0, 2);
    str(&b, "dup"), u32(&b, MP_GGUF_UINT8), put(&b, "\x01", 1);
    at = str(&b, "dup");
    u32(&b, MP_GGUF_UINT8), put(&b, "\x01", 1);
    expect_fail(&b, MP_ERR_FORMAT, at, "duplicate key");
}

Test(gguf, rejects_bad_alignment)
{
    img b = {0};
    size_t at;
    header(&b, 3, 0, 1);
    str(&b, "general.alignment"), u32(&b, MP_GGUF_UINT32);
    at = u32(&b, 48);
    expect_fail(&b, MP_ERR_FORMAT, at, "alignment 48");
    header(&b, 3, 0, 1);
    str(&b, "general.alignment"), u32(&b, MP_GGUF_UINT32);
    at = u32(&b, 0);
    expect_fail(&b, MP_ERR_FORMAT, at, "alignment 0");
    header(&b, 3, 0, 1);
    str(&b, "general.alignment"), u32(&b, MP_GGUF_UINT32);
    at = u32(&b, 1); /* a power of two, but f32 data could then start at any address */
    expect_fail(&b, MP_ERR_FORMAT, at, "alignment 1");
    header(&b, 3, 0, 1);
    at = str(&b, "general.alignment");
    u32(&b, MP_GGUF_UINT64), u64(&b, 32);
    expect_fail(&b, MP_ERR_FORMAT, at, "alignment as u64");
}

/* One tensor "t" with the given dims/type/offset after a header with no keys; data zeros. */
static size_t one_tensor(img *b, uint32_t n_dims, const uint64_t *ne, uint32_t type,
                         uint64_t offset, size_t data_bytes)
{
    header(b, 3, 1, 0);
    size_t off_at = tinfo(b, "t", n_dims, ne, type, offset);
    pad(b, 32);
    zeros(b, data_bytes);
    return off_at;
}

Test(gguf, rejects_bad_tensor_infos)
{
    img b = {0};
    uint64_t ne4[5] = {32, 2, 1, 1, 1};
    /* Positions inside the info of "t" (header 24 bytes; name 8 + 1). */
    const size_t dims_at = 24 + 9, ne_at = dims_at + 4;

    one_tensor(&b, 0, ne4, MP_TYPE_F32, 0, 64);
    expect_fail(&b, MP_ERR_FORMAT, dims_at, "n_dims 0");
    one_tensor(&b, 5, ne4, MP_TYPE_F32, 0, 64);
    expect_fail(&b, MP_ERR_FORMAT, dims_at, "n_dims 5");
    uint64_t ne_zero[2] = {32, 0};
    one_tensor(&b, 2, ne_zero, MP_TYPE_F32, 0, 64);
    expect_fail(&b, MP_ERR_FORMAT, ne_at + 8, "dimension 0");
    uint64_t ne_neg[1] = {(uint64_t)1 << 63};
    one_tensor(&b, 1, ne_neg, MP_TYPE_F32, 0, 64);
    expect_fail(&b, MP_ERR_FORMAT, ne_at, "dimension 2^63");
    uint64_t ne_big[2] = {(uint64_t)1 << 32, (uint64_t)1 << 32};
    one_tensor(&b, 2, ne_big, MP_TYPE_F32, 0, 64);
    expect_fail(&b, MP_ERR_FORMAT, ne_at, "element count 2^64 overflows");
    uint64_t ne_bytes[1] = {(uint64_t)1 << 62};
    one_tensor(&b, 1, ne_bytes, MP_TYPE_F32, 0, 64);
    expect_fail(&b, MP_ERR_FORMAT, ne_at, "byte size 2^64 overflows");
    uint64_t ne_q[1] = {16};
    one_tensor(&b, 1, ne_q, MP_TYPE_Q8_0, 0, 64);
    expect_fail(&b, MP_ERR_FORMAT, ne_at, "ne[0] 16 with Q8_0 blocks of 32");
    uint64_t ne_k[2] = {128, 2};
    one_tensor(&b, 2, ne_k, MP_TYPE_Q4_K, 0, 512);
    expect_fail(&b, MP_ERR_FORMAT, ne_at, "ne[0] 128 with Q4_K blocks of 256");

    const size_t type_at = ne_at + 16; /* two dims */
    one_tensor(&b, 2, ne4, 16 /* IQ2_XXS */, 0, 512);
    expect_fail(&b, MP_ERR_UNSUPPORTED, type_at, "IQ2_XXS");
    one_tensor(&b, 2, ne4, MP_TYPE_Q8_K, 0, 1024);
    expect_fail(&b, MP_ERR_UNSUPPORTED, type_at, "Q8_K is not a weight type");
    one_tensor(&b, 2, ne4, 1000, 0, 512);
    expect_fail(&b, MP_ERR_FORMAT, type_at, "unknown type 1000");

    size_t at = one_tensor(&b, 2, ne4, MP_TYPE_F32, 8, 512);
    expect_fail(&b, MP_ERR_FORMAT, at, "offset 8 with alignment 32");
    at = one_tensor(&b, 2, ne4, MP_TYPE_F32, 64, 256);
    expect_fail(&b, MP_ERR_FORMAT, at, "data past the end of the file");
    at = one_tensor(&b, 2, ne4, MP_TYPE_F32, UINT64_MAX - 31, 256);
    expect_fail(&b, MP_ERR_FORMAT, at, "offset overflows");
    at = one_tensor(&b, 2, ne4, MP_TYPE_F32, 0, 255);
    expect_fail(&b, MP_ERR_FORMAT, at, "data one byte short");
    at = one_tensor(&b, 2, ne4, MP_TYPE_F32, 0, 256);
    mp_gguf_close(expect_ok(&b)); /* the same image with its last byte is valid */
    free(b.p);
    memset(&b, 0, sizeof b);

    header(&b, 3, 1, 0);
    at = str(&b, "");
    u32(&b, 1), u64(&b, 4), u32(&b, 0), u64(&b, 0);
    pad(&b, 32), zeros(&b, 16);
    expect_fail(&b, MP_ERR_FORMAT, at, "empty tensor name");
    header(&b, 3, 1, 0);
    at = str(&b, "a_name_that_is_longer_than_the_sixty_four_bytes_the_gguf_spec_allows");
    u32(&b, 1), u64(&b, 4), u32(&b, 0), u64(&b, 0);
    pad(&b, 32), zeros(&b, 16);
    expect_fail(&b, MP_ERR_FORMAT, at, "tensor name over 64 bytes");
}

Test(gguf, rejects_duplicate_and_overlapping_tensors)
{
    img b = {0};
    uint64_t ne[1] = {8}; /* 32 bytes of F32 */
    header(&b, 3, 2, 0);
    tinfo(&b, "a", 1, ne, MP_TYPE_F32, 0);
    size_t at = b.len;
    tinfo(&b, "a", 1, ne, MP_TYPE_F32, 32);
    pad(&b, 32), zeros(&b, 64);
    expect_fail(&b, MP_ERR_FORMAT, at, "duplicate tensor name");

    /* b starts inside a: the message names b's absolute data offset. */
    uint64_t ne_a[1] = {16}; /* 64 bytes */
    header(&b, 3, 2, 0);
    tinfo(&b, "a", 1, ne_a, MP_TYPE_F32, 0);
    tinfo(&b, "b", 1, ne, MP_TYPE_F32, 32);
    pad(&b, 32);
    size_t data_at = b.len;
    zeros(&b, 96);
    expect_fail(&b, MP_ERR_FORMAT, data_at + 32, "overlapping tensors");

    header(&b, 3, 2, 0);
    tinfo(&b, "a", 1, ne, MP_TYPE_F32, 0);
    tinfo(&b, "b", 1, ne, MP_TYPE_F32, 0);
    pad(&b, 32);
    data_at = b.len;
    zeros(&b, 32);
    expect_fail(&b, MP_ERR_FORMAT, data_at, "two tensors at one offset");

    /* Adjacent, in reverse order of their infos, is fine. */
    header(&b, 3, 2, 0);
    tinfo(&b, "a", 1, ne, MP_TYPE_F32, 32);
    tinfo(&b, "b", 1, ne, MP_TYPE_F32, 0);
    pad(&b, 32), zeros(&b, 64);
    mp_gguf *g = expect_ok(&b);
    cr_assert_eq(mp_gguf_find_tensor(g, "a")->file_offset, mp_gguf_data_offset(g) + 32);
    mp_gguf_close(g);
    free(b.p);
}

Test(gguf, every_truncation_is_rejected)
{
    /* A valid image with keys of every kind and a tensor whose data ends the file: every strict
     * prefix must be rejected as malformed with an offset, never read out of bounds. */
    img b = {0};
    header(&b, 3, 1, 5);
    str(&b, "a"), u32(&b, MP_GGUF_UINT32), u32(&b, 7);
    str(&b, "b"), u32(&b, MP_GGUF_STRING), str(&b, "hello");
    str(&b, "c"), u32(&b, MP_GGUF_ARRAY), u32(&b, MP_GGUF_STRING), u64(&b, 2), str(&b, "x"),
        str(&b, "yz");
    str(&b, "d"), u32(&b, MP_GGUF_ARRAY), u32(&b, MP_GGUF_INT16), u64(&b, 2), u32(&b, 0);
    str(&b, "general.alignment"), u32(&b, MP_GGUF_UINT32), u32(&b, 16);
    uint64_t ne[2] = {32, 1};
    tinfo(&b, "w", 2, ne, MP_TYPE_Q8_0, 0);
    pad(&b, 16);
    zeros(&b, 34);
    mp_gguf_close(expect_ok(&b));
    for (size_t n = 0; n < b.len; n++) {
        uint8_t *copy = malloc(n ? n : 1); /* exact size: ASan catches any over-read */
        memcpy(copy, b.p, n);
        mp_gguf *g = NULL;
        mp_error err;
        mp_status st = mp_gguf_open_buffer(copy, n, "cut.gguf", &g, &err);
        cr_assert_eq(st, MP_ERR_FORMAT, "prefix of %zu bytes: got %d", n, st);
        cr_assert_null(g);
        cr_assert_not_null(strstr(err.msg, "cut.gguf: offset "), "prefix %zu: %s", n, err.msg);
        free(copy);
    }
    free(b.p);
}

Test(gguf, version_2_is_accepted)
{
    img b = {0};
    header(&b, 2, 0, 1);
    str(&b, "general.architecture"), u32(&b, MP_GGUF_STRING), str(&b, "olmoe");
    mp_gguf *g = expect_ok(&b);
    cr_assert_eq(mp_gguf_version(g), 2);
    mp_str s;
    mp_error err;
    cr_assert_eq(mp_gguf_get_str(g, "general.architecture", &s, &err), MP_OK);
    cr_assert(mp_str_is(s, "olmoe"));
    mp_gguf_close(g);
    free(b.p);
}

Test(gguf, open_errors_name_the_file)
{
    mp_gguf *g = (mp_gguf *)0x1;
    mp_error err;
    cr_assert_eq(mp_gguf_open(tmp_path("missing.gguf"), &g, &err), MP_ERR_IO);
    cr_assert_null(g);
    cr_assert_not_null(strstr(err.msg, "missing.gguf"), "%s", err.msg);
    cr_assert_eq(mp_gguf_open(tmpdir, &g, &err), MP_ERR_IO, "a directory");
    FILE *f = fopen(tmp_path("empty.gguf"), "wb");
    fclose(f);
    cr_assert_eq(mp_gguf_open(tmp_path("empty.gguf"), &g, &err), MP_ERR_FORMAT);
    cr_assert_not_null(strstr(err.msg, "empty.gguf: offset 0:"), "%s", err.msg);
}

/* ---- writer failures leave nothing behind ---- */

Test(gguf, writer_abort_and_failures_remove_the_temp_file)
{
    mp_gguf_writer *w;
    mp_error err;
    const char *path = tmp_path("out.gguf");
    int64_t ne[2] = {32, 2};

    cr_assert_eq(mp_gguf_writer_open(path, &w, &err), MP_OK);
    cr_assert_eq(mp_gguf_add_u32(w, "a", 1, &err), MP_OK);
    cr_assert_eq(tmpdir_entries(), 1, "the temporary file exists while writing");
    mp_gguf_writer_abort(w);
    cr_assert_eq(tmpdir_entries(), 0, "abort removes the temporary file");

    /* Too little data: finish fails, nothing remains. */
    cr_assert_eq(mp_gguf_writer_open(path, &w, &err), MP_OK);
    cr_assert_eq(mp_gguf_add_tensor_info(w, "t", 2, ne, MP_TYPE_Q8_0, &err), MP_OK);
    uint8_t buf[68] = {0};
    cr_assert_eq(mp_gguf_write_data(w, buf, 67, &err), MP_OK);
    cr_assert_eq(mp_gguf_writer_finish(w, &err), MP_ERR_ARG);
    cr_assert_not_null(strstr(err.msg, "67 of its 68"), "%s", err.msg);
    cr_assert_eq(tmpdir_entries(), 0);

    /* Too much data: the write fails at once; later calls fail; abort frees. */
    cr_assert_eq(mp_gguf_writer_open(path, &w, &err), MP_OK);
    cr_assert_eq(mp_gguf_add_tensor_info(w, "t", 2, ne, MP_TYPE_Q8_0, &err), MP_OK);
    cr_assert_eq(mp_gguf_write_data(w, buf, 68, &err), MP_OK);
    cr_assert_eq(mp_gguf_write_data(w, buf, 1, &err), MP_ERR_ARG);
    cr_assert_eq(tmpdir_entries(), 0);
    cr_assert_eq(mp_gguf_add_u32(w, "late", 1, &err), MP_ERR_ARG);
    mp_gguf_writer_abort(w);

    /* Invalid additions fail and poison the writer. */
    struct { const char *what; int code; } cases[] = {
        {"duplicate key", MP_ERR_ARG}, {"bad alignment", MP_ERR_ARG},
        {"unsupported type", MP_ERR_UNSUPPORTED}, {"ne[0] off block", MP_ERR_ARG},
        {"duplicate tensor", MP_ERR_ARG}, {"key after data", MP_ERR_ARG},
        {"bool 2", MP_ERR_ARG},
    };
    for (int k = 0; k < (int)(sizeof cases / sizeof cases[0]); k++) {
        cr_assert_eq(mp_gguf_writer_open(path, &w, &err), MP_OK);
        mp_status st = MP_OK;
        int64_t ne_bad[1] = {16};
        uint8_t two = 2;
        switch (k) {
        case 0: mp_gguf_add_u32(w, "k", 1, &err); st = mp_gguf_add_u32(w, "k", 2, &err); break;
        case 1: st = mp_gguf_writer_set_alignment(w, 24, &err); break;
        case 2: st = mp_gguf_add_tensor_info(w, "t", 2, ne, 16 /* IQ2_XXS */, &err); break;
        case 3: st = mp_gguf_add_tensor_info(w, "t", 1, ne_bad, MP_TYPE_Q4_0, &err); break;
        case 4:
            mp_gguf_add_tensor_info(w, "t", 2, ne, MP_TYPE_F32, &err);
            st = mp_gguf_add_tensor_info(w, "t", 2, ne, MP_TYPE_F32, &err);
            break;
        case 5:
            mp_gguf_add_tensor_info(w, "t", 1, ne, MP_TYPE_F32, &err);
            mp_gguf_write_data(w, buf, 64, &err);
            st = mp_gguf_add_u32(w, "k", 1, &err);
            break;
        case 6: st = mp_gguf_add_val(w, "b", MP_GGUF_BOOL, &two, &err); break;
        }
        cr_assert_eq(st, cases[k].code, "%s: got %d (%s)", cases[k].what, st, err.msg);
        cr_assert_eq(tmpdir_entries(), 0, "%s: the temporary file is removed", cases[k].what);
        cr_assert_eq(mp_gguf_writer_finish(w, &err), MP_ERR_ARG, "%s", cases[k].what);
        cr_assert_eq(tmpdir_entries(), 0);
    }
    struct stat sb;
    cr_assert_neq(stat(path, &sb), 0, "no output file after failures");
}

Test(gguf, writer_replaces_existing_file_only_on_success)
{
    const char *path = tmp_path("keep.gguf");
    FILE *f = fopen(path, "wb");
    fputs("old", f);
    fclose(f);
    mp_gguf_writer *w;
    mp_error err;
    cr_assert_eq(mp_gguf_writer_open(path, &w, &err), MP_OK);
    mp_gguf_add_u32(w, "a", 1, &err);
    mp_gguf_writer_abort(w);
    f = fopen(path, "rb");
    char buf[8] = {0};
    cr_assert_eq(fread(buf, 1, sizeof buf, f), 3);
    fclose(f);
    cr_assert_str_eq(buf, "old", "abort leaves the previous file untouched");
    cr_assert_eq(mp_gguf_writer_open(path, &w, &err), MP_OK);
    mp_gguf_add_u32(w, "a", 1, &err);
    cr_assert_eq(mp_gguf_writer_finish(w, &err), MP_OK);
    mp_gguf *g;
    cr_assert_eq(mp_gguf_open(path, &g, &err), MP_OK, "%s", err.msg);
    cr_assert_eq(mp_gguf_n_kv(g), 1);
    mp_gguf_close(g);
}

/* Fault injection: the file system refuses to grow the file past 4 KiB (RLIMIT_FSIZE, as a full
 * disk would), in a child process so that the limit touches nothing else. The writer must report
 * an I/O error naming the file and leave neither the temporary nor the final file behind. */
Test(gguf, writer_io_failure_leaves_nothing)
{
    const char *path = tmp_path("big.gguf");
    pid_t pid = fork();
    cr_assert(pid >= 0);
    if (pid == 0) {
        signal(SIGXFSZ, SIG_IGN); /* get EFBIG from write() instead of a signal */
        struct rlimit rl = {4096, 4096};
        if (setrlimit(RLIMIT_FSIZE, &rl) != 0)
            _exit(10);
        mp_gguf_writer *w;
        mp_error err;
        if (mp_gguf_writer_open(path, &w, &err) != MP_OK)
            _exit(11);
        int64_t ne[2] = {1024, 64}; /* 256 KiB of F32 */
        if (mp_gguf_add_tensor_info(w, "t", 2, ne, MP_TYPE_F32, &err) != MP_OK)
            _exit(12);
        static float row[1024];
        mp_status st = MP_OK;
        for (int r = 0; r < 64 && st == MP_OK; r++)
            st = mp_gguf_write_data(w, row, sizeof row, &err);
        if (st == MP_OK)
            st = mp_gguf_writer_finish(w, &err);
        else
            mp_gguf_writer_abort(w);
        if (st != MP_ERR_IO)
            _exit(13);
        if (!strstr(err.msg, "big.gguf") || !strstr(err.msg, "offset"))
            _exit(14);
        _exit(0);
    }
    int ws;
    cr_assert_eq(waitpid(pid, &ws, 0), pid);
    cr_assert(WIFEXITED(ws), "child died");
    cr_assert_eq(WEXITSTATUS(ws), 0, "child check %d failed (see the test's _exit codes)",
                 WEXITSTATUS(ws));
    cr_assert_eq(tmpdir_entries(), 0, "neither the temporary nor the final file remains");
}

Test(gguf, writer_open_in_missing_directory_fails)
{
    mp_gguf_writer *w = (mp_gguf_writer *)0x1;
    mp_error err;
    cr_assert_eq(mp_gguf_writer_open("/nonexistent-dir/x.gguf", &w, &err), MP_ERR_IO);
    cr_assert_null(w);
    cr_assert_not_null(strstr(err.msg, "/nonexistent-dir/x.gguf"), "%s", err.msg);
}

/* Hyperparameters a hostile file declares are checked before they size anything: block_count
 * 0xFFFFFFFF reached a 3 GB calloc (ASan aborted), rope.freq_base = +inf was accepted. */
static mp_status load_hparams(uint32_t block_count, float freq_base, mp_error *err)
{
    char path[512];
    snprintf(path, sizeof path, "%s/h.gguf", tmpdir);
    unlink(path);
    mp_gguf_writer *w;
    cr_assert_eq(mp_gguf_writer_open(path, &w, err), MP_OK, "%s", err->msg);
    cr_assert_eq(mp_gguf_add_str(w, "general.architecture", "qwen3moe", err), MP_OK);
    const char *keys[] = {"qwen3moe.block_count", "qwen3moe.context_length", "qwen3moe.embedding_length",
                          "qwen3moe.attention.head_count", "qwen3moe.expert_count",
                          "qwen3moe.expert_used_count", "qwen3moe.expert_feed_forward_length"};
    const uint32_t vals[] = {block_count, 64, 8, 1, 4, 2, 8};
    for (int i = 0; i < 7; i++)
        cr_assert_eq(mp_gguf_add_u32(w, keys[i], vals[i], err), MP_OK, "%s", err->msg);
    cr_assert_eq(mp_gguf_add_f32(w, "qwen3moe.rope.freq_base", freq_base, err), MP_OK);
    cr_assert_eq(mp_gguf_add_f32(w, "qwen3moe.attention.layer_norm_rms_epsilon", 1e-6f, err), MP_OK);
    const int64_t ne[2] = {8, 4};
    cr_assert_eq(mp_gguf_add_tensor_info(w, "token_embd.weight", 2, ne, MP_TYPE_F32, err), MP_OK);
    static float zeros[32];
    cr_assert_eq(mp_gguf_write_data(w, zeros, sizeof zeros, err), MP_OK);
    cr_assert_eq(mp_gguf_writer_finish(w, err), MP_OK, "%s", err->msg);
    mp_model *m = NULL;
    mp_status st = mp_model_load(path, &m, err);
    mp_model_free(m);
    return st;
}

Test(gguf, hostile_hyperparameters_are_refused_before_use)
{
    mp_error err;
    cr_assert_eq(load_hparams(0xFFFFFFFFu, 1e6f, &err), MP_ERR_LIMIT);
    cr_assert(strstr(err.msg, "qwen3moe.block_count: 4294967295, expected 1..4096"), "%s", err.msg);
    cr_assert_eq(load_hparams(1, INFINITY, &err), MP_ERR_FORMAT);
    cr_assert(strstr(err.msg, "rope freq base inf must be finite and > 0"), "%s", err.msg);
    cr_assert_eq(load_hparams(1, NAN, &err), MP_ERR_FORMAT);
}

/* Gate and up fused in one tensor (blk.N.ffn_gate_up_exps.weight, llama.cpp's --fuse-gate-up-exps):
 * its name is an expert tensor's, each kind is half of every expert's rows (gate first), down is
 * not in it, and an odd row count is refused in one line naming the tensor. */
Test(gguf, experts_with_gate_and_up_fused)
{
    int64_t layer, expert;
    int kind;
    const char *nm = "blk.7.ffn_gate_up_exps.weight";
    cr_assert(mp_gguf_expert_name((mp_str){nm, strlen(nm)}, &layer, &kind, &expert));
    cr_assert(layer == 7 && kind == MP_GGUF_EXPERT_GATE && expert == -1);
    for (int odd = 0; odd < 2; odd++) {
        const int64_t cols = 32, rows = odd ? 5 : 4, n_exp = 3;
        const char *path = tmp_path(odd ? "fused-odd.gguf" : "fused.gguf");
        mp_gguf_writer *w;
        mp_error err;
        cr_assert_eq(mp_gguf_writer_open(path, &w, &err), MP_OK, "%s", err.msg);
        const int64_t ne[3] = {cols, rows, n_exp};
        cr_assert_eq(mp_gguf_add_tensor_info(w, "blk.0.ffn_gate_up_exps.weight", 3, ne, MP_TYPE_F32, &err), MP_OK,
                     "%s", err.msg);
        float *v = malloc(sizeof(float) * (size_t)(cols * rows * n_exp));
        for (int64_t i = 0; i < cols * rows * n_exp; i++)
            v[i] = (float)i;
        cr_assert_eq(mp_gguf_write_data(w, v, sizeof(float) * (size_t)(cols * rows * n_exp), &err), MP_OK, "%s",
                     err.msg);
        cr_assert_eq(mp_gguf_writer_finish(w, &err), MP_OK, "%s", err.msg);
        mp_gguf *g;
        cr_assert_eq(mp_gguf_open(path, &g, &err), MP_OK, "%s", err.msg);
        mp_gguf_experts x;
        if (odd) {
            cr_assert_eq(mp_gguf_layer_experts(g, 0, MP_GGUF_EXPERT_UP, 0, &x, &err), MP_ERR_FORMAT);
            cr_assert(strstr(err.msg, "blk.0.ffn_gate_up_exps.weight: 5 rows per expert: expected an even count") &&
                          !strchr(err.msg, '\n'), "%s", err.msg);
        } else {
            for (int k = MP_GGUF_EXPERT_GATE; k <= MP_GGUF_EXPERT_UP; k++) {
                cr_assert_eq(mp_gguf_layer_experts(g, 0, k, 0, &x, &err), MP_OK, "%s", err.msg);
                cr_assert(x.present && x.fused && !x.split && x.ne0 == cols && x.ne1 == rows / 2 &&
                          x.n_expert == n_exp && x.expert_bytes == sizeof(float) * (size_t)(cols * rows / 2));
                for (int64_t e = 0; e < n_exp; e++) {
                    const float *d = (const float *)mp_gguf_expert_data(g, 0, k, &x, e);
                    /* expert e's rows start at e * rows; up's at rows / 2 past them */
                    cr_assert_eq(d[0], (float)((e * rows + (k == MP_GGUF_EXPERT_UP ? rows / 2 : 0)) * cols),
                                 "kind %d expert %lld", k, (long long)e);
                }
            }
            cr_assert_eq(mp_gguf_layer_experts(g, 0, MP_GGUF_EXPERT_DOWN, 0, &x, &err), MP_OK);
            cr_assert_not(x.present, "down is not in the fused tensor");
        }
        mp_gguf_close(g);
        free(v);
        unlink(path);
    }
}
