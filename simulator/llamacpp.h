/* simulator/llamacpp.h — what stock llama.cpp holds on one GPU for a model, and the command line
 * (`llama-server -m MODEL -ngl 99 -c CTX` with `-ot` or `--n-cpu-moe`) that keeps whole layers'
 * expert tensors on the CPU.
 *
 * llama.cpp's --override-tensor (-ot) places whole tensors, and a GGUF holds all experts of one
 * layer in one tensor per projection (blk.N.ffn_{gate,up,down,gate_up}_exps): a command can only
 * move whole layers' experts. A per-expert placement needs an STRP profile (schemas/strp.md).
 *
 * The sizes follow llama.cpp's own (the sources are cited in docs/simulator.md):
 *   - n_ctx is padded up to a multiple of 256 (src/llama-context.cpp);
 *   - KV cache = n_ctx x sum over blocks of (n_embd_k_gqa + n_embd_v_gqa) x 2 bytes (F16, the
 *     default --cache-type-k/-v), n_embd_k_gqa = key_length x head_count_kv of the block;
 *   - weights: every tensor but the expert tensors and token_embd (the input layer stays on the
 *     CPU); a model without output.weight gets a GPU copy of token_embd as its output;
 *   - compute buffers: an estimate of this module's own (MP_LLAMACPP_UBATCH rows), see
 *     mp_llamacpp_gpu.compute_bytes, or the size llama.cpp printed, when the user gives it. */
#ifndef MP_SIMULATOR_LLAMACPP_H
#define MP_SIMULATOR_LLAMACPP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/error.h"
#include "gguf/gguf.h"

#define MP_LLAMACPP_CTX_PAD 256 /* llama.cpp pads n_ctx to this (src/llama-context.cpp) */
#define MP_LLAMACPP_UBATCH 512  /* llama.cpp's default --ubatch-size */
#define MP_LLAMACPP_KV_ELEM_BYTES 2 /* F16, the default --cache-type-k and --cache-type-v */

/* llama.cpp's expert tensor family, as common/common.h's LLM_FFN_EXPS_REGEX spells it after the
 * block: ffn_gate_exps, ffn_up_exps, ffn_down_exps, ffn_gate_up_exps and the chunked-expert
 * _chexps variants (gguf-py/gguf/constants.py). */
#define MP_LLAMACPP_EXPS_REGEX "\\.ffn_(up|down|gate|gate_up)_(ch|)exps"

typedef struct mp_llamacpp_gpu {
    int64_t n_ctx;              /* as llama.cpp pads it */
    uint64_t weights_bytes;     /* non-expert tensors on the GPU with -ngl 99 */
    uint64_t kv_bytes;
    /* An upper bound of the CUDA compute buffer: 4 bytes (F32) x MP_LLAMACPP_UBATCH rows x the
     * per-row intermediates all counted live at once: logits (n_vocab), attention scores without
     * flash attention (n_head x n_ctx), the routed experts' gate and up outputs
     * (2 x n_expert_used x n_ff_exp) and their outputs (n_expert_used x n_embd), and eight
     * hidden-size vectors (residual, norms, q, k, v, attention output). llama.cpp prints the real
     * size at load ("CUDA0 compute buffer size"). */
    uint64_t compute_bytes;
    bool compute_given;         /* compute_bytes is the user's (mp_llamacpp_gpu_set_compute_bytes),
                                 * not the estimate */
    uint64_t fixed_bytes;       /* weights + KV cache + compute buffers */
    uint32_t n_blocks;          /* block_count */
    uint64_t *expert_bytes;     /* (n_blocks) bytes of blk.N's expert tensors (0: a dense block) */
} mp_llamacpp_gpu;

/* From an open GGUF (its metadata and tensor list) for a context of n_ctx positions (before
 * padding). Fails on a GGUF without general.architecture, block_count, embedding_length or
 * head_count, naming the file and the key. Free with mp_llamacpp_gpu_free. */
mp_status mp_llamacpp_gpu_from_gguf(const mp_gguf *g, int64_t n_ctx, mp_llamacpp_gpu *out, mp_error *err);
void mp_llamacpp_gpu_free(mp_llamacpp_gpu *x);
/* llama.cpp's compute buffers as llama-server reported them for this model and context ("CUDA0
 * compute buffer size" at load; simulate --llamacpp-compute-buffer SIZE) in place of the estimate,
 * which bounds them from above and can be far above: fixed_bytes follows. */
void mp_llamacpp_gpu_set_compute_bytes(mp_llamacpp_gpu *x, uint64_t compute_bytes);

/* Whether a tensor name is one of llama.cpp's expert tensors (blk.N.ffn_*_exps / _chexps, any
 * suffix such as .weight or .bias); *block gets N. */
bool mp_llamacpp_expert_tensor(const char *name, size_t len, uint32_t *block);

/* The command for model_path at n_ctx positions with the experts of cpu_block[b] (n_blocks
 * flags) on the CPU: `--n-cpu-moe N` when they are exactly the expert blocks below N, else one
 * -ot regex naming them (none when no block is on the CPU). Writes at most cap bytes; returns
 * false if the command did not fit. The model path is single-quoted for a POSIX shell. */
bool mp_llamacpp_command(const char *model_path, int64_t n_ctx, const mp_llamacpp_gpu *x, const bool *cpu_block,
                         char *buf, size_t cap);

#endif
