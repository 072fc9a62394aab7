/* tests/unit/test_tokenizer_gguf.c — mp_tokenizer_load on real GGUF files: the tiny Qwen3-MoE
 * fixture written by the `gguf` Python package (tests/fixtures/hf), and small files written with
 * mp_gguf_writer whose tokenizer.ggml.* metadata is wrong in one way each.
 * Needs the GGUF reader and writer (gguf/gguf.c, gguf_write.c).
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tokenizer/bytelevel.h"
#include "gguf/gguf.h"
#include "tokenizer/tokenizer.h"

Test(tokenizer_gguf, loads_hf_fixture_vocabulary)
{
    const char *root = getenv("MP_SOURCE_ROOT");
    char path[1024];
    snprintf(path, sizeof path, "%s/tests/fixtures/hf/qwen3moe-tiny-f32.gguf", root ? root : ".");
    mp_gguf *g;
    mp_error err = {0};
    cr_assert_eq(mp_gguf_open(path, &g, &err), MP_OK, "%s", err.msg);
    mp_tokenizer *t;
    cr_assert_eq(mp_tokenizer_load(g, &t, &err), MP_OK, "%s", err.msg);
    mp_gguf_close(g); /* the tokenizer keeps its own copies */
    cr_assert_eq(mp_tokenizer_n_vocab(t), 320);
    cr_assert_eq(mp_tokenizer_bos(t), 256);
    cr_assert_eq(mp_tokenizer_eos(t), 258);
    cr_assert_not(mp_tokenizer_add_bos(t));
    cr_assert_str_eq(mp_tokenizer_pre(t), "qwen2");
    cr_assert(mp_tokenizer_is_eog(t, 258) && mp_tokenizer_is_eog(t, 256));
    /* No merges: a prompt's ids are its bytes; special tokens are parsed when asked. */
    const char *s = "<|im_start|>user\nHé 😀<|im_end|>";
    int32_t *ids;
    size_t n;
    cr_assert_eq(mp_tokenizer_encode(t, s, strlen(s), true, &ids, &n, &err), MP_OK, "%s", err.msg);
    const char *body = "user\nHé 😀";
    cr_assert_eq(n, strlen(body) + 2);
    cr_assert_eq(ids[0], 257);
    for (size_t i = 0; i < strlen(body); i++)
        cr_assert_eq(ids[1 + i], (unsigned char)body[i]);
    cr_assert_eq(ids[n - 1], 258);
    free(ids);
    char buf[16];
    cr_assert_eq(mp_tokenizer_decode_token(t, 0xC3, buf, sizeof buf), 1);
    cr_assert_eq((unsigned char)buf[0], 0xC3);
    mp_tokenizer_free(t);
}

/* Write a GGUF holding only tokenizer metadata: 256 byte tokens + "ab" + one special token. */
typedef struct bad_spec {
    const char *model, *pre;
    int n_types;      /* token_type entries (258 is right) */
    uint32_t eos;     /* eos_token_id */
    const char *merge; /* the one merge */
} bad_spec;

static void write_gguf(const char *path, const bad_spec *b)
{
    mp_gguf_writer *w;
    mp_error err = {0};
    cr_assert_eq(mp_gguf_writer_open(path, &w, &err), MP_OK, "%s", err.msg);
    char *tokens[258];
    int32_t types[258];
    for (int i = 0; i < 256; i++) {
        tokens[i] = calloc(1, 3);
        uint8_t byte = (uint8_t)i;
        mp_bytelevel_encode(&byte, 1, tokens[i]);
        types[i] = MP_TOK_TYPE_NORMAL;
    }
    tokens[256] = strdup("ab");
    types[256] = MP_TOK_TYPE_NORMAL;
    tokens[257] = strdup("<|im_end|>");
    types[257] = MP_TOK_TYPE_CONTROL;
    const char *merges[1] = {b->merge};
    cr_assert_eq(mp_gguf_add_str(w, "tokenizer.ggml.model", b->model, &err), MP_OK);
    cr_assert_eq(mp_gguf_add_str(w, "tokenizer.ggml.pre", b->pre, &err), MP_OK);
    cr_assert_eq(mp_gguf_add_arr_str(w, "tokenizer.ggml.tokens", (const char *const *)tokens, 258,
                                     &err), MP_OK);
    cr_assert_eq(mp_gguf_add_arr(w, "tokenizer.ggml.token_type", MP_GGUF_INT32, types,
                                 (uint64_t)b->n_types, &err), MP_OK);
    cr_assert_eq(mp_gguf_add_arr_str(w, "tokenizer.ggml.merges", merges, 1, &err), MP_OK);
    cr_assert_eq(mp_gguf_add_u32(w, "tokenizer.ggml.eos_token_id", b->eos, &err), MP_OK);
    cr_assert_eq(mp_gguf_writer_finish(w, &err), MP_OK, "%s", err.msg);
    for (int i = 0; i < 258; i++)
        free(tokens[i]);
}

static mp_status load_spec(const bad_spec *b, mp_tokenizer **t, mp_error *err)
{
    char dir[] = "/tmp/mp_tok_gguf_XXXXXX";
    cr_assert(mkdtemp(dir));
    char path[256];
    snprintf(path, sizeof path, "%s/t.gguf", dir);
    write_gguf(path, b);
    mp_gguf *g;
    cr_assert_eq(mp_gguf_open(path, &g, err), MP_OK, "%s", err->msg);
    mp_status st = mp_tokenizer_load(g, t, err);
    mp_gguf_close(g);
    unlink(path);
    rmdir(dir);
    return st;
}

Test(tokenizer_gguf, metadata_errors_name_key_and_file)
{
    const bad_spec good = {"gpt2", "gpt-2", 258, 257, "a b"};
    mp_tokenizer *t;
    mp_error err = {0};
    cr_assert_eq(load_spec(&good, &t, &err), MP_OK, "%s", err.msg);
    int32_t *ids;
    size_t n;
    cr_assert_eq(mp_tokenizer_encode(t, "abc<|im_end|>", 13, true, &ids, &n, &err), MP_OK);
    cr_assert(n == 3 && ids[0] == 256 && ids[1] == 'c' && ids[2] == 257);
    free(ids);
    mp_tokenizer_free(t);

    struct {
        bad_spec spec;
        mp_status code;
        const char *needle;
    } cases[] = {
        {{"bert", "gpt-2", 258, 257, "a b"}, MP_ERR_UNSUPPORTED, "tokenizer.ggml.model 'bert'"},
        {{"llama", "gpt-2", 258, 257, "a b"}, MP_ERR_FORMAT, "tokenizer.ggml.scores: missing"},
        {{"gpt2", "deepseek-llm", 258, 257, "a b"}, MP_ERR_UNSUPPORTED, "'deepseek-llm'"},
        {{"gpt2", "gpt-2", 200, 257, "a b"}, MP_ERR_FORMAT, "tokenizer.ggml.token_type: 200"},
        {{"gpt2", "gpt-2", 258, 9999, "a b"}, MP_ERR_FORMAT, "eos_token_id: 9999"},
        {{"gpt2", "gpt-2", 258, 257, "a q"}, MP_ERR_FORMAT, "tokenizer.ggml.merges[0] 'a q'"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        t = (mp_tokenizer *)1;
        cr_assert_eq(load_spec(&cases[i].spec, &t, &err), cases[i].code, "case %zu: %s", i,
                     err.msg);
        cr_assert(t == NULL);
        cr_assert(strstr(err.msg, cases[i].needle), "case %zu: '%s' lacks '%s'", i, err.msg,
                  cases[i].needle);
        cr_assert(strstr(err.msg, "t.gguf"), "case %zu: '%s' does not name the file", i,
                  err.msg);
    }
}
