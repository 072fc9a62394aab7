/* gpu/gpu_forward.c — the transformer forward pass on the device (the GPU twin of forward.c).
 *
 * Reads top to bottom like forward.c (enqueue_step): embedding, then per layer
 *   RMSNorm → Q/K/V (+ biases) → q/k norm, RoPE, K and V into the F16 cache → attention → wo → residual,
 *   RMSNorm → MoE block (one call: gpu_moe.c, where the hybrid CPU/GPU details live; then the shared
 *   expert, always on the GPU) → residual,
 * then the final norm and the output head for the rows whose logits are wanted. Residual adds
 * are fused into the next norm (pending_add).
 * Everything is enqueued on one stream; the host waits only where it must: in MoE layers with
 * CPU routes (the routing round trip) and for the logits. Projections of fewer than
 * MP_GPU_GEMM_MIN_ROWS rows are GEMVs over activations converted to the weights' partner format
 * (as the CPU does); larger ones go through cuBLAS (kernels/cuda/gemm.cu).
 *
 * A decode step (one row, no hooks, no prefill copies) is one CUDA graph, captured on first use
 * and replayed at every position: the host launches it, then serves its hybrid layers' CPU experts
 * in order through mapped host memory (graph_step). Other steps are enqueued launch by launch, the
 * host serving each hybrid layer between its begin and its end (mp_gpu_moe_layer).
 *
 * Time: at decode, ~13 kernels of 2-10 µs per layer, the experts the largest (bench/NOTES-gpu-exec.md
 * run 25); in hybrid layers, the CPU experts.
 */
#include "mp_config.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "kernels/cuda/cuda_ops.h"
#include "kernels/quant.h"
#include "gpu/gpu_impl.h"

/* d_out (n, out_stride) = t · d_in rows (n, t->n_in). The converted activations are kept in d_act
 * for the next call with the same input (Q, K and V share one conversion); callers that rewrite
 * d_in set g->act_src = NULL first. */
static mp_status proj_on(mp_gpu *g, cudaStream_t stream, const gpu_tensor *t, const float *d_in, int64_t n,
                         float *d_out, int64_t out_stride, mp_error *err)
{
    if (n >= g->gemm_min_rows) {
        KCHECK(mp_cuda_gemm(g->blas, t->type, t->d, t->row_bytes, t->n_out, t->n_in, d_in, n, d_out,
                            out_stride, MP_GPU_GEMM_TILE, g->d_gemm_scratch, g->gemm_scratch_bytes,
                            stream), "gemm");
        return MP_OK;
    }
    const int vdt = mp_cuda_vec_dot_type(t->type);
    const void *x = d_in;
    if (vdt != MP_TYPE_F32) {
        if (g->act_src != d_in || g->act_vdt != vdt) {
            KCHECK(mp_cuda_quantize_act(vdt, d_in, t->n_in, n, t->n_in, g->d_act, stream),
                   "activation conversion");
            g->act_src = d_in;
            g->act_vdt = vdt;
        }
        x = g->d_act;
    }
    KCHECK(mp_cuda_gemv(t->type, t->d, t->row_bytes, t->n_out, t->n_in, x,
                        mp_cuda_row_bytes(vdt, t->n_in), (int)n, d_out, out_stride, stream),
           "gemv");
    return MP_OK;
}

static mp_status proj(mp_gpu *g, const gpu_tensor *t, const float *d_in, int64_t n, float *d_out,
                      int64_t out_stride, mp_error *err)
{
    return proj_on(g, g->stream, t, d_in, n, d_out, out_stride, err);
}

/* Q, K and V of the rows in d_xb. A GEMV-sized step whose activations are already converted for
 * all three (the attention norm did it) runs K and V on the side streams beside Q: three
 * latency-bound launches then cost about one (in a decode graph they are parallel branches;
 * all-GPU tg128 +3.5 % on the H200, bench/NOTES-gpu-exec.md run 16). Otherwise one after the
 * other. */
static mp_status qkv_proj(mp_gpu *g, const gpu_layer *L, int64_t n, mp_error *err)
{
    const mp_hparams *hp = &g->s->m->hp;
    const int64_t Q = hp->n_head * hp->head_dim, KV = hp->n_head_kv * hp->head_dim;
    mp_status st;
    const bool fork = n < g->gemm_min_rows && g->act_src == g->d_xb &&
                      mp_cuda_vec_dot_type(L->wq.type) == g->act_vdt &&
                      mp_cuda_vec_dot_type(L->wk.type) == g->act_vdt &&
                      mp_cuda_vec_dot_type(L->wv.type) == g->act_vdt;
    if (!fork) {
        if ((st = proj(g, &L->wq, g->d_xb, n, g->d_q, Q, err)) || (st = proj(g, &L->wk, g->d_xb, n, g->d_k, KV, err)))
            return st;
        return proj(g, &L->wv, g->d_xb, n, g->d_v, KV, err);
    }
    CCHECK(cudaEventRecord(g->ev_fork, g->stream), "cudaEventRecord");
    for (int i = 0; i < 2; i++)
        CCHECK(cudaStreamWaitEvent(g->side[i], g->ev_fork, 0), "cudaStreamWaitEvent");
    if ((st = proj_on(g, g->side[0], &L->wk, g->d_xb, n, g->d_k, KV, err)) ||
        (st = proj_on(g, g->side[1], &L->wv, g->d_xb, n, g->d_v, KV, err)) ||
        (st = proj(g, &L->wq, g->d_xb, n, g->d_q, Q, err)))
        return st;
    for (int i = 0; i < 2; i++) {
        CCHECK(cudaEventRecord(g->ev_join[i], g->side[i]), "cudaEventRecord");
        CCHECK(cudaStreamWaitEvent(g->stream, g->ev_join[i], 0), "cudaStreamWaitEvent");
    }
    return MP_OK;
}

/* RMSNorm(d_x) into d_xb with weights w: the previous block's residual add, when pending, fused into
 * it (x += d_proj first); with vdt a quantized format (Q8_0, Q8_K), the normed rows also converted
 * to it into d_act, for the projections or experts that read them. */
static mp_status norm_in(mp_gpu *g, const float *w, int64_t n, int vdt, mp_error *err)
{
    const mp_hparams *hp = &g->s->m->hp;
    const int64_t D = hp->n_embd;
    const float *add = g->pending_add ? g->d_proj : NULL;
    g->pending_add = false;
    g->act_src = NULL;
    if (vdt == MP_TYPE_Q8_0 || vdt == MP_TYPE_Q8_K) {
        KCHECK(mp_cuda_rmsnorm_quant(g->d_xb, g->d_x, add, w, n, D, hp->rms_eps, vdt, g->d_act, g->stream),
               "residual add + rmsnorm + quantize");
        g->act_src = g->d_xb;
        g->act_vdt = vdt;
    } else if (add) {
        KCHECK(mp_cuda_add_rmsnorm(g->d_xb, g->d_x, add, w, n, D, hp->rms_eps, g->stream), "residual add + rmsnorm");
    } else {
        KCHECK(mp_cuda_rmsnorm(g->d_xb, g->d_x, w, n, D, hp->rms_eps, g->stream), "rmsnorm");
    }
    return MP_OK;
}

/* The attention block of layer il on d_xb (normed) → d_proj: Q/K/V, q/k norm and RoPE, K and V into
 * the cache, attention, wo. */
static mp_status attention_block(mp_gpu *g, int64_t il, int64_t n, int64_t pos0, mp_error *err)
{
    const mp_hparams *hp = &g->s->m->hp;
    const mp_arch_traits *tr = mp_arch_get(hp->arch);
    const gpu_layer *L = &g->layers[il];
    const int64_t hd = hp->head_dim, Q = hp->n_head * hd, KV = hp->n_head_kv * hd;
    mp_status st;
    if ((st = qkv_proj(g, L, n, err)))
        return st;
    if (L->bq) {
        KCHECK(mp_cuda_add_bias(g->d_q, L->bq, n, Q, g->stream), "q bias");
        KCHECK(mp_cuda_add_bias(g->d_k, L->bk, n, KV, g->stream), "k bias");
        KCHECK(mp_cuda_add_bias(g->d_v, L->bv, n, KV, g->stream), "v bias");
    }
    const int style = tr->rope == MP_ROPE_NEOX ? MP_CUDA_ROPE_NEOX : MP_CUDA_ROPE_NORM;
    /* positions come from d_pos, and in a graph the keys are split for the whole context: the
     * launches are then the same at every position */
    if (tr->qk_norm != MP_QK_NORM_FULL) {
        /* per-head q/k norm (or none), RoPE by the step's angles and the K/V cache store in one launch */
        KCHECK(mp_cuda_qkv_finish(g->d_q, g->d_k, g->d_v, L->q_norm, L->k_norm, tr->qk_norm == MP_QK_NORM_PER_HEAD,
                                  n, hp->n_head, hp->n_head_kv, hd, hp->rot_dim, g->d_pos, g->d_rope, style,
                                  hp->rms_eps, L->k_cache, L->v_cache, g->stream),
               "q/k norm + rope + kv store");
    } else {
        KCHECK(mp_cuda_rmsnorm(g->d_q, g->d_q, L->q_norm, n, Q, hp->rms_eps, g->stream), "q norm");
        KCHECK(mp_cuda_rmsnorm(g->d_k, g->d_k, L->k_norm, n, KV, hp->rms_eps, g->stream), "k norm");
        KCHECK(mp_cuda_rope(g->d_q, n, Q, hp->n_head, hd, hp->rot_dim, g->d_pos, g->d_rope_theta,
                            g->s->rope_mscale, style, g->stream), "rope");
        KCHECK(mp_cuda_rope(g->d_k, n, KV, hp->n_head_kv, hd, hp->rot_dim, g->d_pos, g->d_rope_theta,
                            g->s->rope_mscale, style, g->stream), "rope");
        KCHECK(mp_cuda_kv_store2_at(L->k_cache, L->v_cache, g->d_k, g->d_v, n, KV, g->d_pos, g->stream),
               "kv store");
    }
    /* a GEMV-sized step takes wo's activations converted by the attention call (in its merge,
     * where whole heads make whole blocks: one launch fewer a layer) */
    const int vdt_o = n < g->gemm_min_rows ? mp_cuda_vec_dot_type(L->wo.type) : MP_TYPE_F32;
    KCHECK(mp_cuda_attention_at(g->d_q, L->k_cache, L->v_cache, g->d_att, n, g->d_pos,
                                g->capturing ? g->s->n_ctx : pos0 + n, hp->n_head, hp->n_head_kv, hd,
                                g->d_att_scratch, g->att_scratch_bytes, vdt_o,
                                vdt_o != MP_TYPE_F32 ? g->d_act : NULL, mp_layer_window(hp, il), L->sinks, g->stream),
           "attention");
    g->act_src = vdt_o != MP_TYPE_F32 ? g->d_att : NULL;
    g->act_vdt = vdt_o;
    if ((st = proj(g, &L->wo, g->d_att, n, g->d_proj, hp->n_embd, err)))
        return st;
    if (L->bo)
        KCHECK(mp_cuda_add_bias(g->d_proj, L->bo, n, hp->n_embd, g->stream), "attention output bias");
    return MP_OK;
}

/* The shared expert of layer il on the normed rows d_xb, added into d_proj (the routed experts' sum):
 * d_proj += sigmoid(d_xb · gate_inp_shexp) * down_shexp(silu(gate_shexp d_xb) * up_shexp d_xb). Gate
 * and up share one conversion of d_xb (proj's cache); the output goes through d_tmp. */
static mp_status shared_expert(mp_gpu *g, int64_t il, int64_t n, mp_error *err)
{
    const mp_hparams *hp = &g->s->m->hp;
    const gpu_layer *L = &g->layers[il];
    const int64_t D = hp->n_embd, F = hp->n_ff_shexp;
    float *d_g = g->d_shexp, *d_u = d_g + g->s->n_batch * F, *d_logit = d_u + g->s->n_batch * F;
    mp_status st;
    if ((st = proj(g, &L->gate_inp_shexp, g->d_xb, n, d_logit, 1, err)) ||
        (st = proj(g, &L->gate_shexp, g->d_xb, n, d_g, F, err)) || (st = proj(g, &L->up_shexp, g->d_xb, n, d_u, F, err)))
        return st;
    KCHECK(mp_cuda_swiglu(d_g, d_g, d_u, n * F, g->stream), "shared expert swiglu");
    g->act_src = NULL;
    if ((st = proj(g, &L->down_shexp, d_g, n, g->d_tmp, D, err)))
        return st;
    KCHECK(mp_cuda_add_gated(g->d_proj, g->d_tmp, d_logit, n, D, g->stream), "shared expert add");
    return MP_OK;
}

/* Enqueue the head for rows [r0, r0 + rows): norm, projection, logits to h_logits. */
static mp_status head_enqueue(mp_gpu *g, int64_t r0, int64_t rows, mp_error *err)
{
    const mp_hparams *hp = &g->s->m->hp;
    const int64_t D = hp->n_embd, V = hp->n_vocab;
    mp_status st;
    KCHECK(mp_cuda_rmsnorm(g->d_xb, g->d_x + r0 * D, g->output_norm, rows, D, hp->rms_eps, g->stream),
           "output norm");
    g->act_src = NULL;
    if ((st = proj(g, &g->output, g->d_xb, rows, g->d_logits, V, err)))
        return st;
    CCHECK(cudaMemcpyAsync(g->h_logits, g->d_logits, (size_t)(rows * V) * sizeof(float),
                           cudaMemcpyDeviceToHost, g->stream), "logits copy");
    return MP_OK;
}

/* The head for more rows than one enqueue holds, after the step: MP_GPU_HEAD_ROWS at a time. */
static mp_status head(mp_gpu *g, int64_t n, bool all_logits, float *logits, mp_error *err)
{
    const int64_t V = g->s->m->hp.n_vocab;
    const int64_t first = all_logits ? 0 : n - 1;
    mp_status st;
    for (int64_t r0 = first; r0 < n; r0 += MP_GPU_HEAD_ROWS) {
        const int64_t rows = n - r0 < MP_GPU_HEAD_ROWS ? n - r0 : MP_GPU_HEAD_ROWS;
        if ((st = head_enqueue(g, r0, rows, err)))
            return st;
        CCHECK(cudaStreamSynchronize(g->stream), "forward pass");
        memcpy(logits + (r0 - first) * V, g->h_logits, (size_t)(rows * V) * sizeof(float));
    }
    return MP_OK;
}

/* One step of n rows at positions pos0.., from the tokens and positions in h_io: embedding, the
 * layers, and the head for the last head_rows rows (0: none; at most MP_GPU_HEAD_ROWS). Enqueued
 * (or captured into a graph: g->capturing); a hybrid layer's host work runs inside
 * mp_gpu_moe_layer unless the step hands off through mapped memory (g->handoff: a graph step, whose
 * host serves its hybrid layers after the launch). */
static mp_status enqueue_step(mp_gpu *g, int64_t n, int64_t pos0, int64_t head_rows, mp_error *err)
{
    const mp_session *s = g->s;
    const mp_hparams *hp = &s->m->hp;
    const mp_hooks *hk = s->hooks;
    mp_status st;

    /* embedding: the tokens (and positions) up, then each token's row dequantized */
    if (g->step_stamps)
        KCHECK(mp_cuda_stamp(&g->h_step[0], g->stream), "step stamp");
    CCHECK(cudaMemcpyAsync(g->d_tok, g->h_io, (size_t)n * 4, cudaMemcpyHostToDevice, g->stream), "token upload");
    CCHECK(cudaMemcpyAsync(g->d_pos, g->h_io + s->n_batch, (size_t)n * 4, cudaMemcpyHostToDevice, g->stream),
           "token upload");
    CCHECK(mp_gpu_record(g, g->ev_io), "cudaEventRecord");
    if (s->route_src && n == 1) /* every layer's replayed routes, packed by mp_gpu_fetch_routes */
        CCHECK(cudaMemcpyAsync(g->d_rids, g->h_route1, (size_t)(2 * hp->n_layer * hp->n_expert_used) * 4,
                               cudaMemcpyHostToDevice, g->stream), "route upload");
    KCHECK(mp_cuda_get_rows(g->tok_embd.type, g->tok_embd.d, g->tok_embd.row_bytes, hp->n_vocab, hp->n_embd,
                            g->d_tok, n, g->d_x, g->d_bad, g->stream), "embedding");
    /* the rows' RoPE angles, once for every layer's Q/K finish */
    if (mp_arch_get(hp->arch)->qk_norm != MP_QK_NORM_FULL)
        KCHECK(mp_cuda_rope_table(g->d_rope, g->d_pos, n, hp->rot_dim, g->d_rope_theta, s->rope_mscale, g->stream),
               "rope angles");
    g->pending_add = false;

    for (int64_t il = 0; il < hp->n_layer; il++) {
        const gpu_layer *L = &g->layers[il];
        if (hk && hk->layer_begin)
            hk->layer_begin(hk->user, il);
        /* attention block; GEMV-sized steps convert the normed rows for Q, K and V in the norm */
        const int vdt_q = n < g->gemm_min_rows ? mp_cuda_vec_dot_type(L->wq.type) : MP_TYPE_F32;
        if ((st = norm_in(g, L->attn_norm, n, vdt_q, err)) || (st = attention_block(g, il, n, pos0, err)))
            return st;
        g->pending_add = true;
        /* MoE block; the norm converts its rows for the experts when they take quantized ones */
        const int vdt_e = mp_cuda_vec_dot_type(s->m->layers[il].gate_exps.type);
        if ((st = norm_in(g, L->ffn_norm, n, vdt_e, err)))
            return st;
        g->moe_xq = g->act_src ? g->d_act : NULL;
        g->act_src = NULL;
        st = mp_gpu_moe_layer(g, il, n, err); /* d_xb → d_proj */
        g->moe_xq = NULL;
        if (st)
            return st; /* the cache rows of this chunk are not counted: n_past is unchanged */
        if (L->gate_shexp.d && (st = shared_expert(g, il, n, err)))
            return st;
        g->pending_add = true;
        if (hk && hk->layer_end)
            hk->layer_end(hk->user, il);
    }

    if (g->pending_add) { /* the last layer's residual: the head reads x */
        KCHECK(mp_cuda_add(g->d_x, g->d_proj, n * hp->n_embd, g->stream), "residual add");
        g->pending_add = false;
    }
    if (head_rows > 0 && (st = head_enqueue(g, n - head_rows, head_rows, err)))
        return st;
    if (g->step_stamps)
        KCHECK(mp_cuda_stamp(&g->h_step[1], g->stream), "step stamp");
    return MP_OK;
}

/* ---- decode steps as one CUDA graph ---- */

/* Capture the 1-row decode step as g->step_graph (a capture runs nothing: the caller launches it).
 * On a capture error the graphs are turned off for the session (graphs_why says why) and the
 * caller enqueues the step instead. */
static mp_status capture_step(mp_gpu *g, int64_t pos0, mp_error *err)
{
    cudaGraph_t graph = NULL;
    mp_status st = MP_OK;
    cudaError_t e = cudaStreamBeginCapture(g->stream, cudaStreamCaptureModeThreadLocal);
    if (e != cudaSuccess) {
        st = mp_gpu_cuda_fail(err, "graph capture", e);
    } else {
        g->capturing = true;
        st = enqueue_step(g, 1, pos0, 1, err);
        g->capturing = false;
        e = cudaStreamEndCapture(g->stream, &graph);
        if (!st && e != cudaSuccess)
            st = mp_gpu_cuda_fail(err, "graph capture", e);
        if (!st && (e = cudaGraphInstantiate(&g->step_graph, graph, 0)) != cudaSuccess)
            st = mp_gpu_cuda_fail(err, "graph instantiation", e);
        if (graph)
            cudaGraphDestroy(graph);
    }
    if (st) {
        cudaGetLastError();
        g->step_graph = NULL;
        g->graphs_off = true;
        g->act_src = NULL; /* nothing enqueued during the capture ran */
        snprintf(g->graphs_why, sizeof g->graphs_why, "off (%.140s)", err->msg);
        return st;
    }
    g->stats.graphs_captured++;
    return MP_OK;
}

/* cudaGraphLaunch, its host time counted in the statistics (graph_launch_ns); the step's launch
 * also notes when it began and returned (step stamps). */
static cudaError_t launch_graph(mp_gpu *g, cudaGraphExec_t exec)
{
    const int64_t t0 = mp_gpu_now_ns();
    const cudaError_t e = cudaGraphLaunch(exec, g->stream);
    const int64_t t1 = mp_gpu_now_ns();
    g->stats.graph_launch_ns += t1 - t0;
    g->launch_ns[0] = t0, g->launch_ns[1] = t1;
    return e;
}

/* A decode step as one graph: launched once; each hybrid layer hands its rows and routes to the
 * host and takes the CPU's partial back through page-locked host memory the kernels read and
 * write (g->handoff), while the host serves the hybrid layers in order. Against graph segments
 * between hybrid layers with copies and events (H200, layers:48): the GPU's time per token
 * 3.23-3.26 → 2.70-2.77 ms, the round trip's overhead 10.0-11.6 → 2.4-3.3 µs per hybrid layer
 * (bench/NOTES-gpu-exec.md run 23). *ran is false when the capture failed (graphs are then off
 * for the session and nothing ran): the caller enqueues the step. A failure on the host releases
 * every waiting layer before it returns, so that the graph drains instead of spinning until its
 * timeout. */
static mp_status graph_step(mp_gpu *g, int64_t pos0, bool *ran, mp_error *err)
{
    const int64_t L = g->s->m->hp.n_layer;
    mp_status st = MP_OK;
    *ran = false;
    g->handoff = true;
    if (!g->step_graph && capture_step(g, pos0, err) != MP_OK) {
        g->handoff = false;
        return MP_OK;
    }
    /* the previous step drained (mp_gpu_exec_forward synchronized): no kernel reads the flags now */
    memset(g->h_flags, 0, (size_t)(2 * L) * sizeof *g->h_flags);
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
    const cudaError_t e = launch_graph(g, g->step_graph);
    if (e != cudaSuccess) {
        g->handoff = false;
        return mp_gpu_cuda_fail(err, "graph launch", e);
    }
    *ran = true;
    /* the tier's copies decided by the step before, while this one runs */
    if ((st = mp_gpu_tier_copies(g, err))) { /* release every waiting layer, then let the graph drain */
        g->handoff = false;
        for (int64_t j = 0; j < L; j++)
            __atomic_store_n(&g->h_flags[L + j], 1, __ATOMIC_RELEASE);
        cudaStreamSynchronize(g->stream);
        cudaGetLastError();
        return st;
    }
    if (g->n_hybrid_layers)
        g->stats.one_graph_steps++;
    for (int64_t il = 0; il < L && !st; il++)
        if (mp_gpu_layer_hybrid(g, il))
            st = mp_gpu_moe_host(g, il, 1, err);
    g->handoff = false;
    if (st) {
        for (int64_t j = 0; j < L; j++)
            __atomic_store_n(&g->h_flags[L + j], 1, __ATOMIC_RELEASE);
        cudaStreamSynchronize(g->stream);
        cudaGetLastError();
    }
    return st;
}

/* ---- after the step ---- */

/* Hooks of the step, after the stream has drained: routing and timing per MoE layer. */
static void report_hooks(mp_gpu *g, int64_t n)
{
    const mp_session *s = g->s;
    const mp_hparams *hp = &s->m->hp;
    const int64_t K = hp->n_expert_used, B = s->n_batch;
    for (int64_t il = 0; il < hp->n_layer; il++) {
        if (s->hooks->routing)
            s->hooks->routing(s->hooks->user, il, n, K, g->h_ids + il * B * K, g->h_w + il * B * K);
        if (s->hooks->moe_timing) {
            mp_moe_timing *t = &g->timing[il];
            float ms = 0;
            if (t->hits && cudaEventElapsedTime(&ms, g->ev_moe[2 * il], g->ev_moe[2 * il + 1]) == cudaSuccess)
                t->gpu_expert_ns = (int64_t)((double)ms * 1e6);
            cudaGetLastError();
            s->hooks->moe_timing(s->hooks->user, il, t);
        }
    }
}

/* After the stream drained: the round-trip gaps of this step's hybrid layers (mp_gpu_exec_set_measure):
 * from the GPU's timer stamps when the step handed off through mapped memory (publish to the
 * host's flag seen; the overhead counts from when the GPU was ready for the partial), else from
 * the events after the rows' copy and before the partial's. */
static void collect_round_trips(mp_gpu *g, bool handoff)
{
    for (int64_t il = 0; il < g->s->m->hp.n_layer; il++) {
        if (!g->rt_pending[il])
            continue;
        g->rt_pending[il] = false;
        int64_t gap, overhead;
        if (handoff) {
            /* the GPU waited for the host from the later of its wait kernel's first poll and the
             * publish plus the CPU's time; what it waited beyond that is the round trip's own. A
             * layer whose resident experts outlast the CPU polls late and sees the flag at once. */
            const uint64_t pub = g->h_stamps[3 * il], polled = g->h_stamps[3 * il + 1],
                           seen = g->h_stamps[3 * il + 2];
            if (!pub || seen < pub || seen < polled)
                continue;
            gap = (int64_t)(seen - pub);
            const int64_t gpu_side = polled > pub ? (int64_t)(polled - pub) : 0;
            const int64_t ready = gpu_side > g->rt_cpu_ns[il] ? gpu_side : g->rt_cpu_ns[il];
            overhead = gap - ready;
            g->stats.rt_gpu_ns += gpu_side;
            g->stats.rt_gpu_later += gpu_side > g->rt_cpu_ns[il];
            if (g->rt_warm[il]) {
                g->stats.rt_warm++;
                g->stats.rt_warm_gpu_ns += gpu_side;
            }
        } else {
            float ms = 0;
            if (cudaEventElapsedTime(&ms, g->ev_rt[2 * il], g->ev_rt[2 * il + 1]) != cudaSuccess) {
                cudaGetLastError();
                continue;
            }
            gap = (int64_t)((double)ms * 1e6);
            overhead = gap - g->rt_cpu_ns[il];
        }
        g->stats.rt_measured++;
        g->stats.rt_gap_ns += gap;
        g->stats.rt_overhead_ns += overhead;
    }
}

/* After a stamped step drained at sync_ns (host clock): where its wall time went. Only graph steps
 * count (an enqueued step's launches are spread over its enqueueing). */
static void count_stamps(mp_gpu *g, int64_t pos0, int64_t sync_ns)
{
    const int64_t t0 = (int64_t)g->h_step[0] - g->stamp_off_ns, t1 = (int64_t)g->h_step[1] - g->stamp_off_ns;
    if (g->launch_ns[0] && g->h_step[0] && g->h_step[1] && t1 >= t0) {
        g->stats.stamped_steps++;
        if (g->last_sync_ns && g->last_pos == pos0) { /* the session's next step */
            g->stats.step_host_gaps++;
            g->stats.step_host_gap_ns += g->launch_ns[0] - g->last_sync_ns;
        }
        g->stats.step_start_lag_ns += t0 - g->launch_ns[1];
        g->stats.step_gpu_ns += t1 - t0;
        g->stats.step_drain_lag_ns += sync_ns - t1;
    }
    g->last_sync_ns = g->launch_ns[0] ? sync_ns : 0;
    g->last_pos = pos0 + 1;
}

mp_status mp_gpu_exec_forward(mp_session *s, const int32_t *tokens, int64_t n, bool all_logits,
                         float *logits, mp_error *err)
{
    mp_gpu *g = s->gpu;
    const mp_model *m = s->m;
    const mp_hparams *hp = &m->hp;
    const int64_t pos0 = s->n_past, B = s->n_batch, L = hp->n_layer;
    mp_status st;
    if (n < 1 || n > B)
        return mp_fail(err, MP_ERR_INTERNAL, "GPU forward: %" PRId64 " rows, batch holds %" PRId64, n, B);

    /* the previous step's upload must have left h_io before it is rewritten */
    CCHECK(cudaEventSynchronize(g->ev_io), "forward pass");
    g->launch_ns[0] = 0;
    if (g->step_stamps)
        g->h_step[0] = g->h_step[1] = 0;
    for (int64_t i = 0; i < n; i++) {
        g->h_io[i] = tokens[i];
        g->h_io[B + i] = (int32_t)(pos0 + i);
    }
    /* a route source is asked for every layer's routes now, before any work is enqueued: the
     * layers upload them from pinned memory, which a graph replays as well */
    if (s->route_src && (st = mp_gpu_fetch_routes(g, n, err)))
        return st;
    g->stats.steps++;
    /* statistics of the all-resident layers (the hybrid ones count themselves) */
    const int64_t n_full = L - g->n_hybrid_layers;
    g->stats.moe_layers += n_full;
    g->stats.routes_gpu += n_full * n * hp->n_expert_used;

    /* a decode step replays its graph unless something host-side runs inside a layer (hooks) or a
     * prefill copy could be chosen; a capture that fails turns graphs off for the session and the
     * step is enqueued as usual (nothing of the failed capture ran) */
    const int64_t head_rows = logits ? (all_logits ? n : 1) : 0;
    const bool graphs = n == 1 && head_rows == 1 && !g->graphs_off && !s->hooks &&
                        !(g->d_stage && mp_gpu_copy_enabled(g, 1));
    bool handoff = false;
    if (graphs && (st = graph_step(g, pos0, &handoff, err)))
        return st;
    if (!handoff && (st = mp_gpu_tier_copies(g, err)))
        return st;
    if (!handoff && (st = enqueue_step(g, n, pos0, head_rows <= MP_GPU_HEAD_ROWS ? head_rows : 0, err)))
        return st; /* the cache rows of this chunk are not counted: n_past is unchanged */
    CCHECK(cudaStreamSynchronize(g->stream), "forward pass");
    /* the step has drained: the adaptive tier's moves of this step, ahead of the next */
    if ((st = mp_gpu_tier_apply(g, err)))
        return st;
    if (g->step_stamps)
        count_stamps(g, pos0, mp_gpu_now_ns());
    if (logits) {
        if (head_rows <= MP_GPU_HEAD_ROWS)
            memcpy(logits, g->h_logits, (size_t)(head_rows * hp->n_vocab) * sizeof(float));
        else if ((st = head(g, n, all_logits, logits, err)))
            return st;
    }
    s->n_past += n;
    if (g->measure)
        collect_round_trips(g, handoff);
    if (s->hooks)
        report_hooks(g, n);
    return MP_OK;
}

void mp_gpu_drop_graphs(mp_gpu *g)
{
    if (g->step_graph)
        cudaGraphExecDestroy(g->step_graph);
    g->step_graph = NULL;
}
