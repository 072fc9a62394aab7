/* tests/unit/test_mkmodel.c — `moeplan mkmodel`: determinism, shapes and types of every mix and
 * architecture read back through the GGUF reader and the model loader, rejection of bad flags and
 * of an existing output, and the router skew measured by running the generated model.
 *
 * Models are written under a fresh mkdtemp directory, removed at the end of each test. Shapes are
 * kept small (the K-quants need rows of 256) so that the suite stays fast under the sanitizers.
 */
#include <criterion/criterion.h>
#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/atomic_file.h"
#include "mkmodel/commands.h"
#include "kernels/quant.h"
#include "gguf/gguf.h"
#include "mkmodel/mkmodel.h"
#include "runtime/model.h"

static char tmp_dir[256];

static void make_tmp_dir(void)
{
    snprintf(tmp_dir, sizeof tmp_dir, "/tmp/mp_test_mkmodel.XXXXXX");
    cr_assert_not_null(mkdtemp(tmp_dir));
}

static void remove_tmp_dir(void)
{
    DIR *d = opendir(tmp_dir);
    if (!d)
        return;
    struct dirent *de;
    char p[512];
    while ((de = readdir(d)))
        if (strcmp(de->d_name, ".") && strcmp(de->d_name, "..")) {
            snprintf(p, sizeof p, "%s/%s", tmp_dir, de->d_name);
            unlink(p);
        }
    closedir(d);
    rmdir(tmp_dir);
}

TestSuite(mkmodel, .init = make_tmp_dir, .fini = remove_tmp_dir);

static const char *tmp_path(const char *name)
{
    static char p[4][512];
    static int k;
    k = (k + 1) % 4;
    snprintf(p[k], sizeof p[k], "%s/%s", tmp_dir, name);
    return p[k];
}

/* c cut to 2 layers of 4 experts (top-2) and 320 tokens, written on 2 threads. */
static mp_mkmodel_config shrunk(mp_mkmodel_config c)
{
    c.n_layer = 2;
    c.n_expert = 4;
    c.n_expert_used = 2;
    c.n_vocab = 320;
    c.n_threads = 2;
    return c;
}

/* A small qwen3moe config: one K-quant block per row. */
static mp_mkmodel_config small_config(void)
{
    mp_mkmodel_config c;
    mp_error err;
    cr_assert_eq(mp_mkmodel_preset("tiny", &c, &err), MP_OK, "%s", err.msg);
    return shrunk(c);
}

static void write_model(const mp_mkmodel_config *c, const char *path)
{
    mp_error err = {0};
    mp_status st = mp_mkmodel_write(c, path, true, NULL, NULL, &err);
    cr_assert_eq(st, MP_OK, "mkmodel to %s: %s", path, err.msg);
}

static unsigned char *read_all(const char *path, size_t *size)
{
    FILE *f = fopen(path, "rb");
    cr_assert_not_null(f, "open %s", path);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *buf = malloc((size_t)n);
    cr_assert_not_null(buf);
    cr_assert_eq(fread(buf, 1, (size_t)n, f), (size_t)n);
    fclose(f);
    *size = (size_t)n;
    return buf;
}

static int count_dir_entries(void)
{
    DIR *d = opendir(tmp_dir);
    int n = 0;
    struct dirent *de;
    while ((de = readdir(d)))
        n += strcmp(de->d_name, ".") && strcmp(de->d_name, "..");
    closedir(d);
    return n;
}

Test(mkmodel, same_seed_same_bytes_any_thread_count)
{
    mp_mkmodel_config c = small_config();
    c.seed = 1234;
    c.n_threads = 1;
    write_model(&c, tmp_path("a.gguf"));
    c.n_threads = 3;
    write_model(&c, tmp_path("b.gguf"));
    c.seed = 1235;
    write_model(&c, tmp_path("c.gguf"));
    size_t na, nb, nc;
    unsigned char *a = read_all(tmp_path("a.gguf"), &na);
    unsigned char *b = read_all(tmp_path("b.gguf"), &nb);
    unsigned char *cc = read_all(tmp_path("c.gguf"), &nc);
    cr_assert_eq(na, nb);
    cr_assert(memcmp(a, b, na) == 0, "same seed, 1 vs 3 threads: files differ");
    cr_assert_eq(na, nc, "the seed must not change the layout");
    cr_assert(memcmp(a, cc, na) != 0, "seeds 1234 and 1235 gave identical files");
    free(a);
    free(b);
    free(cc);
    /* Only the three outputs: no temporary file left behind. */
    cr_assert_eq(count_dir_entries(), 3);
}

/* Every tensor of the plan is in the file with exactly its shape and type, and the shapes are
 * llama.cpp's: ne[0] is the input dimension, experts stacked in ne[2]. */
static void check_file(const mp_mkmodel_config *c, const char *path)
{
    mp_gguf *g = NULL;
    mp_error err = {0};
    cr_assert_eq(mp_gguf_open(path, &g, &err), MP_OK, "%s", err.msg);
    mp_mk_tensor *plan;
    int64_t n;
    cr_assert_eq(mp_mkmodel_plan(c, &plan, &n, &err), MP_OK, "%s", err.msg);
    cr_assert_eq(mp_gguf_n_tensors(g), n);
    for (int64_t i = 0; i < n; i++) {
        const mp_gguf_tensor *t = mp_gguf_find_tensor(g, plan[i].name);
        cr_assert_not_null(t, "%s: tensor %s missing", path, plan[i].name);
        cr_assert_eq(t->n_dims, plan[i].n_dims, "%s", plan[i].name);
        for (int d = 0; d < 4; d++)
            cr_assert_eq(t->ne[d], plan[i].ne[d], "%s ne[%d]", plan[i].name, d);
        cr_assert_eq(t->type, plan[i].type, "%s: type %d, expected %d", plan[i].name, t->type,
                     plan[i].type);
    }
    free(plan);

    const int64_t E = c->n_embd, F = c->n_ff_exp, X = c->n_expert;
    const mp_gguf_tensor *down = mp_gguf_find_tensor(g, "blk.1.ffn_down_exps.weight");
    const mp_gguf_tensor *gate = mp_gguf_find_tensor(g, "blk.1.ffn_gate_exps.weight");
    const mp_gguf_tensor *q = mp_gguf_find_tensor(g, "blk.0.attn_q.weight");
    const mp_gguf_tensor *router = mp_gguf_find_tensor(g, "blk.0.ffn_gate_inp.weight");
    cr_assert(down && gate && q && router);
    cr_assert(down->ne[0] == F && down->ne[1] == E && down->ne[2] == X);
    cr_assert(gate->ne[0] == E && gate->ne[1] == F && gate->ne[2] == X);
    cr_assert(q->ne[0] == E && q->ne[1] == c->n_head * c->head_dim);
    cr_assert(router->ne[0] == E && router->ne[1] == X && router->type == MP_TYPE_F32);

    const char *arch = c->arch == MP_ARCH_QWEN3MOE   ? "qwen3moe"
                       : c->arch == MP_ARCH_OLMOE    ? "olmoe"
                       : c->arch == MP_ARCH_QWEN2MOE ? "qwen2moe"
                       : c->arch == MP_ARCH_GPTOSS   ? "gpt-oss"
                                                     : "llama";
    mp_str s;
    cr_assert_eq(mp_gguf_get_str(g, "general.architecture", &s, &err), MP_OK, "%s", err.msg);
    cr_assert(mp_str_eq(s, arch), "architecture %.*s, expected %s", (int)s.len, s.ptr, arch);
    char key[128];
    uint32_t v;
    snprintf(key, sizeof key, "%s.expert_count", arch);
    cr_assert_eq(mp_gguf_get_u32(g, key, &v, &err), MP_OK, "%s", err.msg);
    cr_assert_eq(v, (uint32_t)X);
    snprintf(key, sizeof key, "%s.block_count", arch);
    cr_assert_eq(mp_gguf_get_u32(g, key, &v, &err), MP_OK, "%s", err.msg);
    cr_assert_eq(v, (uint32_t)c->n_layer);
    cr_assert_eq(mp_gguf_get_u32(g, "general.alignment", &v, &err), MP_OK, "%s", err.msg);
    cr_assert_eq(v, 32);
    uint64_t seed;
    cr_assert_eq(mp_gguf_get_u64(g, "moeplan.seed", &seed, &err), MP_OK, "%s", err.msg);
    cr_assert_eq(seed, c->seed);
    mp_gguf_vtype et;
    uint64_t n_tok;
    cr_assert_eq(mp_gguf_get_arr(g, "tokenizer.ggml.tokens", &et, &n_tok, &err), MP_OK, "%s",
                 err.msg);
    cr_assert_eq(n_tok, (uint64_t)c->n_vocab);
    mp_gguf_close(g);

    /* The runtime's loader accepts it (every architecture). */
    mp_model *m = NULL;
    cr_assert_eq(mp_model_load(path, &m, &err), MP_OK, "%s", err.msg);
    cr_assert_eq(m->hp.arch, c->arch);
    cr_assert_eq(m->hp.n_expert, X);
    cr_assert_eq(m->hp.n_ff_exp, F);
    cr_assert_eq(m->hp.n_ff_shexp, c->n_ff_shexp);
    cr_assert_eq(m->hp.head_dim, c->head_dim);
    cr_assert_eq(m->hp.n_swa, c->n_swa);
    cr_assert_eq(m->hp.rope_yarn_factor, c->rope_yarn_factor);
    if (c->rope_yarn_factor > 0)
        cr_assert_eq(m->hp.rope_yarn_orig_ctx, c->rope_yarn_orig_ctx);
    mp_model_free(m);
}

Test(mkmodel, every_mix_reads_back_with_exact_shapes_and_types)
{
    static const char *mixes[] = {"q4_k_m", "q8_0", "bf16", "f16", "f32"};
    for (size_t i = 0; i < sizeof mixes / sizeof mixes[0]; i++) {
        mp_mkmodel_config c = small_config();
        mp_error err;
        cr_assert_eq(mp_mkmodel_set_mix(&c, mixes[i], &err), MP_OK, "%s", err.msg);
        write_model(&c, tmp_path("mix.gguf"));
        check_file(&c, tmp_path("mix.gguf"));
    }
    /* The q4_k_m recipe, spelled out. */
    mp_mkmodel_config c = small_config();
    cr_assert_eq(c.types[MP_MK_FFN_DOWN], MP_TYPE_Q6_K);
    cr_assert_eq(c.types[MP_MK_ATTN_V], MP_TYPE_Q6_K);
    cr_assert_eq(c.types[MP_MK_OUTPUT], MP_TYPE_Q6_K);
    cr_assert_eq(c.types[MP_MK_FFN_GATE], MP_TYPE_Q4_K);
    cr_assert_eq(c.types[MP_MK_ATTN_Q], MP_TYPE_Q4_K);
    cr_assert_eq(c.types[MP_MK_EMBD], MP_TYPE_Q4_K);
    cr_assert_eq(c.types[MP_MK_ROUTER], MP_TYPE_F32);
    cr_assert_eq(c.types[MP_MK_NORM], MP_TYPE_F32);
}

/* --layer-mix llama: llama.cpp's Q4_K_M / Q5_K_M give attn_v and ffn_down 6 bits in layers
 * [0, n/8), [7n/8, n) and every third between (from n/8 + 2); spelled out for 16 layers: 0, 1, 4, 7,
 * 10, 13, 14, 15. The file reads back with those types, and the loader takes a model whose layers'
 * experts differ in size; 8 experts put attn_k and attn_v in Q8_0; other mixes are refused. */
Test(mkmodel, llama_layer_mix_gives_six_bits_by_layer)
{
    static const bool more[16] = {1, 1, 0, 0, 1, 0, 0, 1, 0, 0, 1, 0, 0, 1, 1, 1};
    mp_error err = {0};
    for (int q = 0; q < 2; q++) {
        mp_mkmodel_config c = small_config();
        c.n_layer = 16;
        cr_assert_eq(mp_mkmodel_set_mix(&c, q ? "q5_k_m" : "q4_k_m", &err), MP_OK, "%s", err.msg);
        c.llama_layers = true;
        const int base = q ? MP_TYPE_Q5_K : MP_TYPE_Q4_K;
        for (int64_t il = 0; il < 16; il++) {
            const int want = more[il] ? MP_TYPE_Q6_K : base;
            cr_assert_eq(mp_mkmodel_tensor_type(&c, MP_MK_FFN_DOWN, il), want, "layer %lld", (long long)il);
            cr_assert_eq(mp_mkmodel_tensor_type(&c, MP_MK_ATTN_V, il), want, "layer %lld", (long long)il);
            cr_assert_eq(mp_mkmodel_tensor_type(&c, MP_MK_FFN_GATE, il), base);
        }
        cr_assert_eq(mp_mkmodel_tensor_type(&c, MP_MK_OUTPUT, -1), MP_TYPE_Q6_K);
        cr_assert_eq(mp_mkmodel_validate(&c, &err), MP_OK, "%s", err.msg);
        write_model(&c, tmp_path("layers.gguf"));
        check_file(&c, tmp_path("layers.gguf"));
        mp_model *m = NULL;
        cr_assert_eq(mp_model_load(tmp_path("layers.gguf"), &m, &err), MP_OK, "%s", err.msg);
        cr_assert_gt(mp_model_expert_bytes(m, 0), mp_model_expert_bytes(m, 2));
        cr_assert_eq(mp_model_expert_bytes(m, 4), mp_model_expert_bytes(m, 0));
        mp_model_free(m);
    }
    mp_mkmodel_config c = small_config();
    c.n_layer = 16;
    c.n_expert = 8;
    c.llama_layers = true;
    cr_assert_eq(mp_mkmodel_tensor_type(&c, MP_MK_ATTN_K, 3), MP_TYPE_Q8_0);
    cr_assert_eq(mp_mkmodel_tensor_type(&c, MP_MK_ATTN_V, 0), MP_TYPE_Q8_0);
    cr_assert_eq(mp_mkmodel_tensor_type(&c, MP_MK_FFN_DOWN, 2), MP_TYPE_Q4_K);
    cr_assert_eq(mp_mkmodel_set_type(&c, "ffn-down", "Q6_K", &err), MP_OK, "%s", err.msg);
    cr_assert_eq(mp_mkmodel_validate(&c, &err), MP_ERR_ARG);
    cr_assert(strstr(err.msg, "--layer-mix llama") && strstr(err.msg, "custom"), "message: %s", err.msg);
    c = small_config();
    c.llama_layers = true;
    cr_assert_eq(mp_mkmodel_set_mix(&c, "q8_0", &err), MP_OK, "%s", err.msg);
    cr_assert_eq(mp_mkmodel_validate(&c, &err), MP_ERR_ARG);
    cr_assert(strstr(err.msg, "q8_0"), "message: %s", err.msg);
}

Test(mkmodel, class_overrides_and_other_architectures)
{
    mp_error err;
    mp_mkmodel_config c = small_config();
    cr_assert_eq(mp_mkmodel_set_type(&c, "experts", "q4_0", &err), MP_OK, "%s", err.msg);
    cr_assert_eq(mp_mkmodel_set_type(&c, "ffn-down", "Q8_0", &err), MP_OK, "%s", err.msg);
    cr_assert_eq(mp_mkmodel_set_type(&c, "attn", "BF16", &err), MP_OK, "%s", err.msg);
    cr_assert_eq(mp_mkmodel_set_type(&c, "embd", "F16", &err), MP_OK, "%s", err.msg);
    cr_assert_eq(c.types[MP_MK_FFN_GATE], MP_TYPE_Q4_0);
    cr_assert_eq(c.types[MP_MK_FFN_DOWN], MP_TYPE_Q8_0);
    cr_assert_eq(c.types[MP_MK_ATTN_V], MP_TYPE_BF16);
    write_model(&c, tmp_path("custom.gguf"));
    check_file(&c, tmp_path("custom.gguf"));

    static const char *archs[] = {"olmoe", "mixtral", "qwen2moe", "gpt-oss"};
    for (int i = 0; i < 4; i++) {
        cr_assert_eq(mp_mkmodel_arch(archs[i], &c, &err), MP_OK, "%s", err.msg);
        c.n_layer = 2;
        c.n_expert = 4;
        c.n_expert_used = 2;
        c.n_vocab = 300;
        write_model(&c, tmp_path("arch.gguf"));
        check_file(&c, tmp_path("arch.gguf"));
        mp_gguf *g;
        cr_assert_eq(mp_gguf_open(tmp_path("arch.gguf"), &g, &err), MP_OK, "%s", err.msg);
        const mp_gguf_tensor *qn = mp_gguf_find_tensor(g, "blk.0.attn_q_norm.weight");
        if (c.arch == MP_ARCH_OLMOE) /* OLMoE normalizes q over all heads at once */
            cr_assert(qn && qn->ne[0] == c.n_head * c.head_dim);
        else
            cr_assert_null(qn, "%s has no q/k norms", archs[i]);
        mp_gguf_close(g);
        /* one expert: olmoe's file is still a MoE the loader takes; mixtral's says 'llama', which the
         * loader reads as a dense model, so mkmodel refuses to write it */
        c.n_expert = 1;
        c.n_expert_used = 1;
        if (c.arch == MP_ARCH_MIXTRAL) {
            cr_assert_eq(mp_mkmodel_validate(&c, &err), MP_ERR_ARG);
            cr_assert(strstr(err.msg, "--experts 1") && strstr(err.msg, "mixtral"), "message: %s", err.msg);
        } else {
            cr_assert_eq(mp_mkmodel_validate(&c, &err), MP_OK, "%s", err.msg);
            write_model(&c, tmp_path("one.gguf"));
            mp_model *m = NULL;
            cr_assert_eq(mp_model_load(tmp_path("one.gguf"), &m, &err), MP_OK, "%s", err.msg);
            mp_model_free(m);
        }
    }
}

/* --split-experts: each expert its own 2-D tensor, in the converter's order (gate, down, up of each
 * expert), with the values of the merged file's expert slices; the loader merges them back into the
 * same bytes. */
Test(mkmodel, split_experts_hold_the_merged_values)
{
    mp_error err;
    mp_mkmodel_config c = small_config();
    write_model(&c, tmp_path("merged.gguf"));
    c.split_experts = true;
    write_model(&c, tmp_path("split.gguf"));
    mp_gguf *g;
    cr_assert_eq(mp_gguf_open(tmp_path("split.gguf"), &g, &err), MP_OK, "%s", err.msg);
    cr_assert_null(mp_gguf_find_tensor(g, "blk.0.ffn_gate_exps.weight"), "a merged tensor in a split file");
    const mp_gguf_tensor *g0 = mp_gguf_find_tensor(g, "blk.1.ffn_gate.3.weight"),
                         *d0 = mp_gguf_find_tensor(g, "blk.1.ffn_down.3.weight");
    cr_assert(g0 && d0 && g0->n_dims == 2 && g0->ne[0] == c.n_embd && g0->ne[1] == c.n_ff_exp &&
              d0->ne[0] == c.n_ff_exp && d0->ne[1] == c.n_embd, "blk.1's expert 3 tensors");
    /* the converter's order: gate, down, up of each expert */
    int64_t ig = -1, id = -1, iu = -1;
    for (int64_t i = 0; i < mp_gguf_n_tensors(g); i++) {
        const mp_str n = mp_gguf_tensor_at(g, i)->name;
        ig = mp_str_eq(n, "blk.0.ffn_gate.0.weight") ? i : ig;
        id = mp_str_eq(n, "blk.0.ffn_down.0.weight") ? i : id;
        iu = mp_str_eq(n, "blk.0.ffn_up.0.weight") ? i : iu;
    }
    cr_assert(ig >= 0 && id == ig + 1 && iu == ig + 2, "order %lld %lld %lld", (long long)ig, (long long)id,
              (long long)iu);
    mp_gguf_close(g);
    mp_model *a = NULL, *b = NULL;
    cr_assert_eq(mp_model_load(tmp_path("merged.gguf"), &a, &err), MP_OK, "%s", err.msg);
    cr_assert_eq(mp_model_load(tmp_path("split.gguf"), &b, &err), MP_OK, "%s", err.msg);
    for (int64_t il = 0; il < c.n_layer; il++) {
        const mp_tensor *x[3] = {&a->layers[il].gate_exps, &a->layers[il].up_exps, &a->layers[il].down_exps};
        const mp_tensor *y[3] = {&b->layers[il].gate_exps, &b->layers[il].up_exps, &b->layers[il].down_exps};
        for (int k = 0; k < 3; k++)
            cr_assert(x[k]->nbytes == y[k]->nbytes && memcmp(x[k]->data, y[k]->data, x[k]->nbytes) == 0,
                      "layer %lld kind %d: the split file's experts differ from the merged file's", (long long)il, k);
    }
    mp_model_free(a);
    mp_model_free(b);
}

/* --fuse-gate-up: each layer's gate and up in one tensor, blk.N.ffn_gate_up_exps.weight [n_embd,
 * 2 n_ff, n_expert], each expert's gate rows then its up rows, with the separate file's values; the
 * loader lays them out one tensor per kind again, the same bytes. With --split-experts, or gate and
 * up of two types, it is refused in one line. */
Test(mkmodel, fused_gate_up_holds_the_separate_values)
{
    mp_error err;
    mp_mkmodel_config c = small_config();
    write_model(&c, tmp_path("separate.gguf"));
    c.fuse_gate_up = true;
    write_model(&c, tmp_path("fused.gguf"));
    mp_gguf *g;
    cr_assert_eq(mp_gguf_open(tmp_path("fused.gguf"), &g, &err), MP_OK, "%s", err.msg);
    cr_assert_null(mp_gguf_find_tensor(g, "blk.0.ffn_gate_exps.weight"), "a separate gate in a fused file");
    cr_assert_null(mp_gguf_find_tensor(g, "blk.0.ffn_up_exps.weight"), "a separate up in a fused file");
    const mp_gguf_tensor *f = mp_gguf_find_tensor(g, "blk.1.ffn_gate_up_exps.weight");
    cr_assert(f && f->n_dims == 3 && f->ne[0] == c.n_embd && f->ne[1] == 2 * c.n_ff_exp && f->ne[2] == c.n_expert,
              "blk.1's fused tensor");
    mp_gguf_close(g);
    mp_model *a = NULL, *b = NULL;
    cr_assert_eq(mp_model_load(tmp_path("separate.gguf"), &a, &err), MP_OK, "%s", err.msg);
    cr_assert_eq(mp_model_load(tmp_path("fused.gguf"), &b, &err), MP_OK, "%s", err.msg);
    cr_assert_not_null(b->expert_copy, "the fused experts were not laid out one tensor per kind");
    for (int64_t il = 0; il < c.n_layer; il++) {
        const mp_tensor *x[3] = {&a->layers[il].gate_exps, &a->layers[il].up_exps, &a->layers[il].down_exps};
        const mp_tensor *y[3] = {&b->layers[il].gate_exps, &b->layers[il].up_exps, &b->layers[il].down_exps};
        for (int k = 0; k < 3; k++)
            cr_assert(x[k]->nbytes == y[k]->nbytes && x[k]->ne[1] == y[k]->ne[1] &&
                          memcmp(x[k]->data, y[k]->data, x[k]->nbytes) == 0,
                      "layer %lld kind %d: the fused file's experts differ from the separate file's", (long long)il, k);
    }
    mp_model_free(a);
    mp_model_free(b);
    c.split_experts = true;
    cr_assert_eq(mp_mkmodel_validate(&c, &err), MP_ERR_ARG);
    cr_assert(strstr(err.msg, "--fuse-gate-up and --split-experts"), "%s", err.msg);
    c.split_experts = false;
    cr_assert_eq(mp_mkmodel_set_type(&c, "ffn-up", "Q8_0", &err), MP_OK, "%s", err.msg);
    cr_assert_eq(mp_mkmodel_validate(&c, &err), MP_ERR_ARG);
    cr_assert(strstr(err.msg, "--fuse-gate-up: ffn-gate is") && strstr(err.msg, "ffn-up Q8_0"), "%s", err.msg);
}

/* The values that carry the design: norms are 1, the bias channel is constant, the router's
 * dimension 0 holds -skew * ln(rank + 1) over a permutation, residual writers spare row 0. */
Test(mkmodel, weights_carry_the_router_prior)
{
    mp_mkmodel_config c = small_config();
    mp_error err;
    cr_assert_eq(mp_mkmodel_set_mix(&c, "f32", &err), MP_OK, "%s", err.msg);
    c.skew = 0.8;
    c.seed = 99;
    write_model(&c, tmp_path("f32.gguf"));
    mp_gguf *g;
    cr_assert_eq(mp_gguf_open(tmp_path("f32.gguf"), &g, &err), MP_OK, "%s", err.msg);
    const float *norm = mp_gguf_find_tensor(g, "blk.1.ffn_norm.weight")->data;
    for (int64_t j = 0; j < c.n_embd; j++)
        cr_assert_eq(norm[j], 1.0f);
    const mp_gguf_tensor *emb = mp_gguf_find_tensor(g, "token_embd.weight");
    double sum2 = 0;
    for (int64_t t = 0; t < c.n_vocab; t++) {
        const float *row = (const float *)emb->data + t * c.n_embd;
        cr_assert_eq(row[0], 1.0f, "token %lld: bias channel %g", (long long)t, row[0]);
        for (int64_t j = 1; j < c.n_embd; j++)
            sum2 += (double)row[j] * row[j];
    }
    double emb_rms = sqrt(sum2 / (double)(c.n_vocab * (c.n_embd - 1)));
    cr_assert(fabs(emb_rms - 1.0) < 0.05, "embedding rms %g, expected ~1", emb_rms);
    for (int64_t il = 0; il < c.n_layer; il++) {
        char name[64];
        snprintf(name, sizeof name, "blk.%lld.ffn_gate_inp.weight", (long long)il);
        const float *r = mp_gguf_find_tensor(g, name)->data; /* (n_expert, n_embd) */
        int seen[64] = {0};
        for (int64_t e = 0; e < c.n_expert; e++) {
            int64_t rank = mp_mkmodel_expert_rank(&c, il, e);
            cr_assert(rank >= 0 && rank < c.n_expert && !seen[rank]++, "ranks not a permutation");
            float want = (float)(-c.skew * log((double)rank + 1.0));
            cr_assert_eq(r[e * c.n_embd], want, "layer %lld expert %lld", (long long)il,
                         (long long)e);
        }
        snprintf(name, sizeof name, "blk.%lld.ffn_down_exps.weight", (long long)il);
        const float *down = mp_gguf_find_tensor(g, name)->data; /* (n_expert, n_embd, n_ff) */
        for (int64_t e = 0; e < c.n_expert; e++)
            for (int64_t j = 0; j < c.n_ff_exp; j++)
                cr_assert_eq(down[(e * c.n_embd) * c.n_ff_exp + j], 0.0f);
    }
    mp_gguf_close(g);
}

/* ---- the command line ---- */

static int run_cmd(const char *const *args)
{
    char *argv[64];
    int argc = 0;
    argv[argc++] = "mkmodel";
    for (; args[argc - 1]; argc++)
        argv[argc] = (char *)args[argc - 1];
    return mp_cmd_mkmodel(argc, argv);
}

Test(mkmodel, bad_flags_are_usage_errors_and_write_nothing)
{
    const char *out = tmp_path("bad.gguf");
    const char *const cases[][12] = {
        {"--preset", "tiny", "--layers", "0", "-o", out, NULL},
        {"--preset", "tiny", "--layers", "4x", "-o", out, NULL},
        /* rows that do not fit a type set by --type-CLASS (a mix's falls back instead) */
        {"--preset", "tiny", "--hidden", "100", "--type-attn", "Q8_0", "-o", out, NULL},
        {"--preset", "tiny", "--expert-ff", "96", "--type-ffn-down", "Q6_K", "-o", out, NULL},
        {"--preset", "tiny", "--heads", "3", "-o", out, NULL},     /* 3 % 2 kv heads */
        {"--preset", "tiny", "--top-k", "17", "-o", out, NULL},
        {"--preset", "tiny", "--skew", "-1", "-o", out, NULL},
        {"--preset", "tiny", "--skew", "nan", "-o", out, NULL},
        {"--preset", "tiny", "--seed", "-3", "-o", out, NULL},
        {"--preset", "tiny", "--quant", "q3_k", "-o", out, NULL},
        {"--preset", "tiny", "--type-experts", "IQ2_XXS", "-o", out, NULL},
        {"--preset", "tiny", "--type-bogus", "Q8_0", "-o", out, NULL},
        {"--preset", "huge", "-o", out, NULL},
        {"--arch", "gpt2", "-o", out, NULL},
        {"--preset", "tiny", "--arch", "qwen3moe", "-o", out, NULL},
        {"--preset", "tiny", NULL},
        {"--preset", "tiny", "-o", out, "--layers", NULL},
        {"--preset", "tiny", "-o", out, "extra", NULL},
        {"--preset", "tiny", "--layer-mix", "llamas", "-o", out, NULL},
        {"--preset", "tiny", "--quant", "q8_0", "--layer-mix", "llama", "-o", out, NULL},
        {"--preset", "tiny", "--layer-mix", "llama", "--type-ffn-down", "Q6_K", "-o", out, NULL},
        /* a type the runtime does not load for the class: the file would be refused */
        {"--preset", "tiny", "--type-norm", "F16", "-o", out, NULL},
        {"--preset", "tiny", "--type-router", "Q8_0", "-o", out, NULL},
        {"--arch", "gpt-oss", "--type-bias", "BF16", "-o", out, NULL},
        {"--arch", "gpt-oss", "--type-sinks", "Q8_0", "-o", out, NULL},
        /* gpt-oss's features elsewhere, and bad values of its flags */
        {"--preset", "tiny", "--sliding-window", "64", "-o", out, NULL},
        {"--preset", "mixtral", "--type-sinks", "F32", "-o", out, NULL},
        {"--arch", "gpt-oss", "--sliding-window", "0", "-o", out, NULL},
        {"--arch", "gpt-oss", "--yarn-factor", "0.5", "-o", out, NULL},
        {"--arch", "gpt-oss", "--yarn-ctx", "-4", "-o", out, NULL},
        {"--arch", "gpt-oss", "--yarn-factor", "0", "--yarn-ctx", "4096", "-o", out, NULL},
        {"--preset", "tiny", "--yarn-ctx", "4096", "-o", out, NULL},
        {"--arch", "gpt-oss", "--quant", "mxfp4", "-o", out, NULL},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        int rc = run_cmd(cases[i]);
        cr_assert_eq(rc, 2, "case %zu (%s %s %s %s): rc %d, expected 2", i, cases[i][0],
                     cases[i][1], cases[i][2] ? cases[i][2] : "", cases[i][3] ? cases[i][3] : "",
                     rc);
        cr_assert_eq(access(out, F_OK), -1, "case %zu wrote %s", i, out);
        cr_assert_eq(count_dir_entries(), 0, "case %zu left a file behind", i);
    }
    const char *const help[] = {"--help", NULL};
    cr_assert_eq(run_cmd(help), 0);
    const char *const dry[] = {"--preset", "qwen3-30b-a3b", "--dry-run", "-o", out, NULL};
    cr_assert_eq(run_cmd(dry), 0);
    cr_assert_eq(count_dir_entries(), 0, "--dry-run wrote a file");
}

/* A type set by --type-CLASS whose blocks do not divide its rows is refused, naming a type that
 * fits (the one a mix would fall back to). */
Test(mkmodel, row_length_errors_suggest_a_type_that_fits)
{
    mp_mkmodel_config c = small_config();
    mp_error err = {0};
    c.n_ff_exp = 96;
    cr_assert_eq(mp_mkmodel_set_type(&c, "ffn-down", "Q6_K", &err), MP_OK);
    cr_assert_eq(mp_mkmodel_validate(&c, &err), MP_ERR_ARG);
    cr_assert(strstr(err.msg, "ffn-down") && strstr(err.msg, "96") && strstr(err.msg, "Q8_0"),
              "message: %s", err.msg);
    c = small_config();
    c.n_embd = 100;
    cr_assert_eq(mp_mkmodel_set_type(&c, "attn", "Q8_0", &err), MP_OK);
    cr_assert_eq(mp_mkmodel_validate(&c, &err), MP_ERR_ARG);
    cr_assert(strstr(err.msg, "100") && strstr(err.msg, "F16"), "message: %s", err.msg);
}

/* A mix's class whose rows do not divide into its type's blocks takes llama.cpp's fallback type:
 * Q4_K_M at an expert FFN of 96 and attention rows of 128 gives ffn-down Q8_0 (Q6_K's) and
 * attn-output Q5_0 (Q4_K's); gate/up (rows of the 256-wide hidden size) stay Q4_K. The rule by
 * itself (F16 where even the blocks of 32 do not fit), and a class set by --type-CLASS never falls
 * back. The model loads and its expert entry names the mixed pair. */
Test(mkmodel, a_mix_falls_back_where_its_rows_do_not_fit)
{
    cr_assert_eq(mp_mkmodel_fallback_type(MP_TYPE_Q4_K, 512), MP_TYPE_Q4_K);
    cr_assert_eq(mp_mkmodel_fallback_type(MP_TYPE_Q4_K, 96), MP_TYPE_Q5_0);
    cr_assert_eq(mp_mkmodel_fallback_type(MP_TYPE_Q2_K, 96), MP_TYPE_IQ4_NL);
    cr_assert_eq(mp_mkmodel_fallback_type(MP_TYPE_Q3_K, 96), MP_TYPE_IQ4_NL);
    cr_assert_eq(mp_mkmodel_fallback_type(MP_TYPE_Q5_K, 96), MP_TYPE_Q5_1);
    cr_assert_eq(mp_mkmodel_fallback_type(MP_TYPE_IQ4_XS, 96), MP_TYPE_IQ4_NL);
    cr_assert_eq(mp_mkmodel_fallback_type(MP_TYPE_Q6_K, 96), MP_TYPE_Q8_0);
    cr_assert_eq(mp_mkmodel_fallback_type(MP_TYPE_Q4_K, 40), MP_TYPE_F16);
    cr_assert_eq(mp_mkmodel_fallback_type(MP_TYPE_Q8_0, 40), MP_TYPE_F16);
    cr_assert_eq(mp_mkmodel_fallback_type(MP_TYPE_BF16, 7), MP_TYPE_BF16);
    mp_mkmodel_config c = small_config();
    mp_error err = {0};
    cr_assert_eq(mp_mkmodel_set_mix(&c, "q4_k_m", &err), MP_OK);
    c.n_embd = 256;
    c.n_ff_exp = 96;
    c.n_head = 2;
    c.head_dim = 64;
    c.n_head_kv = 1;
    cr_assert_eq(mp_mkmodel_validate(&c, &err), MP_OK, "%s", err.msg);
    cr_assert_eq(mp_mkmodel_tensor_type(&c, MP_MK_FFN_DOWN, 0), MP_TYPE_Q8_0);
    cr_assert_eq(mp_mkmodel_tensor_type(&c, MP_MK_FFN_GATE, 0), MP_TYPE_Q4_K);
    cr_assert_eq(mp_mkmodel_tensor_type(&c, MP_MK_ATTN_OUT, 0), MP_TYPE_Q5_0);
    cr_assert_eq(mp_mkmodel_tensor_type(&c, MP_MK_ATTN_V, 0), MP_TYPE_Q6_K, "rows of the hidden size fit");
    char what[256];
    cr_assert_eq(mp_mkmodel_describe_fallbacks(&c, what, sizeof what), 2);
    cr_assert_str_eq(what, "attn-output Q4_K -> Q5_0 (rows of 128), ffn-down Q6_K -> Q8_0 (rows of 96)");
    const char *out = tmp_path("fallback.gguf");
    const char *const args[] = {"--arch", "qwen3moe", "--quant", "q4_k_m", "--layers", "2", "--experts", "8",
                                "--top-k", "2", "--hidden", "256", "--expert-ff", "96", "--heads", "2",
                                "--kv-heads", "1", "--head-dim", "64", "--quiet", "-o", out, NULL};
    cr_assert_eq(run_cmd(args), 0);
    mp_model *m = NULL;
    cr_assert_eq(mp_model_load(out, &m, &err), MP_OK, "%s", err.msg);
    cr_assert_eq(m->layers[0].down_exps.type, MP_TYPE_Q8_0);
    cr_assert_eq(m->layers[1].gate_exps.type, MP_TYPE_Q4_K);
    mp_model_free(m);
    cr_assert_eq(mp_mkmodel_set_type(&c, "ffn-down", "Q6_K", &err), MP_OK);
    cr_assert_eq(mp_mkmodel_tensor_type(&c, MP_MK_FFN_DOWN, 0), MP_TYPE_Q6_K, "set by --type-ffn-down: no fallback");
    cr_assert_eq(mp_mkmodel_tensor_type(&c, MP_MK_ATTN_OUT, 0), MP_TYPE_Q5_0, "the mix's others still fall back");
}

/* A small qwen2moe config: Q/K/V biases and a shared expert of n_ff_shexp. */
static mp_mkmodel_config small_qwen2moe(int64_t n_ff_shexp)
{
    mp_mkmodel_config c;
    mp_error err;
    cr_assert_eq(mp_mkmodel_arch("qwen2moe", &c, &err), MP_OK, "%s", err.msg);
    c = shrunk(c);
    c.n_ff_shexp = n_ff_shexp;
    return c;
}

static bool record_progress(void *user, uint64_t done, uint64_t total)
{
    uint64_t *last = user;
    last[0] = done;
    last[1] = total;
    return true;
}

/* Writes c to tmp_path(name), checks it (check_file) and that the progress ended at the bytes of
 * every tensor of the file (biases and sinks too); the file opened. */
static mp_gguf *write_with_progress(const mp_mkmodel_config *c, const char *name)
{
    mp_error err = {0};
    uint64_t last[2] = {0, 0}; /* done, total at the last progress call */
    cr_assert_eq(mp_mkmodel_write(c, tmp_path(name), true, record_progress, last, &err), MP_OK, "%s", err.msg);
    check_file(c, tmp_path(name));
    mp_gguf *g;
    cr_assert_eq(mp_gguf_open(tmp_path(name), &g, &err), MP_OK, "%s", err.msg);
    uint64_t file_data = 0;
    for (int64_t i = 0; i < mp_gguf_n_tensors(g); i++)
        file_data += mp_gguf_tensor_at(g, i)->nbytes;
    cr_assert(last[0] == last[1] && last[1] == file_data, "progress %llu of %llu, the file's tensors %llu bytes",
              (unsigned long long)last[0], (unsigned long long)last[1], (unsigned long long)file_data);
    return g;
}

/* qwen2moe: the file has the keys the loader reads (expert_shared_feed_forward_length, no
 * expert_weights_norm), the progress counts every tensor's bytes (the biases and shared expert's
 * too), every layer has its Q/K/V biases and shared expert with the shapes and the
 * q4_k_m types (gate/up Q4_K, down Q6_K like the routed experts' down, the vectors F32) and no q/k
 * norms; the loader takes it as MP_ARCH_QWEN2MOE. In f32 the values carry the design: biases of
 * modest size around 0, the shared expert's gate and gate/up ignore the bias channel and its down
 * never writes it. --type-shexp sets the three matrices; the llama layer mix gives the shared down
 * the routed down's type layer by layer. */
Test(mkmodel, qwen2moe_has_biases_and_a_shared_expert_the_loader_takes)
{
    mp_error err = {0};
    mp_mkmodel_config c = small_qwen2moe(512);
    const int64_t E = c.n_embd, Q = c.n_head * c.head_dim, KV = c.n_head_kv * c.head_dim;
    mp_gguf *g = write_with_progress(&c, "q2.gguf");
    uint32_t v;
    cr_assert_eq(mp_gguf_get_u32(g, "qwen2moe.expert_shared_feed_forward_length", &v, &err), MP_OK, "%s", err.msg);
    cr_assert_eq(v, 512);
    cr_assert_eq(mp_gguf_get_u32(g, "qwen2moe.expert_feed_forward_length", &v, &err), MP_OK, "%s", err.msg);
    cr_assert_eq(v, (uint32_t)c.n_ff_exp);
    cr_assert_lt(mp_gguf_find_key(g, "qwen2moe.expert_weights_norm"), 0, "qwen2moe keeps the softmax's weights");
    cr_assert_null(mp_gguf_find_tensor(g, "blk.0.attn_q_norm.weight"), "qwen2moe has no q/k norms");
    mp_gguf_close(g);

    mp_model *m = NULL;
    cr_assert_eq(mp_model_load(tmp_path("q2.gguf"), &m, &err), MP_OK, "%s", err.msg);
    cr_assert_eq(m->hp.arch, MP_ARCH_QWEN2MOE);
    cr_assert_eq(m->hp.n_ff_shexp, 512);
    cr_assert_not(m->hp.expert_weights_norm);
    for (int64_t il = 0; il < c.n_layer; il++) {
        const mp_layer *L = &m->layers[il];
        const struct {
            const char *what;
            const mp_tensor *t;
            int64_t ne0, ne1;
            int type;
        } want[] = {
            {"bq", &L->bq, Q, 1, MP_TYPE_F32},
            {"bk", &L->bk, KV, 1, MP_TYPE_F32},
            {"bv", &L->bv, KV, 1, MP_TYPE_F32},
            {"gate_inp_shexp", &L->gate_inp_shexp, E, 1, MP_TYPE_F32},
            {"gate_shexp", &L->gate_shexp, E, 512, MP_TYPE_Q4_K},
            {"up_shexp", &L->up_shexp, E, 512, MP_TYPE_Q4_K},
            {"down_shexp", &L->down_shexp, 512, E, MP_TYPE_Q6_K},
        };
        for (size_t k = 0; k < sizeof want / sizeof want[0]; k++) {
            const mp_tensor *t = want[k].t;
            cr_assert_not_null(t->data, "layer %lld: %s missing", (long long)il, want[k].what);
            cr_assert(t->ne[0] == want[k].ne0 && t->ne[1] == want[k].ne1 && t->ne[2] == 1,
                      "layer %lld: %s has ne [%lld, %lld, %lld]", (long long)il, want[k].what,
                      (long long)t->ne[0], (long long)t->ne[1], (long long)t->ne[2]);
            cr_assert_eq(t->type, want[k].type, "layer %lld: %s type %d", (long long)il, want[k].what, t->type);
        }
        cr_assert_null(L->q_norm.data);
    }
    mp_model_free(m);

    cr_assert_eq(mp_mkmodel_set_mix(&c, "f32", &err), MP_OK, "%s", err.msg);
    write_model(&c, tmp_path("q2f32.gguf"));
    cr_assert_eq(mp_model_load(tmp_path("q2f32.gguf"), &m, &err), MP_OK, "%s", err.msg);
    for (int64_t il = 0; il < c.n_layer; il++) {
        const mp_layer *L = &m->layers[il];
        const mp_tensor *bias[3] = {&L->bq, &L->bk, &L->bv};
        for (int k = 0; k < 3; k++) {
            const float *b = bias[k]->data;
            double sum = 0, sum2 = 0, amax = 0;
            for (int64_t j = 0; j < bias[k]->ne[0]; j++) {
                sum += b[j];
                sum2 += (double)b[j] * b[j];
                amax = fmax(amax, fabs(b[j]));
            }
            const double n = (double)bias[k]->ne[0], rms = sqrt(sum2 / n);
            cr_assert(rms > 0.15 && rms < 0.4 && fabs(sum / n) < 0.1 && amax < 1.0,
                      "layer %lld bias %d: rms %g, mean %g, max |b| %g", (long long)il, k, rms, sum / n, amax);
        }
        cr_assert_eq(((const float *)L->gate_inp_shexp.data)[0], 0.0f, "the shared gate reads the bias channel");
        const float *gate = L->gate_shexp.data, *up = L->up_shexp.data, *down = L->down_shexp.data;
        for (int64_t r = 0; r < 512; r++)
            cr_assert(gate[r * E] == 0.0f && up[r * E] == 0.0f, "row %lld reads the bias channel", (long long)r);
        for (int64_t j = 0; j < 512; j++)
            cr_assert_eq(down[j], 0.0f, "the shared down writes the bias channel");
    }
    mp_model_free(m);

    c = small_qwen2moe(512);
    cr_assert_eq(mp_mkmodel_set_type(&c, "shexp", "Q8_0", &err), MP_OK, "%s", err.msg);
    cr_assert(c.types[MP_MK_SHEXP_GATE] == MP_TYPE_Q8_0 && c.types[MP_MK_SHEXP_UP] == MP_TYPE_Q8_0 &&
              c.types[MP_MK_SHEXP_DOWN] == MP_TYPE_Q8_0 && c.types[MP_MK_FFN_DOWN] == MP_TYPE_Q6_K);
    write_model(&c, tmp_path("q2shexp.gguf"));
    check_file(&c, tmp_path("q2shexp.gguf"));

    c = small_qwen2moe(512);
    c.n_layer = 16;
    c.llama_layers = true;
    for (int64_t il = 0; il < 16; il++)
        cr_assert_eq(mp_mkmodel_tensor_type(&c, MP_MK_SHEXP_DOWN, il), mp_mkmodel_tensor_type(&c, MP_MK_FFN_DOWN, il),
                     "layer %lld", (long long)il);
    cr_assert_eq(mp_mkmodel_tensor_type(&c, MP_MK_SHEXP_DOWN, 2), MP_TYPE_Q4_K);
    cr_assert_eq(mp_mkmodel_tensor_type(&c, MP_MK_SHEXP_DOWN, 15), MP_TYPE_Q6_K);
}

/* --shared-ff belongs to architectures with a shared expert: the others refuse it in one line, as
 * they refuse the shared expert's and the biases' --type-CLASS; a size of 0 or past the limit is
 * refused like the other sizes. */
Test(mkmodel, shared_ff_is_refused_where_there_is_no_shared_expert)
{
    mp_error err = {0};
    static const char *archs[] = {"qwen3moe", "olmoe", "mixtral"};
    for (int i = 0; i < 3; i++) {
        mp_mkmodel_config c;
        cr_assert_eq(mp_mkmodel_arch(archs[i], &c, &err), MP_OK, "%s", err.msg);
        cr_assert_eq(c.n_ff_shexp, 0);
        cr_assert_eq(mp_mkmodel_validate(&c, &err), MP_OK, "%s", err.msg);
        c.n_ff_shexp = 512;
        cr_assert_eq(mp_mkmodel_validate(&c, &err), MP_ERR_ARG);
        cr_assert(strstr(err.msg, "--shared-ff 512") && strstr(err.msg, archs[i]) && strstr(err.msg, "no shared expert"),
                  "message: %s", err.msg);
        cr_assert_null(strchr(err.msg, '\n'), "message: %s", err.msg);
    }
    mp_mkmodel_config c = small_qwen2moe(1 << 21);
    cr_assert_eq(mp_mkmodel_validate(&c, &err), MP_ERR_ARG);
    cr_assert(strstr(err.msg, "--shared-ff 2097152: expected an integer in 1.."), "message: %s", err.msg);
    c.n_ff_shexp = 0;
    cr_assert_eq(mp_mkmodel_validate(&c, &err), MP_ERR_ARG);
    c = small_config();
    cr_assert_eq(mp_mkmodel_set_type(&c, "shexp", "Q8_0", &err), MP_OK, "%s", err.msg);
    cr_assert_eq(mp_mkmodel_validate(&c, &err), MP_ERR_ARG);
    cr_assert(strstr(err.msg, "qwen3moe has no shared expert"), "message: %s", err.msg);

    const char *out = tmp_path("shared.gguf");
    const char *const cases[][8] = {
        {"--preset", "tiny", "--shared-ff", "512", "-o", out, NULL},
        {"--arch", "olmoe", "--shared-ff", "256", "-o", out, NULL},
        {"--preset", "mixtral", "--shared-ff", "14336", "-o", out, NULL},
        {"--arch", "qwen2moe", "--shared-ff", "0", "-o", out, NULL},
        {"--arch", "qwen2moe", "--shared-ff", "-256", "-o", out, NULL},
        {"--arch", "qwen2moe", "--shared-ff", "2097152", "-o", out, NULL},
        {"--preset", "tiny", "--type-shexp", "Q8_0", "-o", out, NULL},
        {"--preset", "olmoe", "--type-bias", "F32", "-o", out, NULL},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        cr_assert_eq(run_cmd(cases[i]), 2, "case %zu (%s %s %s %s)", i, cases[i][0], cases[i][1], cases[i][2],
                     cases[i][3]);
        cr_assert_eq(count_dir_entries(), 0, "case %zu left a file behind", i);
    }
    const char *const ok[] = {"--arch", "qwen2moe", "--layers", "1", "--experts", "4", "--top-k", "2", "--vocab",
                              "300", "--shared-ff", "256", "--quiet", "-o", out, NULL};
    cr_assert_eq(run_cmd(ok), 0);
    mp_model *m = NULL;
    cr_assert_eq(mp_model_load(out, &m, &err), MP_OK, "%s", err.msg);
    cr_assert_eq(m->hp.n_ff_shexp, 256);
    mp_model_free(m);
}

/* The shared expert's rows fall back on their own: a shared FFN of 96 under q4_k_m gives its down
 * llama.cpp's Q6_K fallback, Q8_0, while the routed experts (FFN 256) keep Q6_K and its gate/up
 * (rows of the hidden size) Q4_K; the model loads, so the fallback type validates. */
Test(mkmodel, shared_expert_rows_fall_back_where_they_do_not_fit)
{
    mp_error err = {0};
    mp_mkmodel_config c = small_qwen2moe(96);
    cr_assert_eq(mp_mkmodel_validate(&c, &err), MP_OK, "%s", err.msg);
    cr_assert_eq(mp_mkmodel_tensor_type(&c, MP_MK_SHEXP_DOWN, 0), MP_TYPE_Q8_0);
    cr_assert_eq(mp_mkmodel_tensor_type(&c, MP_MK_SHEXP_GATE, 0), MP_TYPE_Q4_K);
    cr_assert_eq(mp_mkmodel_tensor_type(&c, MP_MK_FFN_DOWN, 0), MP_TYPE_Q6_K);
    char what[256];
    cr_assert_eq(mp_mkmodel_describe_fallbacks(&c, what, sizeof what), 1);
    cr_assert_str_eq(what, "shexp-down Q6_K -> Q8_0 (rows of 96)");
    c.n_ff_shexp = 40; /* not even a multiple of 32 */
    cr_assert_eq(mp_mkmodel_tensor_type(&c, MP_MK_SHEXP_DOWN, 0), MP_TYPE_F16);
    cr_assert_eq(mp_mkmodel_set_type(&c, "shexp-down", "Q6_K", &err), MP_OK, "%s", err.msg);
    cr_assert_eq(mp_mkmodel_validate(&c, &err), MP_ERR_ARG);
    cr_assert(strstr(err.msg, "--type-shexp-down Q6_K") && strstr(err.msg, "shared expert FFN size"), "message: %s",
              err.msg);

    const char *out = tmp_path("shfallback.gguf");
    const char *const args[] = {"--arch", "qwen2moe", "--layers", "2", "--experts", "4", "--top-k", "2",
                                "--vocab", "300", "--shared-ff", "96", "--quiet", "-o", out, NULL};
    cr_assert_eq(run_cmd(args), 0);
    mp_model *m = NULL;
    cr_assert_eq(mp_model_load(out, &m, &err), MP_OK, "%s", err.msg);
    for (int64_t il = 0; il < 2; il++) {
        cr_assert_eq(m->layers[il].down_shexp.type, MP_TYPE_Q8_0);
        cr_assert_eq(m->layers[il].down_shexp.ne[0], 96);
        cr_assert_eq(m->layers[il].gate_shexp.type, MP_TYPE_Q4_K);
        cr_assert_eq(m->layers[il].down_exps.type, MP_TYPE_Q6_K);
    }
    mp_model_free(m);
}

/* A small gpt-oss config (the --arch defaults: window 128, YaRN 4 x 128, the mxfp4_moe mix). */
static mp_mkmodel_config small_gptoss(void)
{
    mp_mkmodel_config c;
    mp_error err;
    cr_assert_eq(mp_mkmodel_arch("gpt-oss", &c, &err), MP_OK, "%s", err.msg);
    return shrunk(c);
}

/* rms, mean and largest magnitude of n floats */
typedef struct moments {
    double rms, mean, amax;
} moments;

static moments moments_of(const float *x, int64_t n)
{
    double sum = 0, sum2 = 0, amax = 0;
    for (int64_t j = 0; j < n; j++) {
        sum += x[j];
        sum2 += (double)x[j] * x[j];
        amax = fmax(amax, fabs(x[j]));
    }
    return (moments){sqrt(sum2 / (double)n), sum / (double)n, amax};
}

/* gpt-oss: the file has the keys the loader reads (sliding_window, rope.scaling.* as "yarn", the head
 * size, o200k's pre-tokenizer), the progress counts every tensor's bytes, every layer has its
 * Q/K/V/output biases, sinks, router and expert biases with the runtime's shapes, in F32 beside the
 * mxfp4_moe mix's MXFP4 experts and Q8_0 matrices, and the pre-MoE norm named post_attention_norm;
 * the loader takes it as MP_ARCH_GPTOSS with its window and YaRN. In f32 the values carry the design:
 * biases of modest size around 0, those that write the residual stream (attn_output's, the experts'
 * down) scaled like their matrices and sparing the bias channel, sinks of an attention score's size,
 * and the router's prior in its bias (exactly -skew ln(rank + 1)) while its weight ignores the bias
 * channel. Split and fused expert layouts load with the merged file's values. */
Test(mkmodel, gpt_oss_has_biases_sinks_and_a_window_the_loader_takes)
{
    mp_error err = {0};
    mp_mkmodel_config c = small_gptoss();
    const int64_t E = c.n_embd, Q = c.n_head * c.head_dim, KV = c.n_head_kv * c.head_dim, F = c.n_ff_exp,
                  X = c.n_expert;
    cr_assert_str_eq(c.mix, "mxfp4_moe");
    mp_gguf *g = write_with_progress(&c, "go.gguf");
    cr_assert_eq(mp_gguf_n_tensors(g), 3 + 19 * c.n_layer, "token_embd, output_norm, output and 19 per layer");
    uint32_t v;
    float f;
    mp_str str;
    cr_assert_eq(mp_gguf_get_u32(g, "gpt-oss.attention.sliding_window", &v, &err), MP_OK, "%s", err.msg);
    cr_assert_eq(v, 128);
    cr_assert_eq(mp_gguf_get_str(g, "gpt-oss.rope.scaling.type", &str, &err), MP_OK, "%s", err.msg);
    cr_assert(mp_str_eq(str, "yarn"));
    cr_assert_eq(mp_gguf_get_f32(g, "gpt-oss.rope.scaling.factor", &f, &err), MP_OK, "%s", err.msg);
    cr_assert_eq(f, 4.0f);
    cr_assert_eq(mp_gguf_get_u32(g, "gpt-oss.rope.scaling.original_context_length", &v, &err), MP_OK, "%s", err.msg);
    cr_assert_eq(v, 128);
    cr_assert_eq(mp_gguf_get_f32(g, "gpt-oss.rope.freq_base", &f, &err), MP_OK, "%s", err.msg);
    cr_assert_eq(f, 150000.0f);
    cr_assert_eq(mp_gguf_get_u32(g, "gpt-oss.attention.key_length", &v, &err), MP_OK, "%s", err.msg);
    cr_assert_eq(v, (uint32_t)c.head_dim);
    cr_assert_eq(mp_gguf_get_u32(g, "general.file_type", &v, &err), MP_OK, "%s", err.msg);
    cr_assert_eq(v, 38, "llama.cpp's MOSTLY_MXFP4_MOE");
    cr_assert_eq(mp_gguf_get_str(g, "tokenizer.ggml.pre", &str, &err), MP_OK, "%s", err.msg);
    cr_assert(mp_str_eq(str, "gpt-4o"));
    cr_assert_null(mp_gguf_find_tensor(g, "blk.0.ffn_norm.weight"), "gpt-oss names its pre-MoE norm post_attention_norm");
    cr_assert_null(mp_gguf_find_tensor(g, "blk.0.attn_q_norm.weight"), "gpt-oss has no q/k norms");
    mp_gguf_close(g);

    mp_model *m = NULL;
    cr_assert_eq(mp_model_load(tmp_path("go.gguf"), &m, &err), MP_OK, "%s", err.msg);
    cr_assert_eq(m->hp.arch, MP_ARCH_GPTOSS);
    cr_assert_eq(m->hp.n_swa, 128);
    cr_assert_eq(m->hp.rope_yarn_factor, 4.0f);
    cr_assert_eq(m->hp.rope_yarn_orig_ctx, 128);
    cr_assert_eq(m->hp.rms_eps, 1e-5f);
    cr_assert(m->hp.expert_weights_norm, "gpt-oss's softmax over the k chosen logits");
    for (int64_t il = 0; il < c.n_layer; il++) {
        const mp_layer *L = &m->layers[il];
        const struct {
            const char *what;
            const mp_tensor *t;
            int64_t ne0, ne1;
            int type;
        } want[] = {
            {"wq", &L->wq, E, Q, MP_TYPE_Q8_0},
            {"wo", &L->wo, Q, E, MP_TYPE_Q8_0},
            {"bq", &L->bq, Q, 1, MP_TYPE_F32},
            {"bk", &L->bk, KV, 1, MP_TYPE_F32},
            {"bv", &L->bv, KV, 1, MP_TYPE_F32},
            {"bo", &L->bo, E, 1, MP_TYPE_F32},
            {"sinks", &L->sinks, c.n_head, 1, MP_TYPE_F32},
            {"ffn_norm (post_attention_norm)", &L->ffn_norm, E, 1, MP_TYPE_F32},
            {"gate_inp", &L->gate_inp, E, X, MP_TYPE_F32},
            {"gate_inp_b", &L->gate_inp_b, X, 1, MP_TYPE_F32},
            {"gate_exps_b", &L->gate_exps_b, F, X, MP_TYPE_F32},
            {"up_exps_b", &L->up_exps_b, F, X, MP_TYPE_F32},
            {"down_exps_b", &L->down_exps_b, E, X, MP_TYPE_F32},
        };
        for (size_t k = 0; k < sizeof want / sizeof want[0]; k++) {
            const mp_tensor *t = want[k].t;
            cr_assert_not_null(t->data, "layer %lld: %s missing", (long long)il, want[k].what);
            cr_assert(t->ne[0] == want[k].ne0 && t->ne[1] == want[k].ne1 && t->ne[2] == 1,
                      "layer %lld: %s has ne [%lld, %lld, %lld]", (long long)il, want[k].what,
                      (long long)t->ne[0], (long long)t->ne[1], (long long)t->ne[2]);
            cr_assert_eq(t->type, want[k].type, "layer %lld: %s type %d", (long long)il, want[k].what, t->type);
        }
        cr_assert(L->gate_exps.type == MP_TYPE_MXFP4 && L->up_exps.type == MP_TYPE_MXFP4 &&
                  L->down_exps.type == MP_TYPE_MXFP4, "layer %lld: experts not MXFP4", (long long)il);
        cr_assert_null(L->q_norm.data);
    }
    mp_model_free(m);

    /* the values, in f32 */
    cr_assert_eq(mp_mkmodel_set_mix(&c, "f32", &err), MP_OK, "%s", err.msg);
    c.skew = 0.8;
    write_model(&c, tmp_path("gof32.gguf"));
    cr_assert_eq(mp_model_load(tmp_path("gof32.gguf"), &m, &err), MP_OK, "%s", err.msg);
    const double residual = 1.0 / sqrt(2.0 * (double)c.n_layer);
    double sink_sum2 = 0, sink_amax = 0;
    for (int64_t il = 0; il < c.n_layer; il++) {
        const mp_layer *L = &m->layers[il];
        const struct {
            const char *what;
            const mp_tensor *t;
            double scale;
        } bias[] = {
            {"bq", &L->bq, 1}, {"bk", &L->bk, 1}, {"bv", &L->bv, 1}, {"gate_exps_b", &L->gate_exps_b, 1},
            {"up_exps_b", &L->up_exps_b, 1}, {"bo", &L->bo, residual}, {"down_exps_b", &L->down_exps_b, residual},
        };
        for (size_t k = 0; k < sizeof bias / sizeof bias[0]; k++) {
            const mp_tensor *t = bias[k].t;
            const moments mo = moments_of(t->data, t->ne[0] * t->ne[1]);
            const double rms = mo.rms / bias[k].scale;
            cr_assert(rms > 0.15 && rms < 0.4 && fabs(mo.mean) / bias[k].scale < 0.1 && mo.amax / bias[k].scale < 1.0,
                      "layer %lld %s: rms %g (of its scale), mean %g, max |b| %g", (long long)il, bias[k].what, rms,
                      mo.mean, mo.amax);
        }
        /* residual writers spare the bias channel: element 0 of attn_output's and each expert's down bias */
        cr_assert_eq(((const float *)L->bo.data)[0], 0.0f, "layer %lld: bo writes the bias channel", (long long)il);
        for (int64_t e = 0; e < X; e++)
            cr_assert_eq(((const float *)L->down_exps_b.data)[e * E], 0.0f, "layer %lld expert %lld: down bias writes "
                         "the bias channel", (long long)il, (long long)e);
        const moments sk = moments_of(L->sinks.data, c.n_head);
        sink_sum2 += sk.rms * sk.rms * (double)c.n_head;
        sink_amax = fmax(sink_amax, sk.amax);
        const float *router = L->gate_inp.data, *router_b = L->gate_inp_b.data; /* (n_expert, n_embd), (n_expert) */
        for (int64_t e = 0; e < X; e++) {
            const int64_t rank = mp_mkmodel_expert_rank(&c, il, e);
            cr_assert_eq(router_b[e], (float)(-c.skew * log((double)rank + 1.0)), "layer %lld expert %lld",
                         (long long)il, (long long)e);
            cr_assert_eq(router[e * E], 0.0f, "layer %lld: the router reads the bias channel", (long long)il);
        }
    }
    const double sink_rms = sqrt(sink_sum2 / (double)(c.n_layer * c.n_head));
    cr_assert(sink_rms > 0.4 && sink_rms < 1.8 && sink_amax <= 3.47, "sinks: rms %g, max |s| %g", sink_rms, sink_amax);
    mp_model_free(m);

    /* the experts each their own tensor, or gate and up fused: the merged file's values, biases as they are */
    mp_model *merged = NULL;
    cr_assert_eq(mp_model_load(tmp_path("go.gguf"), &merged, &err), MP_OK, "%s", err.msg);
    c = small_gptoss();
    for (int layout = 0; layout < 2; layout++) {
        c.split_experts = layout == 0;
        c.fuse_gate_up = layout == 1;
        write_model(&c, tmp_path("golayout.gguf"));
        cr_assert_eq(mp_model_load(tmp_path("golayout.gguf"), &m, &err), MP_OK, "%s", err.msg);
        for (int64_t il = 0; il < c.n_layer; il++) {
            const mp_layer *A = &merged->layers[il], *B = &m->layers[il];
            const mp_tensor *x[6] = {&A->gate_exps, &A->up_exps, &A->down_exps, &A->gate_exps_b, &A->up_exps_b,
                                     &A->down_exps_b};
            const mp_tensor *y[6] = {&B->gate_exps, &B->up_exps, &B->down_exps, &B->gate_exps_b, &B->up_exps_b,
                                     &B->down_exps_b};
            for (int k = 0; k < 6; k++)
                cr_assert(x[k]->nbytes == y[k]->nbytes && memcmp(x[k]->data, y[k]->data, x[k]->nbytes) == 0,
                          "layout %d layer %lld tensor %d: differs from the merged file's", layout, (long long)il, k);
        }
        mp_model_free(m);
    }
    mp_model_free(merged);

    /* flags: a window and YaRN of one's own, or none; YaRN on another architecture */
    const char *out = tmp_path("goflags.gguf");
    const char *const args[] = {"--arch", "gpt-oss", "--layers", "2", "--experts", "4", "--top-k", "2", "--vocab",
                                "300", "--sliding-window", "16", "--yarn-factor", "0", "--quiet", "-o", out, NULL};
    cr_assert_eq(run_cmd(args), 0);
    cr_assert_eq(mp_model_load(out, &m, &err), MP_OK, "%s", err.msg);
    cr_assert(m->hp.n_swa == 16 && m->hp.rope_yarn_factor == 0.0f, "window %lld, YaRN factor %g",
              (long long)m->hp.n_swa, (double)m->hp.rope_yarn_factor);
    mp_model_free(m);
    const char *const yarn[] = {"--preset", "tiny", "--layers", "2", "--experts", "4", "--top-k", "2", "--vocab",
                                "300", "--yarn-factor", "8", "--yarn-ctx", "64", "--quiet", "--force", "-o", out, NULL};
    cr_assert_eq(run_cmd(yarn), 0);
    cr_assert_eq(mp_model_load(out, &m, &err), MP_OK, "%s", err.msg);
    cr_assert(m->hp.arch == MP_ARCH_QWEN3MOE && m->hp.rope_yarn_factor == 8.0f && m->hp.rope_yarn_orig_ctx == 64 &&
                  m->hp.n_swa == 0,
              "qwen3moe with YaRN: factor %g, original context %lld", (double)m->hp.rope_yarn_factor,
              (long long)m->hp.rope_yarn_orig_ctx);
    mp_model_free(m);
}

/* The gpt-oss-20b preset: gpt-oss-20b's shape, window and YaRN; its mxfp4_moe mix fits the hidden size
 * of 2880 (90 blocks of 32, no block of 256) as it is, so nothing falls back, and its tensor data adds
 * up from the types' block sizes; a K-quant mix falls back class by class as llama.cpp's quantizer
 * does, and a K-quant set by --type-CLASS is refused naming a type that fits. */
Test(mkmodel, gpt_oss_20b_preset_has_its_shape_and_an_mxfp4_mix_that_fits)
{
    mp_error err = {0};
    mp_mkmodel_config c;
    cr_assert_eq(mp_mkmodel_preset("gpt-oss-20b", &c, &err), MP_OK, "%s", err.msg);
    cr_assert_eq(c.arch, MP_ARCH_GPTOSS);
    cr_assert(c.n_layer == 24 && c.n_embd == 2880 && c.n_head == 64 && c.n_head_kv == 8 && c.head_dim == 64 &&
                  c.n_expert == 32 && c.n_expert_used == 4 && c.n_ff_exp == 2880 && c.n_vocab == 201088 &&
                  c.n_ctx == 131072 && c.n_ff_shexp == 0,
              "the preset's shape");
    cr_assert(c.n_swa == 128 && c.rope_yarn_factor == 32.0f && c.rope_yarn_orig_ctx == 4096 &&
                  c.rope_freq_base == 150000.0f && c.rms_eps == 1e-5f,
              "window, YaRN, RoPE base, epsilon");
    cr_assert_str_eq(c.mix, "mxfp4_moe");
    cr_assert_eq(mp_mkmodel_validate(&c, &err), MP_OK, "%s", err.msg);
    char what[512];
    cr_assert_eq(mp_mkmodel_describe_fallbacks(&c, what, sizeof what), 0, "fell back: %s", what);
    mp_mk_tensor *plan;
    int64_t n;
    cr_assert_eq(mp_mkmodel_plan(&c, &plan, &n, &err), MP_OK, "%s", err.msg);
    cr_assert_eq(n, 3 + 19 * 24);
    for (int64_t i = 0; i < n; i++) {
        const mp_mk_tensor *t = &plan[i];
        const int want = t->cls == MP_MK_FFN_GATE || t->cls == MP_MK_FFN_UP || t->cls == MP_MK_FFN_DOWN ? MP_TYPE_MXFP4
                         : t->n_dims == 1 || t->cls == MP_MK_ROUTER || t->cls == MP_MK_BIAS           ? MP_TYPE_F32
                                                                                                       : MP_TYPE_Q8_0;
        cr_assert_eq(t->type, want, "%s: type %d, expected %d", t->name, t->type, want);
    }
    /* MXFP4: 17 bytes a block of 32, Q8_0 34; rows of 2880 = 90 blocks, attn_output's of 4096 = 128 */
    const uint64_t experts = 3ull * 32 * 2880 * (90 * 17);                        /* gate, up, down */
    const uint64_t attn = (4096ull + 2 * 512) * (90 * 34) + 2880ull * (128 * 34); /* q, k, v; output */
    /* two norms, the q, k, v and output biases, sinks, router and its bias, the experts' biases */
    const uint64_t f32 = 4ull * (2 * 2880 + 4096 + 2 * 512 + 2880 + 64 + 2880 * 32 + 32 + 3 * 2880 * 32);
    const uint64_t want = 24 * (experts + attn + f32) + 2ull * 201088 * (90 * 34) /* embd, output */ + 4ull * 2880;
    cr_assert_eq(mp_mkmodel_data_bytes(plan, n), want, "%llu bytes of tensor data, expected %llu",
                 (unsigned long long)mp_mkmodel_data_bytes(plan, n), (unsigned long long)want);
    free(plan);

    cr_assert_eq(mp_mkmodel_set_mix(&c, "q4_k_m", &err), MP_OK, "%s", err.msg);
    cr_assert_eq(mp_mkmodel_validate(&c, &err), MP_OK, "%s", err.msg);
    cr_assert_eq(mp_mkmodel_tensor_type(&c, MP_MK_FFN_GATE, 0), MP_TYPE_Q5_0);
    cr_assert_eq(mp_mkmodel_tensor_type(&c, MP_MK_FFN_DOWN, 0), MP_TYPE_Q8_0);
    cr_assert_eq(mp_mkmodel_tensor_type(&c, MP_MK_ATTN_OUT, 0), MP_TYPE_Q4_K, "rows of 64 x 64 = 4096 fit Q4_K");
    cr_assert_eq(mp_mkmodel_describe_fallbacks(&c, what, sizeof what), 8, "%s", what); /* all but attn-output */
    cr_assert_eq(mp_mkmodel_set_type(&c, "experts", "Q4_K", &err), MP_OK, "%s", err.msg);
    cr_assert_eq(mp_mkmodel_validate(&c, &err), MP_ERR_ARG);
    cr_assert(strstr(err.msg, "2880") && strstr(err.msg, "Q5_0"), "message: %s", err.msg);
}

Test(mkmodel, existing_output_needs_force)
{
    const char *out = tmp_path("exists.gguf");
    FILE *f = fopen(out, "w");
    cr_assert_not_null(f);
    fputs("precious", f);
    fclose(f);
    const char *const no_force[] = {"--preset", "tiny", "--layers", "1", "--experts", "4",
                                    "--top-k", "2", "--vocab", "300", "-o", out, NULL};
    cr_assert_neq(run_cmd(no_force), 0);
    size_t n;
    unsigned char *buf = read_all(out, &n);
    cr_assert(n == 8 && !memcmp(buf, "precious", 8), "existing file was modified");
    free(buf);
    cr_assert_eq(count_dir_entries(), 1);
    const char *const force[] = {"--preset", "tiny", "--layers", "1", "--experts", "4", "--top-k",
                                 "2", "--vocab", "300", "--quant", "q8_0", "--force", "--quiet",
                                 "-o", out, NULL};
    cr_assert_eq(run_cmd(force), 0);
    mp_gguf *g;
    mp_error err;
    cr_assert_eq(mp_gguf_open(out, &g, &err), MP_OK, "%s", err.msg);
    mp_gguf_close(g);
    cr_assert_eq(count_dir_entries(), 1);
}

/* ---- routing, measured by running the model ---- */

static mp_mk_routes measure(const char *path, int64_t n_seq, int64_t seq_len)
{
    mp_mk_routes r;
    mp_error err = {0};
    /* One thread: the counts do not depend on it, and the suite shares small CI machines. */
    cr_assert_eq(mp_mkmodel_measure_routes(path, n_seq, seq_len, 1, &r, &err), MP_OK, "%s",
                 err.msg);
    cr_assert_eq(r.n_tokens, n_seq * seq_len);
    int64_t all = 0;
    for (int64_t i = 0; i < r.n_layer * r.n_expert; i++)
        all += r.counts[i];
    cr_assert_eq(all, r.n_layer * r.n_tokens * r.top_k, "every token routed top-k times per layer");
    return r;
}

/* Skews 0, 0.5, 1 and 2 on a 4-layer model of arch (16 experts, top-4, hidden 64), measured over 16
 * sequences x 64 tokens: the share of the most-used half of the experts, and the share of the
 * generator's top-ranked half; both rise with the skew, and at 2 the top-ranked half has most routes. */
static void check_skew_raises_concentration(const char *arch)
{
    static const double skews[] = {0.0, 0.5, 1.0, 2.0};
    double share[4], rank_share[4];
    for (int i = 0; i < 4; i++) {
        mp_mkmodel_config c;
        mp_error err;
        cr_assert_eq(mp_mkmodel_arch(arch, &c, &err), MP_OK, "%s", err.msg);
        c = shrunk(c);
        cr_assert_eq(mp_mkmodel_set_mix(&c, "q8_0", &err), MP_OK);
        if (c.n_swa)
            c.n_swa = 16; /* the even layers' windows slide within the 64 tokens */
        c.n_embd = 64;
        c.head_dim = 16;
        c.n_ff_exp = 64;
        c.n_layer = 4;
        c.n_expert = 16;
        c.n_expert_used = 4;
        c.n_vocab = 512;
        c.seed = 7;
        c.skew = skews[i];
        write_model(&c, tmp_path("skew.gguf"));
        mp_mk_routes rc = measure(tmp_path("skew.gguf"), 16, 64);
        share[i] = mp_mk_routes_top_half_share(&rc);
        /* Routes that went to the experts the generator ranked in the top half. */
        int64_t top = 0, all = 0;
        for (int64_t l = 0; l < rc.n_layer; l++)
            for (int64_t e = 0; e < rc.n_expert; e++) {
                all += rc.counts[l * rc.n_expert + e];
                if (mp_mkmodel_expert_rank(&c, l, e) < rc.n_expert / 2)
                    top += rc.counts[l * rc.n_expert + e];
            }
        rank_share[i] = (double)top / (double)all;
        cr_log_info("%s, skew %.1f: top-half share %.3f, share of generator's top-half ranks %.3f", arch,
                    skews[i], share[i], rank_share[i]);
        mp_mk_routes_free(&rc);
    }
    for (int i = 1; i < 4; i++) {
        cr_assert_gt(share[i], share[i - 1], "skew %.1f: share %.3f not above %.3f at skew %.1f",
                     skews[i], share[i], share[i - 1], skews[i - 1]);
        cr_assert_gt(rank_share[i], rank_share[i - 1], "skew %.1f: rank share %.3f vs %.3f",
                     skews[i], rank_share[i], rank_share[i - 1]);
    }
    /* The preferred experts are the ones the generator ranked first, not a side effect. */
    cr_assert_gt(rank_share[3], 0.75, "%s, skew 2: %.3f of routes to the top-ranked half", arch, rank_share[3]);
}

Test(mkmodel, skew_raises_routing_concentration_monotonically)
{
    check_skew_raises_concentration("qwen3moe");
}

/* gpt-oss carries the prior in its router's bias rather than the bias channel: the same rise. */
Test(mkmodel, skew_raises_routing_concentration_through_a_router_bias)
{
    check_skew_raises_concentration("gpt-oss");
}

/* The default skew on FLAME-MoE-290M's routing geometry (25 layers, 64 experts, top-6) over as
 * many tokens as its trace (32 sequences x 64 tokens): the real trace
 * (data/traces/flame-moe-290m-prefill.csv) has its top 32 experts serving 58.1 % of routes
 * (per layer 56.3-60.7 %). The preset's shapes, in q8_0 rather than q4_k_m and with an expert FFN
 * of 64 rather than 256, only to run fast under the sanitizers: measured in release builds, the
 * share moves by 0.001 for either change. With no skew at all the share is already ~0.59:
 * routing follows token identity and the corpus repeats tokens (docs/mkmodel.md). */
Test(mkmodel, default_skew_matches_the_flame_trace_concentration, .timeout = 600)
{
    const double flame_share = 0.581;
    mp_mkmodel_config c;
    mp_error err;
    cr_assert_eq(mp_mkmodel_preset("flame", &c, &err), MP_OK, "%s", err.msg);
    cr_assert_eq(mp_mkmodel_set_mix(&c, "q8_0", &err), MP_OK);
    c.n_ff_exp = 64;
    c.n_threads = 2;
    write_model(&c, tmp_path("flame.gguf"));
    mp_mk_routes rc = measure(tmp_path("flame.gguf"), 32, 64);
    double share = mp_mk_routes_top_half_share(&rc);
    cr_log_info("flame geometry, default skew %.2f: top-half share %.3f (FLAME trace: %.3f)",
                c.skew, share, flame_share);
    cr_assert(fabs(share - flame_share) < 0.03, "top-half share %.3f, FLAME's %.3f", share,
              flame_share);
    mp_mk_routes_free(&rc);
}

static bool cancel_after_first_chunk(void *user, uint64_t done, uint64_t total)
{
    int *calls = user;
    cr_assert(done > 0 && done <= total);
    return ++*calls < 2;
}

/* A cancelled write (the CLI's Ctrl-C) fails and leaves no output and no temporary file. */
Test(mkmodel, cancelled_write_leaves_nothing)
{
    mp_mkmodel_config c = small_config();
    mp_error err = {0};
    int calls = 0;
    mp_status st = mp_mkmodel_write(&c, tmp_path("cancel.gguf"), false, cancel_after_first_chunk,
                                    &calls, &err);
    cr_assert_eq(st, MP_ERR_IO, "status %d: %s", st, err.msg);
    cr_assert(strstr(err.msg, "interrupted"), "message: %s", err.msg);
    cr_assert_eq(calls, 2);
    cr_assert_eq(count_dir_entries(), 0, "a cancelled write left a file");
}

/* A model that cannot fit in its folder's file system is refused before a byte is written, with
 * both sizes said; one that fits passes the check. */
Test(mkmodel, a_model_larger_than_the_free_space_is_refused_first)
{
    mp_error err = {0};
    const char *out = tmp_path("big.gguf");
    cr_assert_eq(mp_output_check_space(out, "file", UINT64_MAX, &err), MP_ERR_IO);
    cr_assert(strstr(err.msg, "big.gguf") && strstr(err.msg, "18446744073709551615 bytes") && strstr(err.msg, "free"),
              "message: %s", err.msg);
    cr_assert_eq(mp_output_check_space(out, "file", 1, &err), MP_OK, "%s", err.msg);
    cr_assert_eq(mp_output_check_space("no-folder.gguf", "file", 1, &err), MP_OK, "%s", err.msg); /* the current folder */
    cr_assert_eq(count_dir_entries(), 0, "the check wrote a file");
}
