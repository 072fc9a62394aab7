/* tests/unit/test_hf_parity.c — moeplan's forward pass against HF transformers.
 *
 * The fixtures (tests/fixtures/hf/README.md) were produced by transformers' Qwen3MoeForCausalLM,
 * Qwen2MoeForCausalLM (Q/K/V biases, a gated shared expert, top-k weights not renormalized),
 * OlmoeForCausalLM, MixtralForCausalLM (written as llama.cpp's converter writes Mixtral: "llama",
 * Q/K permuted) and GptOssForCausalLM (sinks, a sliding window, YaRN, biases, the clamped SwiGLU;
 * gate and up de-interleaved as the converter does) and converted to GGUF by the PyPI gguf
 * package: no moeplan code took part. Every position's logits
 * must match within 1e-4 relative error (max |diff| / max |reference|, per row), and greedy
 * decoding must reproduce transformers' 32-token continuation exactly. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/ops.h"
#include "runtime/model.h"
#include "runtime/session.h"

typedef struct expected_prompt {
    uint32_t n_tokens, n_continue;
    int32_t *ids;          /* (n_tokens) */
    float *logits;         /* (n_tokens, n_vocab) */
    int32_t *continuation; /* (n_continue) */
} expected_prompt;

static char *fixture_path(const char *name)
{
    const char *root = getenv("MP_SOURCE_ROOT");
    cr_assert(root, "MP_SOURCE_ROOT is not set (run through meson test)");
    char *p = malloc(4096);
    snprintf(p, 4096, "%s/tests/fixtures/hf/%s", root, name);
    return p;
}

static void read_exact(FILE *f, void *dst, size_t n, const char *what)
{
    cr_assert_eq(fread(dst, 1, n, f), n, "expected fixture truncated while reading %s", what);
}

/* fixture: "qwen3moe-tiny", "gpt-oss-tiny", ... (its -expected.bin and -f32.gguf) */
static expected_prompt *load_expected(const char *fixture, uint32_t *n_prompts, uint32_t *n_vocab)
{
    char name[96];
    snprintf(name, sizeof name, "%s-expected.bin", fixture);
    char *path = fixture_path(name);
    FILE *f = fopen(path, "rb");
    cr_assert(f, "cannot open %s", path);
    char magic[4];
    uint32_t hdr[3];
    read_exact(f, magic, 4, "magic");
    cr_assert(!memcmp(magic, "MPHF", 4));
    read_exact(f, hdr, sizeof hdr, "header");
    cr_assert_eq(hdr[0], 1u);
    *n_prompts = hdr[1];
    *n_vocab = hdr[2];
    expected_prompt *e = calloc(hdr[1], sizeof *e);
    for (uint32_t i = 0; i < hdr[1]; i++) {
        read_exact(f, &e[i].n_tokens, 4, "n_tokens");
        read_exact(f, &e[i].n_continue, 4, "n_continue");
        e[i].ids = malloc(sizeof(int32_t) * e[i].n_tokens);
        e[i].logits = malloc(sizeof(float) * e[i].n_tokens * hdr[2]);
        e[i].continuation = malloc(sizeof(int32_t) * e[i].n_continue);
        read_exact(f, e[i].ids, sizeof(int32_t) * e[i].n_tokens, "ids");
        read_exact(f, e[i].logits, sizeof(float) * e[i].n_tokens * hdr[2], "logits");
        read_exact(f, e[i].continuation, sizeof(int32_t) * e[i].n_continue, "continuation");
    }
    fclose(f);
    free(path);
    return e;
}

static void free_expected(expected_prompt *e, uint32_t n_prompts)
{
    for (uint32_t i = 0; i < n_prompts; i++) {
        free(e[i].ids);
        free(e[i].logits);
        free(e[i].continuation);
    }
    free(e);
}

static mp_model *load_model(const char *fixture)
{
    char name[96];
    snprintf(name, sizeof name, "%s-f32.gguf", fixture);
    char *path = fixture_path(name);
    mp_model *m = NULL;
    mp_error err = {0};
    cr_assert_eq(mp_model_load(path, &m, &err), MP_OK, "%s", err.msg);
    free(path);
    return m;
}

static void logits_match(const char *fixture)
{
    uint32_t n_prompts, n_vocab;
    expected_prompt *e = load_expected(fixture, &n_prompts, &n_vocab);
    mp_model *m = load_model(fixture);
    cr_assert_eq(m->hp.n_vocab, (int64_t)n_vocab);
    for (int threads = 1; threads <= 3; threads += 2) {
        mp_session_params sp = {.n_ctx = 256, .n_threads = threads};
        mp_session *s = NULL;
        mp_error err = {0};
        cr_assert_eq(mp_session_new(m, &sp, &s, &err), MP_OK, "%s", err.msg);
        for (uint32_t p = 0; p < n_prompts; p++) {
            float *logits = malloc(sizeof(float) * e[p].n_tokens * n_vocab);
            mp_session_reset(s);
            cr_assert_eq(mp_session_eval(s, e[p].ids, e[p].n_tokens, true, logits, &err), MP_OK,
                         "%s", err.msg);
            for (uint32_t t = 0; t < e[p].n_tokens; t++) {
                const float *ref = e[p].logits + (size_t)t * n_vocab, *got = logits + (size_t)t * n_vocab;
                float max_ref = 0, max_diff = 0;
                for (uint32_t v = 0; v < n_vocab; v++) {
                    max_ref = fmaxf(max_ref, fabsf(ref[v]));
                    max_diff = fmaxf(max_diff, fabsf(ref[v] - got[v]));
                }
                cr_assert(max_diff <= 1e-4f * max_ref,
                          "%s: prompt %u row %u (%d threads): max |diff| %g vs max |ref| %g (rel %g > 1e-4)",
                          fixture, p, t, threads, max_diff, max_ref, max_diff / max_ref);
            }
            free(logits);
        }
        mp_session_free(s);
    }
    mp_model_free(m);
    free_expected(e, n_prompts);
}

static void continuations_match(const char *fixture)
{
    uint32_t n_prompts, n_vocab;
    expected_prompt *e = load_expected(fixture, &n_prompts, &n_vocab);
    mp_model *m = load_model(fixture);
    mp_session_params sp = {.n_ctx = 256, .n_threads = 2};
    mp_session *s = NULL;
    mp_error err = {0};
    cr_assert_eq(mp_session_new(m, &sp, &s, &err), MP_OK, "%s", err.msg);
    float *logits = malloc(sizeof(float) * n_vocab);
    for (uint32_t p = 0; p < n_prompts; p++) {
        mp_session_reset(s);
        cr_assert_eq(mp_session_eval(s, e[p].ids, e[p].n_tokens, false, logits, &err), MP_OK, "%s", err.msg);
        for (uint32_t i = 0; i < e[p].n_continue; i++) {
            int32_t tok = (int32_t)mp_argmax(logits, n_vocab);
            cr_assert_eq(tok, e[p].continuation[i], "%s: prompt %u: token %u of the continuation: moeplan %d, "
                         "transformers %d", fixture, p, i, tok, e[p].continuation[i]);
            cr_assert_eq(mp_session_eval(s, &tok, 1, false, logits, &err), MP_OK, "%s", err.msg);
        }
    }
    free(logits);
    mp_session_free(s);
    mp_model_free(m);
    free_expected(e, n_prompts);
}

Test(hf_parity, logits_match_transformers_f32)
{
    logits_match("qwen3moe-tiny");
}

Test(hf_parity, greedy_continuations_match_transformers)
{
    continuations_match("qwen3moe-tiny");
}

Test(hf_parity, qwen2moe_logits_match_transformers_f32)
{
    mp_model *m = load_model("qwen2moe-tiny");
    cr_assert_eq(m->hp.arch, MP_ARCH_QWEN2MOE);
    cr_assert(m->hp.n_ff_shexp > 0 && m->layers[0].bq.data && m->layers[0].gate_shexp.data,
              "the fixture has a shared expert and Q/K/V biases");
    cr_assert(!m->hp.expert_weights_norm);
    mp_model_free(m);
    logits_match("qwen2moe-tiny");
}

Test(hf_parity, qwen2moe_greedy_continuations_match_transformers)
{
    continuations_match("qwen2moe-tiny");
}

/* OLMoE: q/k RMSNorm over all heads, top-k weights not renormalized */
Test(hf_parity, olmoe_logits_match_transformers_f32)
{
    logits_match("olmoe-tiny");
}

Test(hf_parity, olmoe_greedy_continuations_match_transformers)
{
    continuations_match("olmoe-tiny");
}

/* Mixtral as llama.cpp's converter writes it: architecture "llama" with expert keys, Q and K
 * permuted for RoPE on interleaved pairs */
Test(hf_parity, mixtral_logits_match_transformers_f32)
{
    mp_model *m = load_model("mixtral-tiny");
    cr_assert_eq(m->hp.arch, MP_ARCH_MIXTRAL);
    cr_assert(m->hp.expert_weights_norm);
    mp_model_free(m);
    logits_match("mixtral-tiny");
}

Test(hf_parity, mixtral_greedy_continuations_match_transformers)
{
    continuations_match("mixtral-tiny");
}

/* gpt-oss: attention sinks, a 4-position window on even layers (every prompt is longer), biases on
 * Q/K/V, the attention output, the router and each expert, the clamped SwiGLU, YaRN with an
 * unrounded correction range */
Test(hf_parity, gptoss_logits_match_transformers_f32)
{
    mp_model *m = load_model("gpt-oss-tiny");
    cr_assert_eq(m->hp.arch, MP_ARCH_GPTOSS);
    cr_assert_eq(m->hp.n_swa, 4);
    cr_assert(m->hp.rope_yarn_factor == 32.0f && m->hp.rope_yarn_orig_ctx == 4096 && !m->hp.rope_yarn_truncate);
    cr_assert(m->hp.expert_weights_norm);
    cr_assert(m->layers[0].sinks.data && m->layers[0].bo.data && m->layers[0].gate_inp_b.data &&
              m->layers[0].down_exps_b.data, "the fixture has sinks and the gpt-oss biases");
    mp_model_free(m);
    logits_match("gpt-oss-tiny");
}

Test(hf_parity, gptoss_greedy_continuations_match_transformers)
{
    continuations_match("gpt-oss-tiny");
}
