/* gpu/gpu_impl.h — the inside of an mp_gpu, shared by gpu_exec.c (device setup, weight upload,
 * expert pool, budget), gpu_host.c (host experts) and gpu_forward.c / gpu_moe.c (the forward pass).
 * Built only with CUDA.
 *
 * Invariants: every device buffer is allocated once by mp_gpu_exec_new and counted in mem; a forward
 * never allocates. d_slots_* of a layer hold n_expert device pointers: the pool slot of a resident
 * expert, NULL for the others (the MoE kernel skips NULL routes). Host buffers h_* are pinned.
 */
#ifndef MP_GPU_GPU_IMPL_H
#define MP_GPU_GPU_IMPL_H

#include <cuda_runtime_api.h>
#include <time.h>

#include "runtime/decide.h"
#include "runtime/gpu.h"
#include "runtime/state.h"

/* scratch shapes: MP_GPU_* in runtime/placement.h */
/* MP_GPU_ALIGN: runtime/placement.h, beside the scratch plan the budget counts */
static inline size_t mp_gpu_align(size_t b)
{
    return (b + MP_GPU_ALIGN - 1) & ~(size_t)(MP_GPU_ALIGN - 1);
}

/* An expert of layer L wherever the executor holds one whole (the pool's slot sizes, the adaptive
 * tier's slots, the staging buffers, the page-locked host copy): its gate, up and down slices in
 * that order, each starting MP_GPU_ALIGN-aligned. Fills bytes[t] (slice t's bytes) and off[t] (its
 * offset) where not NULL; returns the whole slot's bytes. */
static inline size_t mp_gpu_expert_layout(const mp_layer *L, size_t bytes[3], size_t off[3])
{
    const mp_tensor *ts[3] = {&L->gate_exps, &L->up_exps, &L->down_exps};
    size_t at = 0;
    for (int t = 0; t < 3; t++) {
        const size_t n = ts[t]->row_bytes * (size_t)ts[t]->ne[1];
        if (bytes)
            bytes[t] = n;
        if (off)
            off[t] = at;
        at += mp_gpu_align(n);
    }
    return at;
}
#define MP_GPU_MAX_TOP_K MP_DECIDE_MAX_K /* experts per token the executor supports */

typedef struct gpu_tier gpu_tier; /* gpu_tier.c */

typedef struct gpu_tensor {
    int type;
    const void *d;       /* device copy, rows row_bytes apart */
    size_t row_bytes;
    int64_t n_in, n_out; /* ne[0], ne[1] */
} gpu_tensor;

typedef struct gpu_layer {
    gpu_tensor wq, wk, wv, wo, gate_inp;
    const float *attn_norm, *ffn_norm; /* (n_embd) */
    const float *q_norm, *k_norm;      /* per head (head_dim) or full; NULL when absent */
    const float *bq, *bk, *bv;         /* Q/K/V biases; NULL when absent */
    /* gpt-oss (NULL when absent): the attention output's bias, the sinks (n_head), the router's
     * bias (n_expert), the experts' biases: gate, up (n_expert, n_ff_exp), down (n_expert, n_embd) */
    const float *bo, *sinks, *gate_inp_b, *gate_exps_b, *up_exps_b, *down_exps_b;
    /* the shared expert (d NULL when absent): gate vector (one output row), gate, up, down */
    gpu_tensor gate_inp_shexp, gate_shexp, up_shexp, down_shexp;
    uint16_t *k_cache, *v_cache;       /* (n_ctx, n_head_kv * head_dim) f16 */
    const void **d_slots[3];           /* gate, up, down: (n_expert) device pointers, device array */
    int64_t n_resident;
    const uint64_t *resident;          /* placement bits of this layer (host) */
} gpu_layer;

struct mp_gpu {
    mp_gpu_scratch sp;         /* the scratch buffers (mp_gpu_scratch_plan: the budget counts the same) */
    mp_session *s;
    cudaStream_t stream;       /* everything of the forward pass */
    cudaStream_t copy_stream;  /* expert weight copies (prefill) */
    /* K and V projections of a GEMV-sized step run beside Q (forked from and joined back into
     * `stream`, in graphs as parallel branches): three latency-bound launches cost about one */
    cudaStream_t side[2];
    cudaEvent_t ev_fork, ev_join[2];
    void *blas;

    char *d_weights;           /* arena: dense weights */
    char *d_kv;                /* arena: KV cache */
    char *d_scratch;           /* arena: activations and kernel scratch */
    char *d_stage;             /* arena: 2 staging buffers of stage_experts experts */
    char *d_pool;              /* arena: resident experts */
    char *d_tier;              /* arena: the adaptive tier's slots (gpu_tier.c), or NULL */
    /* every layer's three slot tables, (n_layer, 3, n_expert) device pointers in one array (the
     * tier uploads the ones that changed in one copy), and their pinned host copy */
    const void **d_tables;
    const void **h_tables;
    mp_gpu_memory mem;

    gpu_tensor tok_embd, output;
    const float *output_norm;
    gpu_layer *layers;         /* (n_layer) */

    /* activations (n_batch rows unless said) */
    float *d_x, *d_xb, *d_proj, *d_tmp; /* (n_batch, n_embd) */
    float *d_q, *d_att;                 /* (n_batch, n_head * head_dim) */
    float *d_k, *d_v;                   /* (n_batch, n_head_kv * head_dim) */
    float *d_router;                    /* (n_batch, n_expert) */
    float *d_shexp;                     /* the shared expert's gate and up rows (n_batch, n_ff_shexp)
                                         * each, then its gate logits (n_batch); NULL without one */
    int32_t *d_ids;                     /* (n_batch, top_k) */
    float *d_w;                         /* (n_batch, top_k) */
    int32_t *d_tok, *d_pos;             /* (n_batch) */
    float *d_rope;                      /* (n_batch, head_dim / 2) (cos, sin): the step's RoPE angles */
    double *d_rope_theta;               /* (rot_dim / 2): mp_rope_freqs's angle per position (after d_rope) */
    int *d_bad;                         /* token id out of range flag */
    unsigned *d_count;                  /* the fused decode router's blocks-done counter (0 between
                                         * launches; mp_cuda_router_gemv) */
    float *d_logits;                    /* (MP_GPU_HEAD_ROWS, n_vocab) */
    void *d_act;                        /* (n_batch, act row bytes of the widest input) */
    void *d_moe_scratch;
    size_t moe_scratch_bytes;
    void *d_att_scratch;
    size_t att_scratch_bytes;
    void *d_gemm_scratch;
    size_t gemm_scratch_bytes;
    const void **d_stage_slots[2];      /* per staging buffer: 3 × n_expert device pointers */

    /* pinned host */
    int32_t *h_io;          /* (2 n_batch): tokens, positions */
    int32_t *h_ids;         /* (n_layer, n_batch, top_k) routing per layer (hooks, CPU path) */
    /* A route source's decode routes, every layer's: h_route1 (pinned) holds the (n_layer, top_k)
     * ids and then the (n_layer, top_k) weights, packed by mp_gpu_fetch_routes; one copy at the
     * start of the step puts them at d_rids, with d_rw = the weights' half (gpu_forward.c) */
    uint32_t *h_route1;
    int32_t *d_rids;
    float *d_rw;
    float *h_w;             /* (n_layer, n_batch, top_k) */
    float *h_x;             /* (n_batch, n_embd) MoE input rows for the CPU */
    float *h_part;          /* (n_batch, n_embd) CPU partial */
    float *h_logits;        /* (MP_GPU_HEAD_ROWS, n_vocab) */
    const void **h_stage_tabs;    /* (n_stage_tabs, 3 n_expert) staging slot tables, a ring: a batch's
                                   * table stays untouched until its upload has run (ev_stage_tab) */
    cudaEvent_t *ev_stage_tab;    /* (n_stage_tabs) after each table's upload on the copy stream */
    int n_stage_tabs, stage_tab_next;
    uint64_t *h_mask;       /* (words_per_layer) resident | copied experts of the current step */
    int64_t *h_count;       /* (n_expert) rows per expert in the current step */
    int32_t *h_copy_list;   /* (n_expert) the current layer step's experts to copy (prefill) */
    int32_t *h_cold;        /* (n_expert) the current layer step's cold experts (prefill) */
    int64_t *h_cold_rows;   /* (n_expert) their rows */
    double *h_cold_cpu;     /* (n_expert) their CPU time, estimated */
    int *h_cold_order;      /* (n_expert) mp_decide_copies' scratch */
    bool *h_cold_copy;      /* (n_expert) whether the step copies them */
    uint8_t *h_served;      /* (n_layer, n_batch, top_k) each route's path (mp_served), in h_ids'
                             * order: the hooks' mp_moe_timing.served, written only for them */

    cudaEvent_t ev_host;    /* routing and rows are on the host */
    cudaEvent_t ev_stage_ready[2], ev_stage_free[2];
    cudaEvent_t *ev_moe;    /* (2 n_layer) around each layer's GPU experts (hooks timing) */
    cudaEvent_t *ev_rt;     /* (2 n_layer) after the D2H / before the H2D of hybrid layers */
    bool *rt_pending;       /* (n_layer) ev_rt of this layer recorded in the current step */
    int64_t *rt_cpu_ns;     /* (n_layer) the CPU expert time of that step */
    bool *rt_warm;          /* (n_layer) that step's routes were all on resident experts */
    bool measure;
    bool copied_this_step;  /* the current hybrid layer copied experts (d_proj holds GPU work) */
    bool pending_add;       /* d_x += d_proj is still to do (fused into the next norm) */
    /* a decode (1-row) step as ONE CUDA graph, captured on first use: each hybrid layer hands its
     * rows and routes to the host, and takes the CPU's partial back, through page-locked host
     * memory the kernels read and write (kernels/cuda/handoff.cu) */
    cudaGraphExec_t step_graph;
    bool handoff;            /* the step being captured or run hands off through mapped memory */
    uint32_t *h_flags;       /* (2 n_layer): [il] rows of layer il published (GPU → host), [n_layer
                              * + il] its partial written (host → GPU); zeroed before each step */
    uint64_t *h_stamps;      /* (3 n_layer): the GPU's timer (ns) at layer il's publish, when its
                              * wait kernel began polling and when it saw the host's flag: the
                              * round trip's gap and overhead (mp_gpu_exec_set_measure) */
    bool init_trace;         /* MP_GPU_INIT_TRACE=1: each phase of mp_gpu_exec_new on stderr */
    /* MP_GPU_STEP_STAMPS=1 (a diagnostic): a decode step stamps the GPU's timer at its start and
     * end (h_step[0], h_step[1]); stamp_off_ns = GPU timer - host clock (mp_gpu_now_ns), measured
     * at start to within stamp_err_ns; last_sync_ns: the host clock when the last step drained */
    bool step_stamps;
    uint64_t *h_step;
    int64_t stamp_off_ns, stamp_err_ns, last_sync_ns, last_pos;
    int64_t launch_ns[2];    /* the step's graph launch began and returned (0: none) */
    bool capturing;          /* enqueueing into a graph capture */
    bool graphs_off;         /* capture failed once, no unified addressing, or MP_GPU_GRAPHS=0 */
    char graphs_why[160];

    cudaEvent_t ev_io;      /* the step's token/position upload has been consumed */
    const float *act_src;   /* d_act holds act_src converted to act_vdt (NULL: stale) */
    const void *moe_xq;     /* d_act when the MoE norm of the layer being enqueued also converted
                             * its output for the experts (mp_cuda_rmsnorm_quant), else NULL */
    int act_vdt;
    int stage_next;         /* staging buffer to use next */

    mp_placement pl;        /* owned copy of the placement (bits) */
    size_t expert_bytes_max;
    int64_t stage_experts;    /* experts per staging buffer (mp_gpu_stage_experts) */
    int64_t n_hybrid_layers; /* layers with at least one expert in host memory */
    int64_t gemm_min_rows;  /* dense projections of >= this many rows use cuBLAS (MP_GPU_GEMM_MIN_ROWS;
                             * mp_gpu_exec_set_gemm_min_rows) */
    int64_t copy_min_rows;  /* fixed threshold (mp_gpu_exec_set_copy_min_rows; 0: never copy) */
    bool copy_fixed;        /* true: copy_min_rows decides; false: the cost model below */
    double pcie_ns_per_byte; /* measured at start: one expert's weights, host mapping → staging */
    /* prefill copies price a cold expert of r rows on layer il's CPU at cpu_k x
     * mp_gpu_cpu_rows(g, il, r): the placement's table from --costs (the planner's price), else r
     * (one unit a route); cpu_k an EWMA of the CPU's measured time over what the table priced it at,
     * in prefill steps, starting at 1 with a table (the planner's level) and at 0 without one
     * (unknown until measured) */
    double cpu_k;
    /* decode (1-row) steps: far routes. The GPU reads some cold experts' weights from the
     * page-locked host copy over the bus (a gather kernel into the staging buffers, then the
     * expert kernels), beside the CPU's cores computing the others: the host memory gives the two
     * readers together more than the cores alone (bench/membw_pcie.cu), and nothing leaves the
     * step's one graph. A layer with far routes on, whose step has c cold routes, runs
     * far[il].table[c] units of them far (1/split of an expert each; runtime/decide.h): that many
     * whole routes and, for a remainder, the next one split (the GPU its last FFN rows, the CPU
     * its first), in slot order (the kernels' rule, kernels/cuda/moe.cuh), the rest on the CPU.
     * Which layers and how many: the decision model from the session's decode costs; none without
     * them. */
    int far_max;            /* most far routes a step may run: min(top_k, what staging holds); 0: no
                             * far routes possible (no page-locked host copy, no staging) */
    mp_far_layer *far;      /* (n_layer) each layer's decision (all off without decode costs) */
    bool decode_costs;      /* the placement came with decode costs (--costs) */
    char costs_machine[400]; /* what differs between the machine the decode costs were measured on
                              * and this one (mp_decide_other_machine); "": the same, or not known */
    int64_t n_far_layers;   /* layers with far routes on */
    uint8_t *d_far_of_cold; /* (n_layer, MP_GPU_MAX_TOP_K + 1) the tables on the device, in
                             * routes (the split one included); NULL: no far routes possible */
    int32_t *d_far_split_of_cold; /* (n_layer, MP_GPU_MAX_TOP_K + 1) on the device: r0 of the last
                             * far route, the FFN rows the CPU keeps (0: whole) */
    int32_t *far_split_r0;  /* the host's copy of it */
    const void **d_far;     /* (n_layer, 3, n_expert): each cold expert's slices as the device
                             * sees them in the host copy (NULL for resident experts) */
    /* host experts (gpu_host.c): where the CPU and the weight copies read each expert */
    const void **h_slices;  /* (n_layer, 3, n_expert): gate, up, down slice of each expert, in
                             * h_arena for the cold ones when copied, else in the model's mapping */
    char *h_arena;          /* the cold experts' copy (anonymous memory), or NULL */
    size_t h_arena_bytes;
    int64_t h_arena_huge;   /* bytes of h_arena in transparent huge pages (smaps), -1: unknown */
    int host_mode;          /* MP_GPU_HOST_PINNED / _COPY / _MAPPING (MP_GPU_HOST_EXPERTS, knobs.h) */
    bool host_registered;   /* h_arena is page-locked (cudaHostRegister) */
    char host_why[96];      /* why the copy or its page-locking is not in place ("" when it is) */
    /* MP_GPU_PART_BY_UNIT (gpu_host.c, mp_gpu_host_units): each cold expert's down in units whose
     * column ends are the points the layer's split can cut at (mp_decide_split_rows, increasing),
     * for the CPU's side of a split far route (mp_moe_part.down_units) */
    bool part_by_unit;
    char *h_units;          /* anonymous memory, or NULL */
    size_t h_units_bytes;
    const void **h_unit_slices; /* (n_layer, n_expert): an expert's units in h_units, or NULL */
    int64_t *h_unit_end;    /* (n_layer, MP_GPU_MAX_TOP_K + 1) the units' column ends */
    int *h_n_units;         /* (n_layer) units of each layer (0: none) */
    char units_why[96];     /* why split routes read down in segments though they could by unit ("") */
    /* the adaptive tier (gpu_tier.c; NULL: none). live: (n_layer, words_per_layer) the experts the
     * GPU serves now, the placement's and the tier's READY ones: the host's view of the device's
     * slot tables, both changed only between steps (mp_gpu_tier_apply). Without a tier it is the
     * placement's bits. */
    struct mp_tier *tier;
    const uint64_t *live;
    gpu_tier *gt;
    int64_t tier_hold;      /* MP_GPU_TIER_HOLD: steps a landed copy is still treated as in flight */
    mp_gpu_stats stats;
    mp_moe_timing *timing;  /* (n_layer) of the current step, for the hooks */
    char name[320];
};

/* Expert e of layer il is served by the GPU in the current step (resident or a READY tier slot). */
static inline bool mp_gpu_live(const mp_gpu *g, int64_t il, int64_t e)
{
    return mp_bit_get(g->live + il * g->pl.words_per_layer, e);
}

/* In functions with an `mp_error *err`: return the failure of a kernel entry point (KCHECK) or
 * of a CUDA runtime call (CCHECK), naming what failed. */
#define KCHECK(call, what)                                  \
    do {                                                    \
        int rc_ = (call);                                   \
        if (rc_)                                            \
            return mp_gpu_kernel_fail(err, what, rc_);      \
    } while (0)

#define CCHECK(call, what)                                  \
    do {                                                    \
        cudaError_t e_ = (call);                            \
        if (e_ != cudaSuccess)                              \
            return mp_gpu_cuda_fail(err, what, e_);         \
    } while (0)

/* CUDA error → mp_status with the call named. */
mp_status mp_gpu_cuda_fail(mp_error *err, const char *what, cudaError_t e);
mp_status mp_gpu_kernel_fail(mp_error *err, const char *what, int code);

/* The MoE block of layer il on the device (gpu_moe.c): d_xb (n, n_embd) normed input → d_proj.
 * All-resident layers: routing and the experts, enqueued. Hybrid layers: the rows and routes go to
 * the host, the resident experts run, the host computes the CPU experts into h_part
 * (mp_gpu_moe_host), and h_part is added to d_proj. Enqueued, the host part runs inside this call,
 * between the two (it waits for an event after the rows' copy). With g->handoff (a decode step
 * captured as one graph) the layer publishes the rows and routes into mapped host memory with a
 * flag, and a kernel waits for the host's flag and adds h_part from host memory; the host serves
 * the layer after the graph's launch (mp_gpu_moe_host, in layer order). */
mp_status mp_gpu_moe_layer(mp_gpu *g, int64_t il, int64_t n, mp_error *err);
/* The host part of hybrid layer il: wait for the rows (the event, or the handoff flag), decide
 * prefill copies (enqueued), run the CPU experts into h_part, set the host's flag (handoff);
 * statistics. */
mp_status mp_gpu_moe_host(mp_gpu *g, int64_t il, int64_t n, mp_error *err);
bool mp_gpu_layer_hybrid(const mp_gpu *g, int64_t il);
/* Route source only: fill h_ids/h_w with every layer's routes for this step of n rows (checked
 * with mp_moe_check_routes), before the step enqueues anything; mp_gpu_moe_layer uploads them. */
mp_status mp_gpu_fetch_routes(mp_gpu *g, int64_t n, mp_error *err);
/* Prefill weight copies: whether a step of n rows may copy (which cold experts do:
 * mp_gpu_copy_choice). */
#define MP_GPU_COST_MIN_ROUTES 64 /* CPU routes in a step for a cost sample */
bool mp_gpu_copy_enabled(const mp_gpu *g, int64_t n);
/* Handoff mode: the seconds a GPU waits for the host's partial before it fails the step. */
#define MP_GPU_HANDOFF_TIMEOUT_S 60.0
/* Whether layer il's step of n rows runs far routes: a decode step on a layer whose decision is
 * on (mp_gpu_exec_set_far_plan, or the decision model at start). */
bool mp_gpu_far_on(const mp_gpu *g, int64_t il, int64_t n);
/* Layer il's GPU experts' launch runs in a step of n rows (it writes d_proj): the layer has
 * resident experts, far routes on, or tier slots. */
bool mp_gpu_gpu_part(const mp_gpu *g, int64_t il, int64_t n);
/* Drop the captured decode graphs (a change of which layers run far routes changes their
 * structure); the next decode step captures anew. */
void mp_gpu_drop_graphs(mp_gpu *g);
/* The experts of layer il's prefill step (rows per expert in h_count) that are copied to the GPU:
 * their ids into h_copy_list, their count returned (mp_decide_copies on the CPU's price, cpu_k,
 * and the measured link, or copy_min_rows when fixed). *cpu_units: what mp_gpu_cpu_rows prices
 * the experts left to the CPU at (the fixed part with them), before cpu_k. */
int mp_gpu_copy_choice(mp_gpu *g, int64_t il, size_t expert_bytes, double *cpu_units);
/* A cold expert of `rows` rows on layer il's CPU side in the units cpu_k scales: the placement's
 * table (ns at the planner's level; rows past it along its last row's time per row), else rows
 * (one unit a route). mp_gpu_cpu_fixed: an invocation's fixed part in the same units (0 without a
 * table). */
double mp_gpu_cpu_rows(const mp_gpu *g, int64_t il, int64_t rows);
double mp_gpu_cpu_fixed(const mp_gpu *g, int64_t il);

/* Host experts (gpu_host.c). mp_gpu_host_experts fills h_slices; with copy (the executor has
 * staging buffers and hybrid layers) it also copies the cold experts into anonymous memory and
 * page-locks it, as host_mode asks; a copy or page-locking that cannot be made leaves the mapping
 * or a pageable copy, said by mp_gpu_exec_host_report (gpu.h). Fails only when out of memory for the table. */
mp_status mp_gpu_host_experts(mp_gpu *g, bool copy, mp_error *err);
void mp_gpu_host_experts_free(mp_gpu *g);
/* MP_GPU_PART_BY_UNIT with a host copy: lays each cold expert's down out by the units that the
 * far layers' split points make (h_units), again when they change (mp_gpu_exec_set_far_plan calls
 * it). Made only while it takes at most half the host memory available (mp_host_mem_available):
 * otherwise, or out of memory, none (units_why says why, mp_gpu_exec_host_report shows it): split
 * routes then read down's rows in segments, the same results a little slower. */
void mp_gpu_host_units(mp_gpu *g);
/* pcie_ns_per_byte: one cold expert's slices, host → staging, best of 3 */
void mp_gpu_measure_copy(mp_gpu *g);
/* The adaptive tier (gpu_tier.c; the picture there). mp_gpu_tier_bytes: the device memory of pl's
 * tier slots (expert_bytes_max each); mp_gpu_tier_setup (after the host experts and the pool) makes
 * the tier, or sets g->live to the placement's bits when there is none; mp_gpu_tier_observe hands
 * a hybrid layer's routes to the policy (host side of the step); mp_gpu_tier_apply carries out the
 * step's moves once it has drained, but their weight copies, which mp_gpu_tier_copies enqueues once
 * the next step has been launched (before any of its layers hands its routes to the policy); mp_gpu_tier_serves: layer il has tier slots (its GPU experts'
 * launch runs whatever the static placement holds). */
size_t mp_gpu_tier_bytes(const mp_gpu *g, const mp_placement *pl);
mp_status mp_gpu_tier_setup(mp_gpu *g, const mp_placement *pl, mp_error *err);
void mp_gpu_tier_free(mp_gpu *g);
void mp_gpu_tier_observe(mp_gpu *g, int64_t il, int64_t n, const int32_t *ids);
/* Prefill: the experts list[0..cnt) of layer il were staged at stage (expert_bytes_max apart) and
 * their launch enqueued; those the layer's observed moves admitted are copied from there into their
 * slots on the compute stream (device to device), so they have landed when the step drains. */
mp_status mp_gpu_tier_promote(mp_gpu *g, int64_t il, const int32_t *list, int cnt, const char *stage,
                              mp_error *err);
mp_status mp_gpu_tier_apply(mp_gpu *g, mp_error *err);
mp_status mp_gpu_tier_copies(mp_gpu *g, mp_error *err);
bool mp_gpu_tier_serves(const mp_gpu *g, int64_t il);
void mp_gpu_tier_report(const mp_gpu *g, char *buf, size_t cap);

/* Far routes (gpu_far.c). mp_gpu_far_setup fills d_far from the page-locked host copy (a device
 * view of it) and sets far_max; it leaves d_far_of_cold NULL and far_max 0 (no far routes) when
 * there is no such copy. mp_gpu_far_decide sets every hybrid layer's decision from the
 * placement's decode costs (none without them). */
mp_status mp_gpu_far_setup(mp_gpu *g, mp_error *err);
mp_status mp_gpu_far_decide(mp_gpu *g, const mp_placement *pl, mp_error *err);
/* Expert e's slice t (0 gate, 1 up, 2 down) of layer il in host memory. */
static inline const void *mp_gpu_host_slice(const mp_gpu *g, int64_t il, int t, int64_t e)
{
    return g->h_slices[(il * 3 + t) * g->s->m->hp.n_expert + e];
}

/* Record an event the host will wait on or time: inside a graph capture it must be an external
 * event-record node (a plain record there is a capture-internal dependency the host cannot see). */
static inline cudaError_t mp_gpu_record(mp_gpu *g, cudaEvent_t ev)
{
    return cudaEventRecordWithFlags(ev, g->stream, g->capturing ? cudaEventRecordExternal : 0);
}

static inline int64_t mp_gpu_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* The executor's entry points: runtime/gpu.h's functions as the module implements them (same
 * contracts; module.c puts them in the executor table, and the module's own files call these, never
 * the program's side of gpu.h). */
int mp_gpu_exec_available(char *why, size_t why_cap);
mp_status mp_gpu_exec_memory_info(uint64_t *free_bytes, uint64_t *total_bytes, mp_error *err);
mp_status mp_gpu_exec_new(mp_session *s, const mp_placement *pl, mp_gpu **out, mp_error *err);
void mp_gpu_exec_free(mp_gpu *g);
mp_status mp_gpu_exec_forward(mp_session *s, const int32_t *tokens, int64_t n, bool all_logits, float *logits,
                              mp_error *err);
void mp_gpu_exec_get_memory(const mp_gpu *g, mp_gpu_memory *out);
void mp_gpu_exec_get_stats(const mp_gpu *g, mp_gpu_stats *out);
void mp_gpu_exec_stats_reset(mp_gpu *g);
const char *mp_gpu_exec_device_name(const mp_gpu *g);
const char *mp_gpu_exec_costs_machine(const mp_gpu *g);
void mp_gpu_exec_set_measure(mp_gpu *g, bool on);
void mp_gpu_exec_report(const mp_gpu *g, char *buf, size_t cap);
void mp_gpu_exec_host_report(const mp_gpu *g, char *buf, size_t cap);
void mp_gpu_exec_set_copy_min_rows(mp_gpu *g, int64_t min_rows);
int64_t mp_gpu_exec_copy_min_rows(const mp_gpu *g);
int mp_gpu_exec_far_max(const mp_gpu *g);
bool mp_gpu_exec_set_far_plan(mp_gpu *g, const mp_far_layer *layers);
int64_t mp_gpu_exec_far_layers(const mp_gpu *g);
void mp_gpu_exec_set_gemm_min_rows(mp_gpu *g, int64_t min_rows);
mp_status mp_gpu_exec_bus_read(mp_gpu *g, double seconds, uint64_t *bytes, mp_error *err);

#endif
