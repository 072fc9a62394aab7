/* gguf/gguf_experts.h — where a GGUF keeps a layer's experts, in any layout llama.cpp reads:
 *  - merged: one 3-D tensor per kind, blk.N.ffn_gate_exps.weight, ffn_up_exps, ffn_down_exps,
 *    ne = [cols, rows, n_expert], expert e the contiguous slice e of nbytes / n_expert;
 *  - fused gate and up: blk.N.ffn_gate_up_exps.weight, ne = [cols, 2 rows, n_expert], each
 *    expert's gate rows then its up rows (what llama.cpp's converter writes with
 *    --fuse-gate-up-exps, one matrix product for both), beside a merged down;
 *  - split: one 2-D tensor per expert, blk.N.ffn_gate.E.weight, ffn_up.E, ffn_down.E, ne = [cols,
 *    rows], what llama.cpp's converter wrote (Mixtral) before it merged them in 2024.
 * One place reads the names and checks a split layer's experts (present, one type and shape), so
 * that the loader, `inspect` and the analyzer's model check agree on what a layer's experts are.
 */
#ifndef MP_GGUF_GGUF_EXPERTS_H
#define MP_GGUF_GGUF_EXPERTS_H

#include <stdbool.h>
#include <stdint.h>

#include "base/error.h"
#include "gguf/gguf.h"

enum { MP_GGUF_EXPERT_GATE, MP_GGUF_EXPERT_UP, MP_GGUF_EXPERT_DOWN, MP_GGUF_EXPERT_KINDS };

/* "gate", "up", "down" */
const char *mp_gguf_expert_kind_name(int kind);

/* Layer, kind and expert of an expert tensor's name: "blk.N.ffn_K_exps.weight" (*expert = -1, the
 * merged tensor), "blk.N.ffn_gate_up_exps.weight" (kind gate, *expert = -1: the fused tensor,
 * which holds the up kind too) or "blk.N.ffn_K.E.weight" (*expert = E); false for any other name. */
bool mp_gguf_expert_name(mp_str name, int64_t *layer, int *kind, int64_t *expert);

/* One layer's experts of one kind. */
typedef struct mp_gguf_experts {
    bool present;                 /* false: neither layout has this layer's kind */
    bool split;                   /* one tensor per expert */
    bool fused;                   /* gate and up in one tensor (merged is that tensor) */
    int type;                     /* mp_type */
    int64_t ne0, ne1;             /* one expert's matrix: row length, rows */
    int64_t n_expert;
    uint64_t expert_bytes;        /* one expert's slice */
    const mp_gguf_tensor *merged; /* the merged (or fused) tensor (NULL when split) */
    uint64_t stride;              /* merged: bytes from one expert's slice to the next's in it */
    uint64_t offset;              /* merged: where this kind's slice starts in an expert's (the up half of a fused one) */
} mp_gguf_experts;

/* Layer `layer`'s experts of `kind` in g: the merged tensor if there is one (3-D, as found: its
 * shape is the caller's to check), else for gate and up the fused tensor (its row count must be
 * even: an odd one is an MP_ERR_FORMAT error), else expert 0's 2-D tensor and the ones after it,
 * n_expert of them (n_expert <= 0: as many as follow expert 0 without a gap). A split layer whose
 * experts are not all there, not 2-D or not of one type and shape is an MP_ERR_FORMAT error naming
 * the file and the tensor. */
mp_status mp_gguf_layer_experts(const mp_gguf *g, int64_t layer, int kind, int64_t n_expert, mp_gguf_experts *out,
                                mp_error *err);

/* Expert e's tensor of a split layer (NULL when absent). */
const mp_gguf_tensor *mp_gguf_split_expert(const mp_gguf *g, int64_t layer, int kind, int64_t e);

/* Expert e's x->expert_bytes in the file, whichever layout x (from mp_gguf_layer_experts, present)
 * found; NULL when a split layer lacks it. */
const uint8_t *mp_gguf_expert_data(const mp_gguf *g, int64_t layer, int kind, const mp_gguf_experts *x, int64_t e);

#endif
