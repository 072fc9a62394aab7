/* runtime/moe.h — the MoE block: router -> softmax -> top-k -> (renormalize) -> experts -> combine.
 *
 * One call per layer and step from the forward pass. The CPU implementation groups rows by expert
 * so that each expert's weights are streamed once per step, runs experts in parallel over the
 * pool, and accumulates every row's weighted expert outputs in float32 (one rounding at the end,
 * which is the contract the hybrid CPU/GPU path must keep).
 */
#ifndef MP_RUNTIME_MOE_H
#define MP_RUNTIME_MOE_H

#include <stdint.h>

#include "runtime/error.h"
#include "runtime/hooks.h"
#include "runtime/model.h"
#include "runtime/threadpool.h"

typedef struct mp_moe_scratch mp_moe_scratch;

mp_moe_scratch *mp_moe_scratch_new(const mp_hparams *hp, int64_t max_rows, int n_threads);
void mp_moe_scratch_free(mp_moe_scratch *s);

/* out (n_rows × n_embd) = MoE(x) for layer il, x already normalized (ffn_norm applied).
 * Routing is reported through hooks (may be NULL) and may be replaced by route_src. */
mp_status mp_moe_forward_cpu(const mp_model *m, int64_t il, const float *x, float *out,
                             int64_t n_rows, mp_pool *pool, mp_moe_scratch *scratch,
                             const mp_hooks *hooks, const mp_route_source *route_src,
                             mp_error *err);

#endif
