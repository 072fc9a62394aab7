/* analyzer/validate_model.c — --model checks: every node's shape and bytes per expert against
 * the GGUF the trace claims to come from.
 *
 * From the GGUF (gguf/gguf.h, read over mmap, nothing loaded): general.architecture, then
 * ARCH.block_count, ARCH.expert_count and ARCH.expert_used_count; a node's bytes per expert are
 * the exact sizes of blk.LAYER.ffn_{gate,up,down}_exps.weight divided by their expert dimension
 * (ne[2]), summed, or of one expert's blk.LAYER.ffn_{gate,up,down}.E.weight in a file that stores
 * each expert as its own tensor (gguf/gguf_experts.h). A node whose trace has no byte count takes the GGUF's (reported in the JSON).
 * The model file is not hashed (tens of GB): the run's SHA-256 is compared between traces only.
 */
#include <stdio.h>
#include <string.h>

#include "analyzer/validate.h"
#include "gguf/gguf.h"
#include "gguf/gguf_experts.h"

#define PROBLEM(...)                                                                              \
    do {                                                                                          \
        if (mp_an_problem(pb, __VA_ARGS__) != MP_OK) {                                            \
            st = MP_ERR_FORMAT;                                                                   \
            goto done;                                                                            \
        }                                                                                         \
    } while (0)

static mp_status get_count(const mp_gguf *g, const char *arch, const char *what, int64_t *out,
                           mp_error *err)
{
    char key[160];
    snprintf(key, sizeof key, "%s.%s", arch, what);
    return mp_gguf_get_i64(g, key, out, err);
}

mp_status mp_an_check_model(mp_an_input *in, const char *model_path, mp_an_problems *pb,
                            mp_error *err)
{
    mp_gguf *g = NULL;
    mp_status st = mp_gguf_open(model_path, &g, err);
    if (st != MP_OK)
        return st;
    mp_str arch_str;
    char arch[64];
    int64_t n_block, n_expert, n_used;
    if ((st = mp_gguf_get_str(g, "general.architecture", &arch_str, err)) != MP_OK)
        goto done;
    snprintf(arch, sizeof arch, "%.*s", (int)(arch_str.len < 63 ? arch_str.len : 63), arch_str.ptr);
    if ((st = get_count(g, arch, "block_count", &n_block, err)) != MP_OK ||
        (st = get_count(g, arch, "expert_count", &n_expert, err)) != MP_OK ||
        (st = get_count(g, arch, "expert_used_count", &n_used, err)) != MP_OK)
        goto done;
    for (int32_t i = 0; i < in->n_nodes; i++) {
        mp_an_node *nd = &in->nodes[i];
        if (nd->layer < 0 || nd->layer >= n_block)
            PROBLEM("trace %s: node %lld: layer %lld, but model %s has %lld blocks",
                    in->meta[0].path, (long long)nd->node_index, (long long)nd->layer, model_path,
                    (long long)n_block);
        if (nd->n_experts != n_expert || nd->top_k != n_used)
            PROBLEM("trace %s: node %lld (layer %lld): %lld experts, top-%lld, but model %s has "
                    "%lld experts, top-%lld",
                    in->meta[0].path, (long long)nd->node_index, (long long)nd->layer,
                    (long long)nd->n_experts, (long long)nd->top_k, model_path,
                    (long long)n_expert, (long long)n_used);
        uint64_t bytes = 0;
        bool complete = true;
        for (int p = 0; p < MP_GGUF_EXPERT_KINDS; p++) {
            /* merged (blk.N.ffn_gate_exps.weight) or one tensor per expert (blk.N.ffn_gate.E.weight) */
            mp_gguf_experts x;
            mp_error xe = {0};
            char name[96];
            snprintf(name, sizeof name, "blk.%lld.ffn_%s_exps.weight", (long long)nd->layer,
                     mp_gguf_expert_kind_name(p));
            if (mp_gguf_layer_experts(g, nd->layer, p, n_expert, &x, &xe) != MP_OK) {
                complete = false;
                PROBLEM("trace %s: node %lld (layer %lld): %s", in->meta[0].path, (long long)nd->node_index,
                        (long long)nd->layer, xe.msg);
                continue;
            }
            if (!x.present || (x.merged && (x.merged->n_dims != 3 || x.n_expert != n_expert))) {
                complete = false;
                PROBLEM("trace %s: node %lld (layer %lld): model %s has %s %s, expected a 3-d "
                        "expert tensor of %lld experts (or one 2-d tensor per expert)",
                        in->meta[0].path, (long long)nd->node_index, (long long)nd->layer,
                        model_path, x.present ? "a mis-shaped" : "no", name, (long long)n_expert);
                continue;
            }
            bytes += x.expert_bytes;
        }
        if (!complete)
            continue;
        if (nd->expert_bytes > 0 && (uint64_t)nd->expert_bytes != bytes)
            PROBLEM("trace %s: node %lld (layer %lld): %lld bytes per expert, but model %s says "
                    "%llu (gate + up + down of blk.%lld)",
                    in->meta[0].path, (long long)nd->node_index, (long long)nd->layer,
                    (long long)nd->expert_bytes, model_path, (unsigned long long)bytes,
                    (long long)nd->layer);
        if (nd->expert_bytes <= 0) {
            nd->expert_bytes = (int64_t)bytes;
            in->bytes_from_model = true;
        }
    }
done:
    mp_gguf_close(g);
    return st;
}
