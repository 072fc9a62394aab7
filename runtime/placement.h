/* runtime/placement.h — the expert placement map and the GPU memory budget (docs/placement.md).
 *
 * A placement says, per MoE layer, which experts have a slot in the GPU expert pool; the others
 * stay in host memory. It is built from one of:
 *   --placement gpu | cpu | layers:N | layers-last:N | fill
 *   --placement-file FILE   (text, one line per layer: "L: e,e,a-b" — docs/placement.md)
 *   --profile OUT.strp      (STRP v1: the profile's resident set, or as many of it as fit)
 * and checked against --gpu-budget BYTES, which covers ALL device memory the runtime will use:
 *   non-expert weights + KV cache + scratch + expert pool (resident experts × bytes per expert).
 *
 * Invariants of a built mp_placement:
 *  - bits has n_layer × words_per_layer words; bit e of layer il is set iff expert e of layer il
 *    is resident; no bit at e >= n_expert is set; n_resident[il] is the popcount of layer il;
 *  - gpu_expert_bytes + host_expert_bytes = every expert's bytes; with a budget,
 *    budget.fixed_bytes + gpu_expert_bytes <= budget.budget_bytes (building fails otherwise).
 * Nothing here touches a device: the map is what a GPU executor would load; on a CPU-only build
 * the runtime validates and reports it while every expert runs on the CPU.
 */
#ifndef MP_RUNTIME_PLACEMENT_H
#define MP_RUNTIME_PLACEMENT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/bits.h"
#include "base/error.h"
#include "base/knobs.h"
#include "runtime/model.h"
#include "runtime/tier.h"

typedef enum mp_placement_mode {
    MP_PLACEMENT_CPU = 0,         /* every expert in host memory */
    MP_PLACEMENT_GPU = 1,         /* every expert resident */
    MP_PLACEMENT_LAYERS_FIRST = 2,/* layers:N — the experts of the first N layers on the CPU */
    MP_PLACEMENT_LAYERS_LAST = 3, /* layers-last:N — the experts of the last N layers on the CPU */
    MP_PLACEMENT_FILL = 4,        /* as many as the budget allows, spread over layers, low ids first */
    MP_PLACEMENT_FILE = 5,        /* --placement-file */
    MP_PLACEMENT_PROFILE = 6,     /* --profile (STRP v1) */
} mp_placement_mode;

/* The placement flags as given on the command line (strings; validated by mp_placement_build,
 * the syntax of spec and budget already by mp_placement_opts_set). */
/* Which executor runs a session (--executor; the decision itself: runtime/executor.h). */
typedef enum mp_executor_kind { MP_EXECUTOR_AUTO = 0, MP_EXECUTOR_CPU = 1, MP_EXECUTOR_GPU = 2 } mp_executor_kind;

/* "auto", "cpu", "gpu" (one line on anything else). */
mp_status mp_executor_parse(const char *text, mp_executor_kind *out, mp_error *err);
const char *mp_executor_name(mp_executor_kind k);

typedef struct mp_placement_opts {
    const char *spec;          /* --placement, NULL: not given */
    const char *file;          /* --placement-file */
    const char *profile;       /* --profile */
    const char *budget_text;   /* --gpu-budget as given, NULL: no budget */
    uint64_t budget_bytes;     /* parsed --gpu-budget (0 when not given) */
    mp_placement_mode mode;    /* parsed --placement (CPU when none) */
    int64_t n_layers_arg;      /* N of layers:N / layers-last:N */
    mp_executor_kind executor; /* --executor (the choice: runtime/executor.h), 0 = auto */
    bool executor_given;
    const char *costs;         /* --costs FILE: the GPU executor's decode costs (far routes), NULL: none */
    char alias_spec[24];       /* "layers:N" of --n-cpu-moe N: spec points here then, so a copy of
                                * the struct is valid only while this one lives */
    /* the adaptive tier (runtime/tier.h): --adaptive POLICY, --adaptive-slots N | P%,
     * --adaptive-inflight N */
    mp_tier_policy adaptive;
    bool adaptive_given;
    uint64_t adaptive_slots;   /* N; 0 with adaptive_share or when not given */
    double adaptive_share;     /* P% / 100 of the budget's expert room; 0: not given */
    uint32_t adaptive_inflight;/* 0: not given (the default: 2 × top_k) */
    bool no_prompts;           /* the command runs no prompt (bench -p 0): the GPU executor's prefill
                                * copy prices (runtime/executor.c) are not built, nor their lack said */
} mp_placement_opts;

/* Help text for the four flags, for the commands' --help. */
extern const char mp_placement_flags_help[];

/* If flag is one of --placement, --placement-file, --profile, --gpu-budget, --executor, --costs,
 * --n-cpu-moe N (--placement layers:N), --cpu-moe (--placement cpu; value unused), --adaptive,
 * --adaptive-slots or --adaptive-inflight, store value into o
 * (parsing the spec and budget strings) and return true with *st set (MP_OK or MP_ERR_ARG with a
 * one-line message). Returns false for any other flag. o must start zeroed. */
bool mp_placement_opts_set(mp_placement_opts *o, const char *flag, const char *value,
                           mp_status *st, mp_error *err);

/* "16GiB", "1.5 GiB" is refused (no spaces); units (case-insensitive): none or B (bytes), KB MB GB
 * TB (powers of 1000), KiB MiB GiB TiB (powers of 1024); a decimal fraction is allowed with a unit
 * and rounded down to whole bytes. Rejects empty, negative, garbage, zero, and values >= 2^64. */
mp_status mp_parse_bytes(const char *text, uint64_t *out, mp_error *err);
/* "gpu", "cpu", "layers:N", "layers-last:N" (N decimal, 0..65536), "fill". */
mp_status mp_placement_spec_parse(const char *text, mp_placement_mode *mode, int64_t *n,
                                  mp_error *err);
/* "8.00 GiB", "2.78 MiB", "512 B" (binary units, two decimals). */
void mp_format_bytes(uint64_t bytes, char *buf, size_t cap);

/* What the budget arithmetic needs to know of a model (tests build it by hand). */
typedef struct mp_placement_geom {
    int64_t n_layer, n_expert, n_expert_used;
    int64_t n_embd, n_head, n_head_kv, head_dim, n_ff_exp, n_vocab;
    int64_t n_ff_shexp;            /* the shared expert's FFN size; 0 without one */
    uint64_t dense_bytes;          /* mp_model_dense_bytes */
    uint64_t *expert_bytes;        /* (n_layer) mp_model_expert_bytes per layer, owned */
    int *gate_type, *down_type;    /* (n_layer) the experts' gate and down tensor types, owned */
} mp_placement_geom;

mp_status mp_placement_geom_from_model(const mp_model *m, mp_placement_geom *g, mp_error *err);
void mp_placement_geom_free(mp_placement_geom *g);

/* Device memory other than the expert pool, for a session of n_ctx positions and n_batch rows:
 *   kv_bytes      = n_ctx × n_layer × n_head_kv × head_dim × 2 (K and V) × MP_GPU_KV_ELEM_BYTES
 *   scratch_bytes = the GPU executor's activations, kernel scratch, cuBLAS workspace and logits
 *                   buffer (mp_gpu_scratch_plan, exact), and an upper bound of its prefill
 *                   staging (n_batch >= MP_GPU_COPY_MIN_ROWS), far-route tables and weight-arena
 *                   padding (placement.c, docs/placement.md).
 * The executor computes its sizes again and enforces the budget with those. */
#define MP_GPU_KV_ELEM_BYTES 2 /* the GPU KV cache holds F16 */
/* Shapes of the GPU executor's scratch (gpu/gpu_exec.c), shared with the estimate above. */
#define MP_GPU_GEMM_MIN_ROWS MP_KNOB_GEMM_MIN_ROWS /* dense projections of >= this many rows go through cuBLAS */
#define MP_GPU_HEAD_ROWS 32        /* output-head rows per chunk (all_logits) */
#define MP_GPU_GEMM_TILE 2048      /* weight rows dequantized per cuBLAS tile */
#define MP_GPU_BLAS_WS_BYTES ((size_t)32 << 20)
#define MP_GPU_STAGE_EXPERTS_MAX 16 /* at most this many experts per staging buffer (mp_gpu_stage_experts) */
#define MP_GPU_STAGE_BYTES ((uint64_t)96 << 20) /* a staging buffer's experts fill about this much */
#define MP_GPU_COPY_MIN_ROWS 32    /* default rows of one cold expert above which it is copied */
/* Whether a GPU-executor session of n_batch rows a step gets staging buffers (where a layer keeps
 * experts in host memory): prefill copies cold experts through them, and a decode step's far
 * routes gather into them (with the page-locked host copy besides). The executor, the budget and
 * the simulator ask this one rule. */
static inline bool mp_gpu_staging(int64_t n_batch)
{
    return n_batch >= MP_GPU_COPY_MIN_ROWS;
}
#define MP_GPU_ALIGN 256 /* every device allocation part, expert slot and host expert slice starts
                          * 256-byte aligned (the MoE kernels' 128-bit loads, cp.async, the copy engine) */

/* Experts per staging buffer (the executor has two, alternating: prefill copies one batch while
 * the kernel reads the other, and a decode step gathers its far routes into both), of geometry g's
 * largest expert (unpadded): as many as fill MP_GPU_STAGE_BYTES, at least ceil(top_k / 2) (the two
 * buffers hold every route of a decode step: far_max stays top_k), at most MP_GPU_STAGE_EXPERTS_MAX
 * and n_expert (a batch is one layer's). 96 MiB keeps the 16 of the 30B preset's Q4_K_M (3.1 MB
 * experts) and Q8_0 (5.0 MB) files, whose prefill was measured with 16, and takes 2 x 1 of
 * Mixtral's 114 MB experts (0.23 GB) where 2 x 16 (3.6 GB, an eighth of its experts) came off the
 * pool (a batch of 96 MiB copies for ~1.8 ms at the H200's 55 GB/s). The executor, which
 * carves the buffers, and the budget, which counts them, call this. */
int64_t mp_gpu_stage_experts(const mp_placement_geom *g);

/* The GPU executor's scratch for a session of n_ctx positions and n_batch rows, buffer by buffer:
 * gpu/gpu_exec.c carves exactly these (each rounded up to MP_GPU_ALIGN), and the budget counts
 * their sum (total), so the two cannot differ. The kernels' own scratch comes from their size
 * functions (kernels/cuda_sizes.h): the MoE kernels' for the widest layer by its expert types. */
typedef struct mp_gpu_scratch {
    size_t rows_embd;  /* n_batch × n_embd f32: x, xb, proj, tmp (four of them) */
    size_t rows_q;     /* n_batch × n_head × head_dim f32: q, attention out (two) */
    size_t rows_kv;    /* n_batch × n_head_kv × head_dim f32: k, v (two) */
    size_t router;     /* n_batch × n_expert f32 */
    size_t routes;     /* n_batch × top_k: ids (i32), weights (f32) (two) */
    size_t rows_i32;   /* n_batch i32: tokens, positions (two) */
    size_t rope;       /* n_batch × head_dim / 2 (cos, sin) f32 pairs: the rows' RoPE angles */
    size_t replay;     /* a replayed decode step's routes: 2 × n_layer × top_k × 4 */
    size_t logits;     /* MP_GPU_HEAD_ROWS × n_vocab f32 */
    size_t act;        /* n_batch rows of the widest activation (f32: mp_act_row_bytes_max) */
    size_t shexp;      /* n_batch × (2 × n_ff_shexp + 1) f32: the shared expert's gate and up rows and
                        * its gate logits (0, and nothing carved, without a shared expert) */
    size_t moe;        /* mp_cuda_moe_scratch_bytes, the largest over the layers */
    size_t att;        /* mp_cuda_attention_scratch_bytes for steps of up to n_batch rows */
    size_t gemm;       /* mp_cuda_gemm_scratch_bytes (0 when no step reaches cuBLAS) */
    size_t blas_ws;    /* MP_GPU_BLAS_WS_BYTES */
    size_t total;      /* every buffer above (and two 4-byte flags), each rounded up to MP_GPU_ALIGN */
} mp_gpu_scratch;
void mp_gpu_scratch_plan(const mp_placement_geom *g, int64_t n_ctx, int64_t n_batch, mp_gpu_scratch *out);
typedef struct mp_gpu_budget {
    uint64_t budget_bytes;    /* 0: no budget (nothing is refused) */
    uint64_t dense_bytes, kv_bytes, scratch_bytes;
    uint64_t fixed_bytes;     /* dense + kv + scratch */
    uint64_t expert_avail_bytes; /* budget - fixed (UINT64_MAX without a budget) */
} mp_gpu_budget;

/* Fails (MP_ERR_LIMIT) when budget_bytes is non-zero and smaller than the fixed part, naming
 * each term. */
mp_status mp_gpu_budget_compute(const mp_placement_geom *g, uint64_t budget_bytes, int64_t n_ctx,
                                int64_t n_batch, mp_gpu_budget *out, mp_error *err);

typedef struct mp_placement {
    mp_placement_mode mode;
    char desc[320];             /* "layers:12", "fill", "file PATH", "profile PATH" */
    int64_t n_layer, n_expert;
    int64_t words_per_layer;    /* ceil(n_expert / 64) */
    uint64_t *bits;             /* (n_layer, words_per_layer) residency bitset */
    int64_t *n_resident;        /* (n_layer) resident experts per layer */
    int64_t n_resident_total;
    uint64_t gpu_expert_bytes;  /* expert pool: sum of resident experts' bytes */
    uint64_t host_expert_bytes; /* experts left in host memory */
    mp_gpu_budget budget;
    uint8_t *profile_image;     /* the STRP file as read (--profile), for callers to hash; else NULL */
    size_t profile_image_bytes;
    /* (n_layer) a profile's routing counts (or frequencies) per layer: those of its experts outside
     * the pool and all of them; NULL when the placement has none. The decision model's cold share
     * (runtime/decide.h, mp_decide_cold_share) is read from them. */
    double *cold_routes, *all_routes;
    /* The decode costs the GPU executor decides far routes from (runtime/decide.h; --costs, loaded
     * by mp_executor_plan for a GPU run), owned; NULL: none, so no far routes. */
    struct mp_decode_costs *decode_costs;
    /* The CPU's time for a cold expert of r rows in each layer, from the same --costs, as the
     * planner prices it (runtime/decide.h, mp_decide_cpu_rows_ns: n_layer rows of cpu_rows_max + 1,
     * [0] an invocation's fixed part): the GPU executor's prefill copies start from it; owned;
     * NULL: none (the executor then prices by its own measurements alone). */
    double *cpu_rows_ns;
    uint32_t cpu_rows_max;
    /* The adaptive tier (runtime/tier.h): slots besides the static residents, counted in the
     * budget; tier_slots 0 (policy off): none. tier_cap (n_layer) is the slots of each layer
     * (mp_tier_split over the layers with host experts), tier_bytes their bytes. With a budget the
     * tier's room is taken first and the static placement (fill, a profile) gets what is left. */
    mp_tier_policy tier_policy;
    uint64_t tier_slots;
    uint32_t *tier_cap;
    uint64_t tier_bytes;
    uint32_t tier_inflight;    /* copies in flight at once over all layers */
    /* With a profile and a tier: the profile's ranking after the experts placed, (layer, expert)
     * pairs in rank order, owned. The tier starts with as many of them as its slots hold, so that
     * at the first step the placement and the tier hold what the profile ranks best; NULL: none. */
    uint32_t (*tier_warm)[2];
    uint32_t n_tier_warm;
} mp_placement;

/* Build and check the placement for geometry g; n_ctx and n_batch are the session's (resolved)
 * sizes for the budget. On failure *out is empty (nothing to free). */
mp_status mp_placement_build(const mp_placement_geom *g, const mp_placement_opts *o,
                             int64_t n_ctx, int64_t n_batch, mp_placement *out, mp_error *err);
/* mp_placement_geom_from_model + mp_placement_build. */
mp_status mp_placement_for_model(const mp_model *m, const mp_placement_opts *o, int64_t n_ctx,
                                 int64_t n_batch, mp_placement *out, mp_error *err);
void mp_placement_free(mp_placement *p);
/* The placement's residents as one byte per (layer, expert), layer-major (n_layer × n_expert,
 * malloc'd, the caller frees it; NULL when out of memory): the form runtime/tier.h takes the
 * pinned experts in. */
uint8_t *mp_placement_cells(const mp_placement *p);

static inline bool mp_placement_resident(const mp_placement *p, int64_t il, int64_t e)
{
    return mp_bit_get(p->bits + il * p->words_per_layer, e);
}

/* One line for run/bench output:
 * "layers:12: 2304/3072 experts on the GPU (layers 0-11: 0/64, 12-47: 64/64); GPU 3.10 GiB
 *  (experts 2.00 GiB + fixed 1.10 GiB) of budget 8.00 GiB; host 0.67 GiB" */
void mp_placement_summary(const mp_placement *p, char *buf, size_t cap);

/* Parse a placement file image (name for errors) into bits (n_layer × words_per_layer, zeroed by
 * the caller). Exposed for tests and the fuzz target. */
mp_status mp_placement_file_parse(const char *text, size_t len, const char *name, int64_t n_layer,
                                  int64_t n_expert, uint64_t *bits, mp_error *err);

#endif
