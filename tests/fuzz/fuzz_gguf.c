/* tests/fuzz/fuzz_gguf.c — libFuzzer target for the GGUF reader (gguf/gguf.c).
 *
 * Feeds arbitrary bytes to mp_gguf_open_buffer. On success every getter is exercised on every key
 * and tensor, and each tensor's first and last data byte is read, so that any out-of-bounds view
 * the reader let through is caught by ASan. Any accepted image must satisfy the reader's
 * invariants (checked here with __builtin_trap so that a violation is a crash the fuzzer keeps).
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "gguf/gguf.h"

static void check(bool ok)
{
    if (!ok)
        __builtin_trap();
}

static void exercise(const mp_gguf *g, const uint8_t *data, size_t size)
{
    mp_error err;
    char text[512];
    volatile uint8_t sink = 0;
    for (int64_t i = 0; i < mp_gguf_n_kv(g); i++) {
        mp_str k = mp_gguf_kv_key(g, i);
        check(k.len > 0 && k.len < 65536);
        check((const uint8_t *)k.ptr >= data && (const uint8_t *)k.ptr + k.len <= data + size);
        char key[256];
        if (k.len >= sizeof key)
            continue;
        memcpy(key, k.ptr, k.len);
        key[k.len] = 0;
        mp_gguf_kv_format(g, i, text, sizeof text, 8);
        check(strlen(text) < sizeof text);
        if (strlen(key) != k.len) /* an embedded NUL: not findable by a C string */
            continue;
        check(mp_gguf_find_key(g, key) == i);
        uint32_t u32; uint64_t u64; int64_t i64; float f32; double f64; bool b; mp_str s;
        (void)mp_gguf_get_u32(g, key, &u32, &err);
        (void)mp_gguf_get_u64(g, key, &u64, &err);
        (void)mp_gguf_get_i64(g, key, &i64, &err);
        (void)mp_gguf_get_f32(g, key, &f32, &err);
        (void)mp_gguf_get_f64(g, key, &f64, &err);
        (void)mp_gguf_get_bool(g, key, &b, &err);
        if (mp_gguf_get_str(g, key, &s, &err) == MP_OK && s.len)
            sink ^= (uint8_t)s.ptr[s.len - 1];
        mp_gguf_vtype et;
        uint64_t n;
        if (mp_gguf_get_arr(g, key, &et, &n, &err) != MP_OK)
            continue;
        uint64_t probe[3] = {0, n / 2, n ? n - 1 : 0};
        for (int p = 0; p < 3; p++) {
            if (mp_gguf_get_arr_str(g, key, probe[p], &s, &err) == MP_OK && s.len)
                sink ^= (uint8_t)s.ptr[s.len - 1];
            (void)mp_gguf_get_arr_f64(g, key, probe[p], &f64, &err);
            (void)mp_gguf_get_arr_i64(g, key, probe[p], &i64, &err);
        }
        check(mp_gguf_get_arr_str(g, key, n, &s, &err) != MP_OK); /* one past the end */
        const uint8_t *raw = mp_gguf_arr_data(g, key);
        if (raw && n)
            sink ^= raw[0];
    }
    for (int64_t i = 0; i < mp_gguf_n_tensors(g); i++) {
        const mp_gguf_tensor *t = mp_gguf_tensor_at(g, i);
        check(t->nbytes > 0 && t->file_offset + t->nbytes <= size);
        check(t->file_offset % mp_gguf_alignment(g) == 0);
        sink ^= ((const uint8_t *)t->data)[0] ^ ((const uint8_t *)t->data)[t->nbytes - 1];
        char name[80];
        if (t->name.len < sizeof name) {
            memcpy(name, t->name.ptr, t->name.len);
            name[t->name.len] = 0;
            if (strlen(name) == t->name.len)
                check(mp_gguf_find_tensor(g, name) == t);
        }
    }
    (void)sink;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    /* Copy into an exact-size heap block so that ASan sees any read past the end. */
    uint8_t *copy = malloc(size ? size : 1);
    if (!copy)
        return 0;
    memcpy(copy, data, size);
    mp_gguf *g = NULL;
    mp_error err;
    if (mp_gguf_open_buffer(copy, size, "fuzz", &g, &err) == MP_OK) {
        exercise(g, copy, size);
        mp_gguf_close(g);
    } else {
        check(err.code != MP_OK && strchr(err.msg, '\n') == NULL && strstr(err.msg, "fuzz"));
    }
    free(copy);
    return 0;
}
