/* runtime/placement.c — building a placement map and checking it against the GPU budget (see
 * runtime/placement.h for the contract, docs/placement.md for the formulas and policies).
 *
 * Order of work in mp_placement_build: the fixed device memory (weights, KV cache, scratch) is
 * computed first, so that a budget too small for it fails before any expert is placed; then the
 * map is filled by the mode; then its expert pool is checked against what the budget leaves.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "runtime/decide.h"
#include "base/input_file.h"
#include "kernels/cuda_sizes.h"
#include "runtime/matmul.h"
#include "runtime/placement.h"
#include "runtime/strp.h"

/* --adaptive POLICY, --adaptive-slots N | P%, --adaptive-inflight N */
static mp_status adaptive_set(mp_placement_opts *o, const char *flag, const char *value, mp_error *err)
{
    if (!strcmp(flag, "--adaptive")) {
        if (o->adaptive_given)
            return mp_fail(err, MP_ERR_ARG, "--adaptive given twice");
        mp_status st = mp_tier_policy_parse(value, &o->adaptive, err);
        if (st)
            return st;
        o->adaptive_given = true;
        return MP_OK;
    }
    if (!strcmp(flag, "--adaptive-slots")) {
        if (o->adaptive_slots || o->adaptive_share > 0)
            return mp_fail(err, MP_ERR_ARG, "--adaptive-slots given twice");
        return mp_tier_size_parse(value, &o->adaptive_slots, &o->adaptive_share, err);
    }
    if (!strcmp(flag, "--adaptive-inflight"))
        return mp_tier_inflight_parse(value, &o->adaptive_inflight, err);
    return mp_fail(err, MP_ERR_ARG, "%s: unknown flag (expected --adaptive, --adaptive-slots or "
                   "--adaptive-inflight)", flag);
}

bool mp_placement_opts_set(mp_placement_opts *o, const char *flag, const char *value,
                           mp_status *st, mp_error *err)
{
    /* llama.cpp's spellings: --cpu-moe is --placement cpu, --n-cpu-moe N is --placement layers:N
     * (the experts of the first N layers on the CPU, as llama.cpp's flag) */
    const bool cpu_moe = !strcmp(flag, "--cpu-moe"), n_cpu_moe = !strcmp(flag, "--n-cpu-moe");
    if (cpu_moe)
        value = "cpu";
    else if (n_cpu_moe) {
        if (!*value || strlen(value) > 8 || strspn(value, "0123456789") != strlen(value)) {
            *st = mp_fail(err, MP_ERR_ARG, "--n-cpu-moe '%s': expected a layer count, 0..65536", value);
            return true;
        }
        snprintf(o->alias_spec, sizeof o->alias_spec, "layers:%s", value);
        value = o->alias_spec;
    }
    const bool is_spec = !strcmp(flag, "--placement") || cpu_moe || n_cpu_moe,
               is_file = !strcmp(flag, "--placement-file"), is_prof = !strcmp(flag, "--profile"),
               is_budget = !strcmp(flag, "--gpu-budget");
    if (!strcmp(flag, "--costs")) {
        *st = o->costs ? mp_fail(err, MP_ERR_ARG, "--costs given twice")
              : !*value ? mp_fail(err, MP_ERR_ARG, "--costs: empty value") : MP_OK;
        if (!*st)
            o->costs = value;
        return true;
    }
    if (!strncmp(flag, "--adaptive", 10)) {
        *st = adaptive_set(o, flag, value, err);
        return true;
    }
    if (!strcmp(flag, "--executor")) {
        mp_executor_kind k;
        if (o->executor_given)
            *st = mp_fail(err, MP_ERR_ARG, "--executor given twice");
        else if ((*st = mp_executor_parse(value, &k, err)) == MP_OK)
            o->executor = k, o->executor_given = true;
        return true;
    }
    if (!is_spec && !is_file && !is_prof && !is_budget)
        return false;
    *st = MP_OK;
    if (is_budget) {
        if (o->budget_text) {
            *st = mp_fail(err, MP_ERR_ARG, "--gpu-budget given twice");
            return true;
        }
        if ((*st = mp_parse_bytes(value, &o->budget_bytes, err)))
            mp_error_prefix(err, "--gpu-budget");
        else
            o->budget_text = value;
        return true;
    }
    if (o->spec || o->file || o->profile) {
        *st = mp_fail(err, MP_ERR_ARG, "%s: give only one of --placement, --placement-file and "
                      "--profile", flag);
        return true;
    }
    if (!*value) {
        *st = mp_fail(err, MP_ERR_ARG, "%s: empty value", flag);
        return true;
    }
    if (is_spec) {
        if ((*st = mp_placement_spec_parse(value, &o->mode, &o->n_layers_arg, err)) == MP_OK)
            o->spec = value;
    } else if (is_file) {
        o->file = value;
        o->mode = MP_PLACEMENT_FILE;
    } else {
        o->profile = value;
        o->mode = MP_PLACEMENT_PROFILE;
    }
    return true;
}

mp_status mp_placement_geom_from_model(const mp_model *m, mp_placement_geom *g, mp_error *err)
{
    const mp_hparams *hp = &m->hp;
    *g = (mp_placement_geom){.n_layer = hp->n_layer, .n_expert = hp->n_expert,
                             .n_expert_used = hp->n_expert_used, .n_embd = hp->n_embd,
                             .n_head = hp->n_head, .n_head_kv = hp->n_head_kv,
                             .head_dim = hp->head_dim, .n_ff_exp = hp->n_ff_exp,
                             .n_vocab = hp->n_vocab, .n_ff_shexp = hp->n_ff_shexp,
                             .dense_bytes = mp_model_dense_bytes(m)};
    g->expert_bytes = malloc((size_t)hp->n_layer * sizeof *g->expert_bytes);
    g->gate_type = malloc((size_t)hp->n_layer * sizeof *g->gate_type);
    g->down_type = malloc((size_t)hp->n_layer * sizeof *g->down_type);
    if (!g->expert_bytes || !g->gate_type || !g->down_type) {
        mp_placement_geom_free(g);
        return mp_fail(err, MP_ERR_NOMEM, "placement: out of memory");
    }
    for (int64_t il = 0; il < hp->n_layer; il++) {
        g->expert_bytes[il] = mp_model_expert_bytes(m, il);
        g->gate_type[il] = m->layers[il].gate_exps.type;
        g->down_type[il] = m->layers[il].down_exps.type;
    }
    return MP_OK;
}

void mp_placement_geom_free(mp_placement_geom *g)
{
    free(g->expert_bytes);
    free(g->gate_type);
    free(g->down_type);
    g->expert_bytes = NULL;
    g->gate_type = g->down_type = NULL;
}

static size_t gpu_align(size_t b)
{
    return (b + MP_GPU_ALIGN - 1) & ~(size_t)(MP_GPU_ALIGN - 1);
}

void mp_gpu_scratch_plan(const mp_placement_geom *g, int64_t n_ctx, int64_t n_batch, mp_gpu_scratch *out)
{
    const size_t B = (size_t)n_batch, D = (size_t)g->n_embd, Q = (size_t)(g->n_head * g->head_dim);
    const size_t KV = (size_t)(g->n_head_kv * g->head_dim), K = (size_t)g->n_expert_used;
    const size_t F_sh = (size_t)g->n_ff_shexp;
    const size_t W = D > Q ? (D > F_sh ? D : F_sh) : (Q > F_sh ? Q : F_sh);
    *out = (mp_gpu_scratch){
        .rows_embd = B * D * 4, .rows_q = B * Q * 4, .rows_kv = B * KV * 4, .router = B * (size_t)g->n_expert * 4,
        .routes = B * K * 4, .rows_i32 = B * 4,
        .rope = (B + 1) * (size_t)(g->head_dim / 2) * 8, /* the rows' (cos, sin), then the angles per position (f64) */ .replay = 2 * (size_t)g->n_layer * K * 4,
        .logits = (size_t)MP_GPU_HEAD_ROWS * (size_t)g->n_vocab * 4, .act = B * mp_act_row_bytes_max((int64_t)W),
        .shexp = F_sh ? B * (2 * F_sh + 1) * 4 : 0, .blas_ws = MP_GPU_BLAS_WS_BYTES};
    for (int64_t il = 0; il < g->n_layer; il++) {
        const size_t b = mp_cuda_moe_scratch_bytes(g->gate_type[il], g->down_type[il], g->n_embd, g->n_ff_exp,
                                                   n_batch, g->n_expert_used);
        out->moe = b > out->moe ? b : out->moe;
    }
    out->att = mp_cuda_attention_scratch_bytes(n_batch, g->n_head, g->head_dim, n_ctx);
    if (n_batch >= MP_GPU_GEMM_MIN_ROWS || MP_GPU_HEAD_ROWS >= MP_GPU_GEMM_MIN_ROWS)
        out->gemm = mp_cuda_gemm_scratch_bytes((int64_t)W, n_batch, MP_GPU_GEMM_TILE);
    /* as carved: four embd rows, two q, two kv, the router, two routes, two i32 rows, the RoPE
     * table, two flags, the replayed routes, the logits, the activations, the shared expert's rows,
     * then the kernels' scratch */
    out->total = 4 * gpu_align(out->rows_embd) + 2 * gpu_align(out->rows_q) + 2 * gpu_align(out->rows_kv) +
                 gpu_align(out->router) + 2 * gpu_align(out->routes) + 2 * gpu_align(out->rows_i32) +
                 gpu_align(out->rope) + 2 * gpu_align(4) + gpu_align(out->replay) + gpu_align(out->logits) + gpu_align(out->act) +
                 (out->shexp ? gpu_align(out->shexp) : 0) +
                 gpu_align(out->moe ? out->moe : 1) + gpu_align(out->att ? out->att : 1) +
                 gpu_align(out->gemm ? out->gemm : 1) + gpu_align(out->blas_ws);
}

static uint64_t max_expert_bytes(const mp_placement_geom *g)
{
    uint64_t b = 0;
    for (int64_t il = 0; il < g->n_layer; il++)
        b = g->expert_bytes[il] > b ? g->expert_bytes[il] : b;
    return b;
}

int64_t mp_gpu_stage_experts(const mp_placement_geom *g)
{
    const uint64_t b = max_expert_bytes(g);
    int64_t n = b ? (int64_t)((MP_GPU_STAGE_BYTES + b - 1) / b) : MP_GPU_STAGE_EXPERTS_MAX;
    n = n > MP_GPU_STAGE_EXPERTS_MAX ? MP_GPU_STAGE_EXPERTS_MAX : n;
    n = n < (g->n_expert_used + 1) / 2 ? (g->n_expert_used + 1) / 2 : n;
    n = n > g->n_expert ? g->n_expert : n;
    return n > 1 ? n : 1;
}

static uint64_t sat_u64(unsigned __int128 v)
{
    return v > UINT64_MAX ? UINT64_MAX : (uint64_t)v;
}

mp_status mp_gpu_budget_compute(const mp_placement_geom *g, uint64_t budget_bytes, int64_t n_ctx,
                                int64_t n_batch, mp_gpu_budget *out, mp_error *err)
{
    typedef unsigned __int128 u128;
    *out = (mp_gpu_budget){.budget_bytes = budget_bytes, .dense_bytes = g->dense_bytes};
    out->kv_bytes = sat_u64((u128)n_ctx * (u128)g->n_layer * (u128)g->n_head_kv *
                            (u128)g->head_dim * 2u * MP_GPU_KV_ELEM_BYTES);
    /* the executor's scratch, exactly as it carves it; then upper bounds of its staging, far-route
     * tables and padding (gpu/gpu_exec.c) */
    mp_gpu_scratch sc;
    mp_gpu_scratch_plan(g, n_ctx, n_batch, &sc);
    const u128 E = (u128)g->n_expert, expert_max = max_expert_bytes(g);
    u128 scratch = sc.total;
    if (mp_gpu_staging(n_batch)) /* staging for prefill expert copies, and with it the far routes'
                                  * tables: host addresses, routes and split rows */
        scratch += 2 * ((u128)mp_gpu_stage_experts(g) * (expert_max + 3 * 256) + 3 * E * 8 + 256) +
                   (u128)g->n_layer * (3 * E * 8 + (MP_DECIDE_MAX_K + 1) * 5) + 3 * 256;
    /* padding of the weight arena (at most 16 dense tensors a layer: 4 attention matrices, 4
     * norms, the router, 3 Q/K/V biases, 4 of a shared expert), the per-layer slot tables, and of
     * each pool slot (three 256-byte aligned slices per expert) */
    scratch += (u128)g->n_layer * (3 * (E * 8 + 256) + 16 * 256 + E * 3 * 256) + 4 * 256;
    out->scratch_bytes = sat_u64(scratch);
    out->fixed_bytes = sat_u64((u128)out->dense_bytes + out->kv_bytes + out->scratch_bytes);
    if (!budget_bytes) {
        out->expert_avail_bytes = UINT64_MAX;
        return MP_OK;
    }
    char b[32], d[32], k[32], s[32], f[32];
    mp_format_bytes(budget_bytes, b, sizeof b);
    mp_format_bytes(out->dense_bytes, d, sizeof d);
    mp_format_bytes(out->kv_bytes, k, sizeof k);
    mp_format_bytes(out->scratch_bytes, s, sizeof s);
    mp_format_bytes(out->fixed_bytes, f, sizeof f);
    if (budget_bytes < out->dense_bytes)
        return mp_fail(err, MP_ERR_LIMIT, "--gpu-budget %s is smaller than the non-expert weights "
                       "alone (%s); with KV cache %s and scratch %s the runtime needs at least %s",
                       b, d, k, s, f);
    if (budget_bytes < out->fixed_bytes)
        return mp_fail(err, MP_ERR_LIMIT, "--gpu-budget %s: non-expert weights %s + KV cache %s "
                       "(--ctx %" PRId64 ") + scratch %s (--batch %" PRId64 ") = %s do not fit, "
                       "before any expert", b, d, k, n_ctx, s, n_batch, f);
    out->expert_avail_bytes = budget_bytes - out->fixed_bytes;
    return MP_OK;
}

/* A placement file lists at most 65536 layers of 65536 expert ids: far below this. */
#define MP_PLACEMENT_MAX_FILE_BYTES ((uint64_t)64 << 20)

static mp_status read_whole(const char *path, const char *what, uint64_t max_bytes, uint8_t **out,
                            size_t *size, mp_error *err)
{
    char *data;
    mp_status st = mp_input_read_all(path, what, max_bytes, &data, size, err);
    *out = (uint8_t *)data;
    return st;
}

#define SET_BIT(p, il, e) mp_bit_put((p)->bits + (il) * (p)->words_per_layer, (e), true)

/* The adaptive tier beside a profile (mp_tier_carve): the budget's room left beside the profile's
 * experts, then its placed experts, the lowest-ranked first, never out of a layer it holds whole;
 * the carved experts are the tier's first. */
static mp_status carve_tier(const mp_placement_geom *g, const mp_strp *prof, uint32_t n_placed, uint8_t *res,
                            mp_placement *p, mp_error *err)
{
    uint32_t *order = malloc((size_t)(n_placed ? n_placed : 1) * sizeof *order);
    uint32_t *warm = malloc((size_t)p->tier_slots * sizeof *warm);
    p->tier_cap = calloc((size_t)g->n_layer, sizeof *p->tier_cap);
    if (!order || !warm || !p->tier_cap) {
        free(order);
        free(warm);
        return mp_fail(err, MP_ERR_NOMEM, "%s: out of memory", "placement");
    }
    uint64_t n = 0;
    for (uint32_t i = 0; i < n_placed; i++) {
        const mp_strp_pair pr = mp_strp_ranked_at(prof, i);
        if (pr.layer < g->n_layer && pr.expert < g->n_expert)
            order[n++] = (uint32_t)(pr.layer * g->n_expert + pr.expert);
    }
    /* the room the budget has left beside the profile's experts, in slots of the largest expert;
     * without a budget the tier is all room */
    uint64_t free_slots = p->tier_slots;
    if (p->budget.budget_bytes) {
        uint64_t placed = 0;
        for (int64_t il = 0; il < g->n_layer; il++)
            for (int64_t e = 0; e < g->n_expert; e++)
                placed += res[il * g->n_expert + e] ? g->expert_bytes[il] : 0;
        const uint64_t per = max_expert_bytes(g), room = p->budget.expert_avail_bytes;
        free_slots = per && room > placed ? (room - placed) / per : 0;
    }
    uint64_t n_warm = 0;
    p->tier_slots = mp_tier_carve(res, (uint32_t)g->n_layer, (uint32_t)g->n_expert, order, n, p->tier_slots,
                                  free_slots, p->tier_cap, warm, &n_warm);
    free(order);
    p->tier_warm = malloc((size_t)(n_warm ? n_warm : 1) * sizeof *p->tier_warm);
    if (!p->tier_warm) {
        free(warm);
        return mp_fail(err, MP_ERR_NOMEM, "placement: out of memory");
    }
    for (uint64_t i = 0; i < n_warm; i++) {
        p->tier_warm[i][0] = warm[i] / (uint32_t)g->n_expert;
        p->tier_warm[i][1] = warm[i] % (uint32_t)g->n_expert;
    }
    p->n_tier_warm = (uint32_t)n_warm;
    free(warm);
    return MP_OK;
}

static mp_status place_profile(const mp_placement_geom *g, const mp_placement_opts *o,
                               mp_placement *p, mp_error *err)
{
    mp_status st = read_whole(o->profile, "profile", MP_STRP_MAX_FILE_BYTES, &p->profile_image, &p->profile_image_bytes, err);
    if (st)
        return st;
    if (g->n_layer > MP_STRP_MAX_DIM || g->n_expert > MP_STRP_MAX_DIM)
        return mp_fail(err, MP_ERR_UNSUPPORTED, "%s: the model (%" PRId64 " layers, %" PRId64
                       " experts) is larger than STRP can describe", o->profile, g->n_layer,
                       g->n_expert);
    const mp_strp_geometry want = {(uint32_t)g->n_layer, (uint32_t)g->n_expert};
    mp_strp prof;
    if ((st = mp_strp_read_buffer(p->profile_image, p->profile_image_bytes, o->profile, &want,
                                  &prof, err)))
        return st;
    uint64_t n_slots = MP_STRP_PROFILE_SLOTS;
    if (o->budget_bytes) { /* its resident set, as many as fit, in ranked order */
        uint64_t used = 0;
        n_slots = 0;
        for (uint32_t i = 0; i < mp_strp_resident(&prof); i++) {
            const uint64_t b = g->expert_bytes[prof.ranked[i].layer];
            if (b > p->budget.expert_avail_bytes - used)
                break;
            used += b;
            n_slots++;
        }
    }
    uint8_t *res = malloc((size_t)g->n_layer * (size_t)g->n_expert);
    if (!res) {
        mp_strp_free(&prof);
        return mp_fail(err, MP_ERR_NOMEM, "%s: out of memory", o->profile);
    }
    const uint32_t n = mp_strp_placement(&prof, n_slots, res);
    if (p->tier_policy != MP_TIER_OFF && p->tier_slots && (st = carve_tier(g, &prof, n, res, p, err))) {
        free(res);
        mp_strp_free(&prof);
        return st;
    }
    for (int64_t il = 0; il < g->n_layer; il++)
        for (int64_t e = 0; e < g->n_expert; e++)
            if (res[il * g->n_expert + e])
                SET_BIT(p, il, e);
    if (prof.counts || prof.freq) { /* the routing the profile was made from, per layer */
        p->cold_routes = calloc((size_t)g->n_layer, sizeof *p->cold_routes);
        p->all_routes = calloc((size_t)g->n_layer, sizeof *p->all_routes);
        if (!p->cold_routes || !p->all_routes) {
            free(res);
            mp_strp_free(&prof);
            return mp_fail(err, MP_ERR_NOMEM, "%s: out of memory", o->profile);
        }
        for (int64_t il = 0; il < g->n_layer; il++) {
            const size_t row = (size_t)il * (size_t)g->n_expert;
            mp_decide_layer_routes(prof.counts ? prof.counts + row : NULL, prof.freq ? prof.freq + row : NULL, res + row,
                                   g->n_expert, &p->cold_routes[il], &p->all_routes[il]);
        }
    }
    snprintf(p->desc, sizeof p->desc, "profile %s (%" PRIu32 " of %" PRIu32 " ranked experts%s)",
             o->profile, n, mp_strp_ranking_len(&prof),
             o->budget_bytes ? ", of its slots as many as the budget holds" : ", the profile's slots");
    free(res);
    mp_strp_free(&prof);
    return MP_OK;
}


/* The tier asked for: its policy (cost when only --adaptive-slots is given), its slots (N, or P%
 * of the budget's room for experts, 10 % with a budget when neither is given) and the bytes they
 * take off the budget (*room). */
static mp_status tier_request(const mp_placement_geom *g, const mp_placement_opts *o, mp_placement *p,
                              uint64_t *room, mp_error *err)
{
    const bool sized = o->adaptive_slots || o->adaptive_share > 0;
    *room = 0;
    p->tier_policy = o->adaptive_given ? o->adaptive : sized ? MP_TIER_COST : MP_TIER_OFF;
    if (p->tier_policy == MP_TIER_OFF) {
        if (sized || o->adaptive_inflight)
            return mp_fail(err, MP_ERR_ARG, "--adaptive-%s given with --adaptive off: expected no tier flag, or a "
                           "policy", sized ? "slots" : "inflight");
        return MP_OK;
    }
    const uint64_t per = max_expert_bytes(g);
    if (!o->adaptive_slots && !o->budget_bytes) { /* a share, or the default share, of no budget */
        if (sized)
            return mp_fail(err, MP_ERR_ARG, "--adaptive-slots %.0f%%: a share of the budget needs --gpu-budget (or "
                           "give N slots)", o->adaptive_share * 100.0);
        return mp_fail(err, MP_ERR_ARG, "--adaptive %s: expected --adaptive-slots N (or a share with --gpu-budget) "
                       "for the tier's size", mp_tier_policy_name(p->tier_policy));
    }
    p->tier_slots = mp_tier_size_slots(o->adaptive_slots, o->adaptive_share,
                                       per ? p->budget.expert_avail_bytes / per : 0);
    if (!p->tier_slots)
        return mp_fail(err, MP_ERR_LIMIT, "--adaptive-slots %.0f%%: the budget's room for experts holds no expert "
                       "slot at that share", (o->adaptive_share > 0 ? o->adaptive_share : MP_TIER_DEFAULT_SHARE) * 100.0);
    p->tier_inflight = mp_tier_inflight(o->adaptive_inflight, (uint32_t)g->n_expert_used);
    if (o->budget_bytes) {
        const unsigned __int128 b = (unsigned __int128)p->tier_slots * per;
        *room = b > p->budget.expert_avail_bytes ? p->budget.expert_avail_bytes + 1 : (uint64_t)b;
    }
    return MP_OK;
}

/* A tier asked for that got no slot (tier_split, carve_tier) refuses in one line rather than run
 * without it: every expert resident leaves it nothing to serve; otherwise the budget's room is full
 * beside the placement and the layers with host experts have no resident to give up (a layer held
 * whole is never carved: mp_tier_carve). */
static mp_status tier_given(const mp_placement_geom *g, const mp_placement_opts *o, const mp_placement *p,
                            mp_error *err)
{
    if (p->tier_policy == MP_TIER_OFF || p->tier_slots)
        return MP_OK;
    const char *policy = mp_tier_policy_name(p->tier_policy);
    if (!p->host_expert_bytes)
        return mp_fail(err, MP_ERR_LIMIT, "--adaptive %s: placement '%s' keeps every expert on the GPU, so the tier "
                       "would serve none: drop --adaptive", policy, p->desc);
    int64_t whole = 0;
    for (int64_t il = 0; il < g->n_layer; il++)
        whole += p->n_resident[il] == g->n_expert;
    char per[32];
    mp_format_bytes(max_expert_bytes(g), per, sizeof per);
    return mp_fail(err, MP_ERR_LIMIT, "--adaptive %s: no slot for the tier beside placement '%s': the budget%s%s has no "
                   "room left for an expert (%s), and the tier takes none from the %" PRId64 " of %" PRId64 " layers the "
                   "placement holds whole: raise --gpu-budget or drop --adaptive", policy, p->desc,
                   o->budget_text ? " " : "", o->budget_text ? o->budget_text : "", per, whole, g->n_layer);
}

/* The tier's slots spread over the layers with host experts (mp_tier_split), and their bytes. */
static mp_status tier_split(const mp_placement_geom *g, mp_placement *p, mp_error *err)
{
    if (p->tier_policy == MP_TIER_OFF || !p->tier_slots)
        return MP_OK;
    if (p->tier_cap) /* carved out of a profile's placement (carve_tier) */
        goto bytes;
    uint8_t *pinned = mp_placement_cells(p);
    p->tier_cap = calloc((size_t)g->n_layer, sizeof *p->tier_cap);
    if (!pinned || !p->tier_cap) {
        free(pinned);
        return mp_fail(err, MP_ERR_NOMEM, "placement: out of memory");
    }
    p->tier_slots = mp_tier_split(p->tier_slots, (uint32_t)g->n_layer, (uint32_t)g->n_expert, pinned, p->tier_cap);
    free(pinned);
bytes:
    p->tier_bytes = 0;
    for (int64_t il = 0; il < g->n_layer; il++)
        p->tier_bytes += (uint64_t)p->tier_cap[il] * g->expert_bytes[il];
    return MP_OK;
}

static mp_status place_by_mode(const mp_placement_geom *g, const mp_placement_opts *o,
                               mp_placement *p, mp_error *err)
{
    const int64_t L = g->n_layer, E = g->n_expert, N = o->n_layers_arg;
    switch (p->mode) {
    case MP_PLACEMENT_CPU:
        snprintf(p->desc, sizeof p->desc, "cpu");
        return MP_OK;
    case MP_PLACEMENT_GPU:
    case MP_PLACEMENT_LAYERS_FIRST:
    case MP_PLACEMENT_LAYERS_LAST: {
        if (N > L)
            return mp_fail(err, MP_ERR_ARG, "--placement %s: the model has %" PRId64 " layers",
                           o->spec, L);
        int64_t lo = 0, hi = L; /* layers [lo, hi) are resident */
        if (p->mode == MP_PLACEMENT_LAYERS_FIRST)
            lo = N;
        else if (p->mode == MP_PLACEMENT_LAYERS_LAST)
            hi = L - N;
        for (int64_t il = lo; il < hi; il++)
            for (int64_t e = 0; e < E; e++)
                SET_BIT(p, il, e);
        snprintf(p->desc, sizeof p->desc, "%s", o->spec ? o->spec : "gpu");
        return MP_OK;
    }
    case MP_PLACEMENT_FILL: {
        if (!o->budget_bytes)
            return mp_fail(err, MP_ERR_ARG, "--placement fill needs --gpu-budget (it places as "
                           "many experts as the budget allows)");
        /* expert-major: (0,0), (1,0), ..., (L-1,0), (0,1), ...; stop at the first that does not
         * fit, so the map is a prefix of this order (layers differ by at most one expert when
         * expert sizes are equal) */
        uint64_t used = 0;
        for (int64_t e = 0; e < E; e++)
            for (int64_t il = 0; il < L; il++) {
                if (g->expert_bytes[il] > p->budget.expert_avail_bytes - used)
                    goto filled;
                used += g->expert_bytes[il];
                SET_BIT(p, il, e);
            }
    filled:
        snprintf(p->desc, sizeof p->desc, "fill");
        return MP_OK;
    }
    case MP_PLACEMENT_FILE: {
        uint8_t *text = NULL;
        size_t len = 0;
        mp_status st = read_whole(o->file, "placement file", MP_PLACEMENT_MAX_FILE_BYTES, &text, &len, err);
        if (st)
            return st;
        st = mp_placement_file_parse((const char *)text, len, o->file, L, E, p->bits, err);
        free(text);
        snprintf(p->desc, sizeof p->desc, "file %s", o->file);
        return st;
    }
    case MP_PLACEMENT_PROFILE:
        return place_profile(g, o, p, err);
    }
    return mp_fail(err, MP_ERR_INTERNAL, "placement: unknown mode %d", (int)p->mode);
}

mp_status mp_placement_build(const mp_placement_geom *g, const mp_placement_opts *o,
                             int64_t n_ctx, int64_t n_batch, mp_placement *out, mp_error *err)
{
    memset(out, 0, sizeof *out);
    mp_placement p = {.mode = o->file ? MP_PLACEMENT_FILE : o->profile ? MP_PLACEMENT_PROFILE
                                      : o->spec ? o->mode : MP_PLACEMENT_CPU,
                      .n_layer = g->n_layer, .n_expert = g->n_expert,
                      .words_per_layer = (g->n_expert + 63) / 64};
    mp_status st = mp_gpu_budget_compute(g, o->budget_bytes, n_ctx, n_batch, &p.budget, err);
    if (st)
        return st;
    p.bits = calloc((size_t)(g->n_layer * p.words_per_layer), sizeof *p.bits);
    p.n_resident = calloc((size_t)g->n_layer, sizeof *p.n_resident);
    if (!p.bits || !p.n_resident) {
        mp_placement_free(&p);
        return mp_fail(err, MP_ERR_NOMEM, "placement: out of memory");
    }
    /* the adaptive tier's room comes off the budget's before the placement fills it */
    uint64_t tier_room = 0;
    if ((st = tier_request(g, o, &p, &tier_room, err))) {
        mp_placement_free(&p);
        return st;
    }
    /* (a profile's tier is carved out of its placed experts instead: carve_tier) */
    const uint64_t avail = p.budget.expert_avail_bytes;
    if (o->budget_bytes && p.mode != MP_PLACEMENT_PROFILE)
        p.budget.expert_avail_bytes = tier_room < avail ? avail - tier_room : 0;
    st = place_by_mode(g, o, &p, err);
    p.budget.expert_avail_bytes = avail;
    if (st) {
        mp_placement_free(&p);
        return st;
    }
    uint64_t min_b = UINT64_MAX, max_b = 0;
    for (int64_t il = 0; il < g->n_layer; il++) {
        int64_t n = 0;
        for (int64_t w = 0; w < p.words_per_layer; w++)
            n += __builtin_popcountll(p.bits[il * p.words_per_layer + w]);
        p.n_resident[il] = n;
        p.n_resident_total += n;
        p.gpu_expert_bytes += (uint64_t)n * g->expert_bytes[il];
        p.host_expert_bytes += (uint64_t)(g->n_expert - n) * g->expert_bytes[il];
        if (n) {
            min_b = g->expert_bytes[il] < min_b ? g->expert_bytes[il] : min_b;
            max_b = g->expert_bytes[il] > max_b ? g->expert_bytes[il] : max_b;
        }
    }
    if ((st = tier_split(g, &p, err)) || (st = tier_given(g, o, &p, err))) {
        mp_placement_free(&p);
        return st;
    }
    if (o->budget_bytes && p.tier_bytes && p.gpu_expert_bytes + p.tier_bytes > p.budget.expert_avail_bytes) {
        char a[32], need[32], tb[32];
        mp_format_bytes(p.budget.expert_avail_bytes, a, sizeof a);
        mp_format_bytes(p.gpu_expert_bytes, need, sizeof need);
        mp_format_bytes(p.tier_bytes, tb, sizeof tb);
        st = mp_fail(err, MP_ERR_LIMIT, "budget %s leaves %s for experts; placement '%s' needs %s and the adaptive "
                     "tier's %" PRIu64 " slots %s: lower --adaptive-slots or place fewer experts",
                     o->budget_text ? o->budget_text : "?", a, p.desc, need, p.tier_slots, tb);
        mp_placement_free(&p);
        return st;
    }
    if (o->budget_bytes && p.gpu_expert_bytes > p.budget.expert_avail_bytes) {
        char b[32], d[32], k[32], s[32], a[32], need[32], each[80];
        mp_format_bytes(p.budget.budget_bytes, b, sizeof b);
        mp_format_bytes(p.budget.dense_bytes, d, sizeof d);
        mp_format_bytes(p.budget.kv_bytes, k, sizeof k);
        mp_format_bytes(p.budget.scratch_bytes, s, sizeof s);
        mp_format_bytes(p.budget.expert_avail_bytes, a, sizeof a);
        mp_format_bytes(p.gpu_expert_bytes, need, sizeof need);
        char lo[32], hi[32];
        mp_format_bytes(min_b, lo, sizeof lo);
        mp_format_bytes(max_b, hi, sizeof hi);
        if (min_b == max_b)
            snprintf(each, sizeof each, "%s", lo);
        else
            snprintf(each, sizeof each, "%s..%s", lo, hi);
        st = mp_fail(err, MP_ERR_LIMIT, "budget %s: non-expert weights %s + KV cache %s + scratch "
                     "%s leave %s for experts; placement '%s' needs %s (%" PRId64 " experts × %s)",
                     b, d, k, s, a, p.desc, need, p.n_resident_total, each);
        mp_placement_free(&p);
        return st;
    }
    *out = p;
    return MP_OK;
}

mp_status mp_placement_for_model(const mp_model *m, const mp_placement_opts *o, int64_t n_ctx,
                                 int64_t n_batch, mp_placement *out, mp_error *err)
{
    mp_placement_geom g;
    memset(out, 0, sizeof *out);
    mp_status st = mp_placement_geom_from_model(m, &g, err);
    if (st)
        return st;
    st = mp_placement_build(&g, o, n_ctx, n_batch, out, err);
    mp_placement_geom_free(&g);
    return st;
}

uint8_t *mp_placement_cells(const mp_placement *p)
{
    const size_t cells = (size_t)p->n_layer * (size_t)p->n_expert;
    uint8_t *out = malloc(cells ? cells : 1);
    if (!out)
        return NULL;
    for (int64_t il = 0; il < p->n_layer; il++)
        for (int64_t e = 0; e < p->n_expert; e++)
            out[il * p->n_expert + e] = mp_placement_resident(p, il, e);
    return out;
}

void mp_placement_free(mp_placement *p)
{
    free(p->bits);
    free(p->n_resident);
    free(p->profile_image);
    free(p->cold_routes);
    free(p->all_routes);
    free(p->decode_costs);
    free(p->cpu_rows_ns);
    free(p->tier_cap);
    free(p->tier_warm);
    memset(p, 0, sizeof *p);
}

void mp_placement_summary(const mp_placement *p, char *buf, size_t cap)
{
    size_t n = 0;
#define PUT(...)                                                                                  \
    do {                                                                                          \
        if (n < cap) {                                                                            \
            int w_ = snprintf(buf + n, cap - n, __VA_ARGS__);                                     \
            n += w_ > 0 ? (size_t)w_ : 0;                                                         \
        }                                                                                         \
    } while (0)
    PUT("%s: %" PRId64 "/%" PRId64 " experts on the GPU (layers ", p->desc, p->n_resident_total,
        p->n_layer * p->n_expert);
    int groups = 0;
    for (int64_t il = 0; il < p->n_layer;) {
        int64_t j = il;
        while (j + 1 < p->n_layer && p->n_resident[j + 1] == p->n_resident[il])
            j++;
        if (groups == 8) {
            PUT(", ...");
            break;
        }
        if (j > il)
            PUT("%s%" PRId64 "-%" PRId64 ": %" PRId64 "/%" PRId64, groups ? ", " : "", il, j,
                p->n_resident[il], p->n_expert);
        else
            PUT("%s%" PRId64 ": %" PRId64 "/%" PRId64, groups ? ", " : "", il, p->n_resident[il],
                p->n_expert);
        groups++;
        il = j + 1;
    }
    char gpu[32], ex[32], fx[32], host[32], b[32], tb[32];
    mp_format_bytes(p->budget.fixed_bytes + p->gpu_expert_bytes + p->tier_bytes, gpu, sizeof gpu);
    mp_format_bytes(p->gpu_expert_bytes, ex, sizeof ex);
    mp_format_bytes(p->budget.fixed_bytes, fx, sizeof fx);
    mp_format_bytes(p->host_expert_bytes, host, sizeof host);
    PUT("); GPU %s (experts %s + weights, KV cache, scratch %s", gpu, ex, fx);
    if (p->tier_bytes) {
        mp_format_bytes(p->tier_bytes, tb, sizeof tb);
        PUT(" + adaptive tier %s: %" PRIu64 " slots, %s", tb, p->tier_slots, mp_tier_policy_name(p->tier_policy));
    }
    PUT(")");
    if (p->budget.budget_bytes) {
        mp_format_bytes(p->budget.budget_bytes, b, sizeof b);
        PUT(" of budget %s", b);
    }
    PUT("; host experts %s", host);
#undef PUT
    if (cap && n >= cap)
        buf[cap - 1] = 0;
}
