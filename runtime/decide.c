/* runtime/decide.c — the decision model (see decide.h). CUDA-free: the executor and the simulator
 * both link it. */
#include "runtime/decide.h"

#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/quant.h"

/* One fact that differs, appended to a list of them in buf (cap bytes; "; " between facts): *n
 * counts the facts, whether or not they fit; *at is where the text ends (past cap once cut). */
__attribute__((format(printf, 5, 6))) static void add_fact(char *buf, size_t cap, size_t *at, int *n,
                                                             const char *fmt, ...)
{
    if (*at < cap && *n > 0)
        *at += (size_t)snprintf(buf + *at, cap - *at, "; ");
    if (*at < cap) {
        va_list ap;
        va_start(ap, fmt);
        *at += (size_t)vsnprintf(buf + *at, cap - *at, fmt, ap);
        va_end(ap);
    }
    (*n)++;
}

/* One point's times into dc's tables: far on at (cold, far), else far off at cold; a side < 0 (not
 * measured) is NaN there (the far-off tables keep no GPU side). */
static void set_point(mp_decode_costs *dc, bool far_on, int cold, int far, double layer_ns, double cpu_ns,
                      double gpu_ns)
{
    cpu_ns = cpu_ns >= 0 ? cpu_ns : NAN;
    if (far_on) {
        dc->on_ns[cold][far] = layer_ns;
        dc->cpu_on_ns[cold][far] = cpu_ns;
        dc->gpu_on_ns[cold][far] = gpu_ns >= 0 ? gpu_ns : NAN;
    } else {
        dc->off_ns[cold] = layer_ns;
        dc->cpu_off_ns[cold] = cpu_ns;
    }
}

/* The part of a far-on point's GPU side that is its far units' bytes crossing the bus at the rate
 * the grid was measured with (at most the side itself); 0 where the point has no far unit or the
 * rate, the experts' bytes or the side is not known. */
static double bus_part_ns(const mp_decode_costs *dc, bool far_on, int far, double gpu_ns)
{
    if (!far_on || far < 1 || !(gpu_ns > 0) || !(dc->meas_bus_bytes_per_ns > 0) || !dc->expert_bytes)
        return 0;
    const int split = dc->far_split > 0 ? dc->far_split : 1;
    const double ns = (double)far * (double)dc->expert_bytes / split / dc->meas_bus_bytes_per_ns;
    return ns < gpu_ns ? ns : gpu_ns;
}

/* A measured point scaled (mp_decode_costs_scale's rule) into dc's tables. */
static void scale_point(mp_decode_costs *dc, bool far_on, int cold, int far, const struct mp_decode_point_ns *m,
                        double k_cpu, double k_gpu, double k_bus, double k_rest)
{
    if (!isfinite(m->layer))
        return;
    const double side = m->cpu > m->gpu ? m->cpu : m->gpu; /* the longer; < 0: neither measured */
    const double bus = bus_part_ns(dc, far_on, far, m->gpu);
    const double gpu = m->gpu >= 0 ? (m->gpu - bus) * k_gpu + bus * k_bus : m->gpu;
    double t = m->layer * k_rest;
    if (side >= 0 && !(k_cpu == k_rest && k_gpu == k_rest && (bus == 0 || k_bus == k_rest))) {
        /* the longer of the two sides scaled (a slower CPU side may outlast the GPU's; a side not
         * measured, < 0, stays below the other at factors >= 0). The point moves by what its
         * longer side and its rest move: a rest below 0 (the sides outlasted the layer time:
         * noise) moves by nothing, so that factors of 1 give the point as measured and factors
         * above 1 never less */
        const double a = m->cpu * k_cpu, b = gpu, scaled = a > b ? a : b;
        const double rest = m->layer > side ? m->layer - side : 0;
        t = m->layer + (scaled - side) + rest * (k_rest - 1);
        t = t > 0 ? t : 0;
    }
    set_point(dc, far_on, cold, far, t, m->cpu >= 0 ? m->cpu * k_cpu : m->cpu, gpu);
}

/* Every point of dc's tables not measured (NaN). */
static void clear_tables(mp_decode_costs *dc)
{
    for (int c = 0; c <= MP_DECIDE_MAX_K; c++) {
        dc->off_ns[c] = dc->cpu_off_ns[c] = NAN;
        for (int f = 0; f <= MP_DECIDE_MAX_K; f++)
            dc->on_ns[c][f] = dc->cpu_on_ns[c][f] = dc->gpu_on_ns[c][f] = NAN;
    }
}

void mp_decode_costs_scale(mp_decode_costs *dc, double k_cpu, double k_gpu, double k_bus, double k_rest)
{
    if (!dc->measured)
        return;
    clear_tables(dc);
    for (int c = 0; c <= MP_DECIDE_MAX_K; c++) {
        scale_point(dc, false, c, 0, &dc->meas_off[c], k_cpu, k_gpu, k_bus, k_rest);
        for (int f = 0; f <= MP_DECIDE_MAX_K; f++)
            scale_point(dc, true, c, f, &dc->meas_on[c][f], k_cpu, k_gpu, k_bus, k_rest);
    }
    mp_decode_costs_settle(dc);
}

double mp_decide_host_factor(const mp_decode_costs *dc, double now_gbs)
{
    return dc && dc->level_bytes_per_ns > 0 && now_gbs > 0 ? dc->level_bytes_per_ns / now_gbs : 1.0;
}

double mp_decide_bus_factor(const mp_decode_costs *dc, double now_gbs)
{
    return dc && dc->meas_bus_bytes_per_ns > 0 && now_gbs > 0 ? dc->meas_bus_bytes_per_ns / now_gbs : 1.0;
}

void mp_decode_costs_now(mp_decode_costs *dc, double host_gbs, double bus_gbs)
{
    const bool host = host_gbs > 0 && dc->level_bytes_per_ns > 0, bus = bus_gbs > 0 && dc->meas_bus_bytes_per_ns > 0;
    if (!host && !bus)
        return;
    const double kh = host ? host_gbs / dc->level_bytes_per_ns : 1, kb = bus ? bus_gbs / dc->meas_bus_bytes_per_ns : 1;
    if (host)
        dc->host_bytes_per_ns = host_gbs;
    if (bus)
        dc->bus_bytes_per_ns = bus_gbs;
    if (dc->bus_beside_cores_bytes_per_ns > 0 && dc->cores_beside_bus_bytes_per_ns > 0) {
        /* the bus's share is a rate the settling reads (its far bytes' time); the cores' share stays
         * as measured there, beside the level it is a share of, and enters the floor's sum scaled */
        dc->bus_beside_cores_bytes_per_ns *= kb;
        dc->together_bytes_per_ns = dc->cores_beside_bus_bytes_per_ns * kh + dc->bus_beside_cores_bytes_per_ns;
    } else {
        dc->together_bytes_per_ns = 0; /* its split unknown: the floor adds the two alone */
    }
}

mp_status mp_decode_costs_from(const mp_costs *c, const char *name, const mp_decode_shape *shape,
                               mp_decode_costs *out, mp_error *err)
{
    memset(out, 0, sizeof *out);
    name = name ? name : "(memory)";
    const mp_cost_decode *d = &c->decode;
    if (c->absent & MP_COST_ABSENT_DECODE)
        return mp_fail(err, MP_ERR_ARG, "costs %s: no decode layer grid (listed in $.missing): expected a cost "
                       "file from `moeplan calibrate -m MODEL` on a machine with a CUDA device", name);
    clear_tables(out);
    for (int i = 0; i <= MP_DECIDE_MAX_K; i++) {
        out->meas_off[i].layer = NAN;
        for (int j = 0; j <= MP_DECIDE_MAX_K; j++)
            out->meas_on[i][j].layer = NAN;
    }
    out->host_bytes_per_ns = c->host_read_gbs; /* 1 GB/s = 1 byte/ns */
    out->together_bytes_per_ns = c->host_bus_gbs;
    out->cores_beside_bus_bytes_per_ns = c->host_bus_cpu_gbs;
    out->bus_beside_cores_bytes_per_ns = c->host_bus_bus_gbs;
    out->level_bytes_per_ns = mp_costs_host_level_gbs(c);
    out->level_by_window = c->host_read_window;
    out->admit_ns = c->tier_admit.median_ns >= 0 ? c->tier_admit.median_ns : NAN;
    out->machine = c->machine;
    out->knobs = c->knobs;
    mp_cost_spread spread;
    out->noisy_spread = mp_cost_decode_spread(&c->decode, &spread) ? spread.mean : 0;
    out->bus_bytes_per_ns = out->meas_bus_bytes_per_ns = mp_costs_bus_gbs(c);
    if (!d->n_points) /* a grid without points (the loader refuses such a file): no decode point, so
                       * callers charge every decode step by their own model */
        return MP_OK;
    /* the facts that differ, each named with the grid's and this model's value */
    char diff[512] = "";
    size_t at = 0;
    int n_diff = 0;
    if (d->n_expert != shape->n_expert)
        add_fact(diff, sizeof diff, &at, &n_diff, "%lld experts a layer, this model %lld", (long long)d->n_expert,
                 (long long)shape->n_expert);
    if (d->top_k != shape->top_k)
        add_fact(diff, sizeof diff, &at, &n_diff, "top-%d, this model top-%d", d->top_k, shape->top_k);
    if (shape->quant && strcmp(shape->quant, d->quant))
        add_fact(diff, sizeof diff, &at, &n_diff, "experts of %s, this model %s", d->quant, shape->quant);
    if (d->n_embd != shape->n_embd || d->n_ff != shape->n_ff)
        add_fact(diff, sizeof diff, &at, &n_diff, "experts of %lldx%lld, this model %lldx%lld", (long long)d->n_embd,
                 (long long)d->n_ff, (long long)shape->n_embd, (long long)shape->n_ff);
    if (shape->expert_bytes && d->expert_bytes != shape->expert_bytes)
        add_fact(diff, sizeof diff, &at, &n_diff, "%llu bytes an expert, this model %llu",
                 (unsigned long long)d->expert_bytes, (unsigned long long)shape->expert_bytes);
    if (n_diff)
        return mp_fail(err, MP_ERR_ARG, "costs %s: the decode layer grid was measured for another model (%.400s): run "
                       "`moeplan calibrate -m MODEL` for this model", name, diff);
    if (d->threads != shape->threads)
        return mp_fail(err, MP_ERR_ARG, "costs %s: the decode layer grid was measured on %d CPU threads, this run "
                       "uses %d: run with --threads %d, or `moeplan calibrate --threads %d`", name, d->threads,
                       shape->threads, d->threads, shape->threads);
    out->top_k = d->top_k;
    out->far_max = d->far_max;
    out->far_split = d->far_split > 0 ? d->far_split : 1;
    out->expert_bytes = d->expert_bytes;
    for (int i = 0; i < d->n_points; i++) {
        const mp_cost_decode_point *p = &d->points[i];
        if (p->cold < 0 || p->cold > d->top_k || p->far < 0 || p->far > p->cold * out->far_split || p->far > d->far_max ||
            (!p->far_on && p->far) || !(p->layer.median_ns >= 0)) /* the loader refuses these */
            return mp_fail(err, MP_ERR_ARG, "costs %s: decode layer grid point %d (cold %d, far %d): out of range",
                           name, i, p->cold, p->far);
        const struct mp_decode_point_ns m = {p->layer.median_ns, p->cpu_ns, p->gpu_ns};
        if (p->far_on)
            out->meas_on[p->cold][p->far] = m;
        else
            out->meas_off[p->cold] = m;
    }
    out->measured = true;
    mp_decode_costs_scale(out, 1, 1, 1, 1);
    return MP_OK;
}

/* The cores beside the bus (decide.h, mp_decode_costs_settle): each far-on point of whole far routes
 * whose CPU side is below what its CPU experts take alone, slowed over the bus's reads, is raised to
 * that, and its layer time by what the CPU side then exceeds the longer side by. */
static void settle_beside_bus(mp_decode_costs *dc)
{
    const double level = dc->level_bytes_per_ns, beside = dc->cores_beside_bus_bytes_per_ns;
    const double bus = dc->bus_beside_cores_bytes_per_ns;
    if (!(level > 0) || !(beside > 0) || !(bus > 0) || !dc->expert_bytes)
        return;
    const double slow = beside < level ? level / beside - 1 : 0; /* probes that read the cores no slower: alone */
    const int split = dc->far_split > 0 ? dc->far_split : 1;
    for (int c = 1; c <= dc->top_k && c <= MP_DECIDE_MAX_K; c++)
        for (int f = split; f <= c * split && f <= dc->far_max && f <= MP_DECIDE_MAX_K; f += split) {
            const int n = c - f / split; /* experts on the CPU */
            const double alone = n >= 1 ? dc->cpu_off_ns[n] : NAN, cpu = dc->cpu_on_ns[c][f];
            if (!(alone > 0) || !isfinite(cpu))
                continue;
            const double bus_ns = (double)(f / split) * (double)dc->expert_bytes / bus;
            const double least = alone * (1 + slow * (bus_ns < alone ? bus_ns / alone : 1));
            if (cpu >= least)
                continue;
            const double gpu = dc->gpu_on_ns[c][f], side = isfinite(gpu) && gpu > cpu ? gpu : cpu;
            if (least > side && isfinite(dc->on_ns[c][f]))
                dc->on_ns[c][f] += least - side;
            dc->cpu_on_ns[c][f] = least;
        }
}

void mp_decode_costs_settle(mp_decode_costs *dc)
{
    /* far routes on with none run is the same step as off plus the gather's launch: never faster.
     * A grid that measured it faster measured noise, which must not turn a layer on for nothing */
    for (int c = 0; c <= dc->top_k && c <= MP_DECIDE_MAX_K; c++)
        if (isfinite(dc->on_ns[c][0]) && isfinite(dc->off_ns[c]) && dc->on_ns[c][0] < dc->off_ns[c])
            dc->on_ns[c][0] = dc->off_ns[c];
    settle_beside_bus(dc);
}

void mp_decode_costs_raised(const mp_cost_decode *raw, const mp_decode_costs *dc, mp_decode_raised *out)
{
    memset(out, 0, sizeof *out);
    for (int i = 0; i < raw->n_points; i++) {
        const mp_cost_decode_point *p = &raw->points[i];
        if (!p->far_on || p->cold > MP_DECIDE_MAX_K || p->far > MP_DECIDE_MAX_K || !(p->cpu_ns >= 0))
            continue;
        const double to = dc->cpu_on_ns[p->cold][p->far];
        if (!(to > p->cpu_ns))
            continue;
        if (!out->n || to - p->cpu_ns > out->to_ns - out->from_ns)
            out->cold = p->cold, out->far = p->far, out->from_ns = p->cpu_ns, out->to_ns = to;
        out->n++;
    }
}

bool mp_costs_decode_raised(const mp_costs *c, mp_decode_raised *out)
{
    memset(out, 0, sizeof *out);
    const mp_cost_decode *d = &c->decode;
    mp_decode_costs *dc = d->n_points ? malloc(sizeof *dc) : NULL;
    const mp_decode_shape shape = {d->quant, d->n_embd, d->n_ff, d->n_expert, d->top_k, d->threads, d->expert_bytes};
    mp_error err;
    const bool ok = dc && mp_decode_costs_from(c, NULL, &shape, dc, &err) == MP_OK;
    if (ok)
        mp_decode_costs_raised(d, dc, out);
    free(dc);
    return ok;
}

mp_status mp_decode_costs_of_model(const mp_costs *c, const char *name, const mp_model *m, int threads,
                                   mp_decode_costs *out, mp_error *err)
{
    char quant[MP_EXPERT_QUANT_MAX];
    mp_model_expert_quant(&m->layers[0], quant);
    const mp_decode_shape shape = {quant,       m->hp.n_embd, m->hp.n_ff_exp, m->hp.n_expert, (int)m->hp.n_expert_used,
                                   threads,     mp_model_expert_bytes(m, 0)};
    return mp_decode_costs_from(c, name, &shape, out, err);
}

double mp_decide_cold_share(double cold_routes, double all_routes, int64_t n_resident, int64_t n_expert)
{
    if (all_routes > 0)
        return (cold_routes < all_routes ? (cold_routes > 0 ? cold_routes : 0) : all_routes) / all_routes;
    if (n_expert <= 0)
        return 0;
    const int64_t r = n_resident < 0 ? 0 : n_resident > n_expert ? n_expert : n_resident;
    return (double)(n_expert - r) / (double)n_expert;
}

void mp_decide_layer_routes(const uint64_t *counts, const float *freq, const uint8_t *resident, int64_t n_expert,
                            double *cold, double *all)
{
    double c = 0, a = 0;
    for (int64_t e = 0; e < n_expert; e++) {
        const double w = counts ? (double)counts[e] : freq ? (double)freq[e] : 0;
        a += w;
        c += resident[e] ? 0 : w;
    }
    *cold = c;
    *all = a;
}

/* The grid's far units per expert (a grid built by hand may leave far_split 0: whole routes). */
static int units_per_expert(const mp_decode_costs *dc)
{
    return dc->far_split > 0 ? dc->far_split : 1;
}

/* The far units f of a step with c cold routes whose measured time with far routes on is least
 * (the fewer on ties; 0 when none is measured). */
static int best_far(const mp_decode_costs *dc, int c)
{
    const int units = c * units_per_expert(dc);
    const int f_hi = units < dc->far_max ? units : dc->far_max;
    int best = 0;
    for (int f = 1; f <= f_hi; f++)
        if (isfinite(dc->on_ns[c][f]) && (!isfinite(dc->on_ns[c][best]) || dc->on_ns[c][f] < dc->on_ns[c][best]))
            best = f;
    return best;
}

void mp_decide_far_layer(const mp_decode_costs *dc, double cold_share, mp_far_layer *out)
{
    memset(out, 0, sizeof *out);
    if (!dc || dc->far_max < 1)
        return;
    const int K = dc->top_k;
    const double p = cold_share < 0 ? 0 : cold_share > 1 ? 1 : cold_share;
    double e_on = 0, e_off = 0, choose = 1; /* choose = C(K, c) */
    bool known = true;
    mp_far_layer fl = {.on = true, .split = (uint8_t)units_per_expert(dc)};
    for (int c = 0; c <= K; c++) {
        if (c > 0)
            choose = choose * (double)(K - c + 1) / (double)c;
        const int best = best_far(dc, c);
        fl.table[c] = (uint8_t)best;
        const double prob = choose * pow(p, c) * pow(1 - p, K - c);
        if (prob < 1e-12) /* a count this layer (almost) never sees decides nothing */
            continue;
        if (!isfinite(dc->on_ns[c][best]) || !isfinite(dc->off_ns[c])) {
            known = false;
            continue;
        }
        e_on += prob * dc->on_ns[c][best];
        e_off += prob * dc->off_ns[c];
    }
    if (known && e_on < e_off)
        *out = fl;
}

int mp_decide_far_split_most(int top_k, int64_t n_ff, int64_t granule)
{
    if (top_k < 1 || granule < 1)
        return 1;
    int64_t s = n_ff / granule;
    if (s > MP_DECIDE_MAX_K / top_k)
        s = MP_DECIDE_MAX_K / top_k;
    return s < 1 ? 1 : (int)s;
}

int mp_decide_far_split(int top_k, int64_t n_ff, int64_t granule)
{
    if (top_k < 1 || granule < 1)
        return 1;
    const int by_step = (MP_DECIDE_FAR_RESOLUTION + top_k - 1) / top_k;
    const int s = by_step > MP_DECIDE_FAR_UNITS_LEAST ? by_step : MP_DECIDE_FAR_UNITS_LEAST;
    const int most = mp_decide_far_split_most(top_k, n_ff, granule);
    return s < most ? s : most;
}

static int64_t gcd64(int64_t a, int64_t b)
{
    while (b) {
        const int64_t t = a % b;
        a = b;
        b = t;
    }
    return a;
}

int mp_decide_far_split_of_grid(int top_k, int64_t n_ff, const char *quant)
{
    const char *down = quant ? strrchr(quant, '/') : NULL;
    down = down ? down + 1 : quant;
    const int type = down && *down ? mp_type_from_name(down) : -1;
    const int64_t granule = type >= 0 ? mp_decide_split_granule(type) : 0;
    return granule > 0 ? mp_decide_far_split(top_k, n_ff, granule) : 0;
}

int64_t mp_decide_split_granule(int down_type)
{
    const mp_type_ops *ops = mp_type_ops_scalar(down_type); /* the vec_dot_type is every level's */
    const int64_t w = mp_type_block_elems(down_type);
    if (!ops || w < 1)
        return 0;
    const int64_t a = mp_type_block_elems(ops->vec_dot_type);
    if (a < 1)
        return 0;
    return w / gcd64(w, a) * a;
}

int64_t mp_decide_split_rows(int64_t n_ff, int64_t granule, int split, int part)
{
    if (granule < 1 || split < 2 || part < 1 || part >= split || n_ff < 2 * granule)
        return 0;
    const int64_t units = n_ff / granule;
    int64_t gpu = (units * part * 2 + split) / (2 * (int64_t)split); /* part / split of it, rounded */
    gpu = gpu < 1 ? 1 : gpu > units - 1 ? units - 1 : gpu;
    return n_ff - gpu * granule;
}

void mp_decide_far_units(int f, int split, int far_max_routes, int *routes, int *part)
{
    split = split > 0 ? split : 1;
    f = f > 0 ? f : 0;
    int r = f / split, p = f % split;
    if (p)
        r++;
    if (r > far_max_routes) { /* the routes the stage holds, each whole */
        r = far_max_routes > 0 ? far_max_routes : 0;
        p = 0;
    }
    *routes = r;
    *part = p;
}

double mp_decide_decode_ns(const mp_decode_costs *dc, const mp_far_layer *fl, int c)
{
    if (!dc || c < 0 || c > dc->top_k)
        return NAN;
    return fl && fl->on ? dc->on_ns[c][fl->table[c]] : dc->off_ns[c];
}

double mp_decide_decode_cpu_ns(const mp_decode_costs *dc, const mp_far_layer *fl, int c)
{
    if (!dc || c < 0 || c > dc->top_k)
        return NAN;
    return fl && fl->on ? dc->cpu_on_ns[c][fl->table[c]] : dc->cpu_off_ns[c];
}

double mp_decide_hostbus_ns(double bytes, double host_bytes_per_ns, double bus_bytes_per_ns,
                            double together_bytes_per_ns)
{
    if (!(host_bytes_per_ns > 0) || !(bytes > 0)) /* the host's bandwidth unknown: no floor */
        return 0;
    if (together_bytes_per_ns > 0)
        return bytes / (together_bytes_per_ns > host_bytes_per_ns ? together_bytes_per_ns : host_bytes_per_ns);
    return bytes / (host_bytes_per_ns + (bus_bytes_per_ns > 0 ? bus_bytes_per_ns : 0));
}

double mp_decide_floor_ns(const mp_decode_costs *dc, double bytes)
{
    return dc ? mp_decide_hostbus_ns(bytes, dc->host_bytes_per_ns, dc->bus_bytes_per_ns, dc->together_bytes_per_ns)
              : 0;
}

bool mp_decide_host_moved(double level_gbs, bool level_by_window, double now_gbs)
{
    return level_by_window && level_gbs > 0 && fabs(now_gbs / level_gbs - 1) > MP_DECIDE_HOST_MOVED;
}

bool mp_decide_copy_first(double cpu_a, int64_t rows_a, double cpu_b, int64_t rows_b)
{
    return cpu_a != cpu_b ? cpu_a > cpu_b : rows_a > rows_b;
}

/* qsort_r's order of copy candidates (indices): mp_decide_copy_first, then the lower index. */
typedef struct copy_keys {
    const double *cpu_ns;
    const int64_t *rows;
} copy_keys;

static int copy_before(const void *a, const void *b, void *keys)
{
    const int x = *(const int *)a, y = *(const int *)b;
    const copy_keys *k = keys;
    if (mp_decide_copy_first(k->cpu_ns[x], k->rows[x], k->cpu_ns[y], k->rows[y]))
        return -1;
    if (mp_decide_copy_first(k->cpu_ns[y], k->rows[y], k->cpu_ns[x], k->rows[x]))
        return 1;
    return (x > y) - (x < y);
}

int mp_decide_copy_count(int nc, const double *cpu_ns, const int *order, double total_ns, double copy_ns)
{
    double best = total_ns, prefix = 0;
    int best_k = 0;
    for (int k = 1; k <= nc; k++) {
        prefix += cpu_ns[order ? order[k - 1] : k - 1];
        const double rest = total_ns - prefix, link = (double)k * copy_ns;
        const double t = rest > link ? rest : link;
        if (t < best) {
            best = t;
            best_k = k;
        }
    }
    return best_k;
}

int mp_decide_copies(int n, const int64_t *rows, const double *cpu_ns, double copy_ns, int64_t min_rows, int *order,
                     bool *copy)
{
    bool known = copy_ns > 0;
    for (int i = 0; i < n; i++) {
        copy[i] = false;
        known = known && (rows[i] < 2 || cpu_ns[i] > 0);
    }
    int n_copy = 0;
    if (!known) { /* nothing measured yet */
        for (int i = 0; i < n; i++)
            if (rows[i] >= 2 && min_rows > 0 && rows[i] >= min_rows) {
                copy[i] = true;
                n_copy++;
            }
        return n_copy;
    }
    double total = 0;
    int nc = 0;
    for (int i = 0; i < n; i++) {
        total += cpu_ns[i] > 0 ? cpu_ns[i] : 0;
        if (rows[i] >= 2)
            order[nc++] = i;
    }
    if (nc == 0)
        return 0;
    /* the candidates by CPU time, most first: copying the k costliest leaves the CPU the least */
    copy_keys keys = {cpu_ns, rows};
    qsort_r(order, (size_t)nc, sizeof *order, copy_before, &keys);
    const int best_k = mp_decide_copy_count(nc, cpu_ns, order, total, copy_ns);
    for (int k = 0; k < best_k; k++)
        copy[order[k]] = true;
    return best_k;
}

/* mp_decide_expert_table's split of entry e: the fixed part and the slope of its `concurrent`
 * curve; slope -1 without one. */
static void expert_split(const mp_cost_expert *e, double *fixed_ns, double *slope_ns)
{
    const mp_cost_curve *c = &e->concurrent;
    *fixed_ns = 0;
    *slope_ns = -1; /* no curve */
    if (c->n_points < 2)
        return;
    const int n = c->n_points;
    const double x0 = c->x[0], x1 = c->x[n - 1], y0 = c->y[0].median_ns, y1 = c->y[n - 1].median_ns;
    double slope = (y1 - y0) / (x1 - x0), fixed = y0 - slope * x0;
    if (slope < 0) /* more experts measured faster: noise; charge the mean */
        slope = 0, fixed = (y0 + y1) / 2;
    if (fixed < 0) /* superlinear: no fixed part */
        fixed = 0, slope = y1 / x1;
    *fixed_ns = fixed;
    *slope_ns = slope;
}

static double marginal_ns(const mp_cost_expert *e, double slope_ns, uint32_t rows)
{
    if (slope_ns < 0)
        return mp_cost_curve_ns(&e->by_rows, rows);
    double v = slope_ns + mp_cost_curve_ns(&e->by_rows, rows) - mp_cost_curve_ns(&e->by_rows, 1);
    return v > 0 ? v : 0;
}

void mp_decide_expert_table(const mp_cost_expert *e, double k, uint32_t max_rows, double *fixed_ns, double *ns)
{
    double fixed, slope;
    expert_split(e, &fixed, &slope);
    *fixed_ns = k * fixed;
    ns[0] = 0;
    for (uint32_t r = 1; r <= max_rows; r++)
        ns[r] = k * marginal_ns(e, slope, r);
}

double mp_decide_cpu_anchor(const mp_costs *c, const mp_cost_expert *cpu, double share)
{
    const int K = c->decode.top_k;
    const mp_cost_decode_point *p = NULL; /* the grid's point of K cold routes, far routes off */
    for (int i = 0; i < c->decode.n_points && !p; i++)
        if (!c->decode.points[i].far_on && c->decode.points[i].cold == K)
            p = &c->decode.points[i];
    if (!p || cpu->threads != c->decode.threads || p->cpu_ns <= 0)
        return 1.0;
    double fixed, slope;
    expert_split(cpu, &fixed, &slope);
    const double model = fixed + (double)K * marginal_ns(cpu, slope, 1);
    return model > 0 ? p->cpu_ns * share / model : 1.0;
}

mp_status mp_decide_cpu_rows_ns(const mp_costs *c, const char *name, const mp_model *m, int threads, uint32_t max_rows,
                                double **out, double *rows_measured, mp_error *err)
{
    const int64_t L = m->hp.n_layer;
    const size_t stride = (size_t)max_rows + 1;
    *out = NULL;
    *rows_measured = 0;
    double bytes_sum = 0;
    for (int64_t l = 0; l < L; l++)
        bytes_sum += (double)mp_model_expert_bytes(m, l);
    double *t = malloc((size_t)(L > 0 ? L : 1) * stride * sizeof *t);
    if (!t)
        return mp_fail(err, MP_ERR_NOMEM, "%s: out of memory for the CPU experts' cost tables", name);
    for (int64_t l = 0; l < L; l++) {
        char quant[MP_EXPERT_QUANT_MAX];
        mp_model_expert_quant(&m->layers[l], quant);
        const mp_cost_expert *cpu = mp_costs_find_cpu(c, quant, m->hp.n_embd, m->hp.n_ff_exp, threads);
        if (!cpu) {
            free(t);
            return mp_fail(err, MP_ERR_ARG, "%s: no CPU expert entry for layer %" PRId64 "'s %s experts (%" PRId64
                           "x%" PRId64 "): expected a cost file from `moeplan calibrate` of this model",
                           name, l, quant, m->hp.n_embd, m->hp.n_ff_exp);
        }
        const mp_cost_curve *by_rows = &cpu->by_rows;
        const double top = by_rows->n_points > 0 ? by_rows->x[by_rows->n_points - 1] : 0;
        if (l == 0 || top < *rows_measured)
            *rows_measured = top;
        const double share = mp_decide_grid_share(mp_model_expert_bytes(m, l), bytes_sum / (double)L);
        double *row = t + (size_t)l * stride, fixed;
        mp_decide_expert_table(cpu, mp_decide_cpu_anchor(c, cpu, share), max_rows, &fixed, row);
        row[0] = fixed; /* [0]: the invocation's fixed part */
    }
    *out = t;
    return MP_OK;
}

/* The grid's least time for a step with c cold routes (far on or off); NaN when not measured. */
static double best_decode_ns(const mp_decode_costs *dc, int c)
{
    const double off = dc->off_ns[c], on = dc->on_ns[c][best_far(dc, c)];
    return isfinite(on) && !(on >= off) ? on : off;
}

void mp_decide_tier_costs(const mp_decode_costs *dc, double *route_saving_ns, double *copy_cost_ns)
{
    *route_saving_ns = 0;
    *copy_cost_ns = 0;
    if (!dc)
        return;
    const double bytes = (double)dc->expert_bytes;
    if (dc->host_bytes_per_ns > 0)
        *copy_cost_ns = bytes / dc->host_bytes_per_ns;
    if (isfinite(dc->admit_ns))
        *copy_cost_ns += dc->admit_ns;
    const int k = dc->top_k;
    const double all = k > 0 && k <= MP_DECIDE_MAX_K ? best_decode_ns(dc, k) : NAN, none = k > 0 ? best_decode_ns(dc, 0) : NAN;
    if (isfinite(all) && isfinite(none) && all > none)
        *route_saving_ns = (all - none) / k;
    else if (dc->host_bytes_per_ns > 0)
        *route_saving_ns = bytes / dc->host_bytes_per_ns;
}

bool mp_decide_admit(double score_gain, double route_saving_ns, double copy_cost_ns)
{
    if (!(route_saving_ns > 0) || !(score_gain > 0))
        return false;
    return score_gain * route_saving_ns > copy_cost_ns;
}

/* a machine fact both sides know */
static bool known(const char *s)
{
    return s && s[0] && strcmp(s, "unknown") != 0 && strcmp(s, "none") != 0;
}

bool mp_decide_other_machine(const char *cal_cpu, int cal_cores, const char *cal_gpu, const char *cpu, int cores,
                             const char *gpu, char *why, size_t cap)
{
    size_t at = 0;
    int n = 0;
    if (cap)
        why[0] = '\0';
    if (known(cal_gpu) && known(gpu) && strcmp(cal_gpu, gpu) != 0)
        add_fact(why, cap, &at, &n, "GPU %s, this machine's %s", cal_gpu, gpu);
    if (known(cal_cpu) && known(cpu) && strcmp(cal_cpu, cpu) != 0)
        add_fact(why, cap, &at, &n, "CPU %s, this machine's %s", cal_cpu, cpu);
    if (cal_cores > 0 && cores > 0 && cal_cores != cores)
        add_fact(why, cap, &at, &n, "%d CPUs online, this machine %d", cal_cores, cores);
    return n > 0;
}

bool mp_decide_other_knobs(const mp_costs_knobs *cal, const mp_knobs *now, char *why, size_t cap)
{
    mp_knobs defaults;
    now = mp_knobs_or_defaults(now, &defaults);
    size_t at = 0;
    bool differ = false;
    if (cap)
        why[0] = '\0';
    for (int i = 0; i < mp_knob_count() && i < MP_KNOBS_MAX; i++) {
        char here[MP_KNOB_TEXT_MAX];
        if (!mp_knob_at(i)->costs || !cal->set[i] || !strcmp(mp_knob_value_text(now, i, here, sizeof here), cal->value[i]))
            continue;
        if (at < cap) {
            const int n = snprintf(why + at, cap - at, "%s%s=%s here, %s in the costs", differ ? "; " : "",
                                   mp_knob_at(i)->name, here, cal->value[i]);
            at += n > 0 ? (size_t)n : 0;
        }
        differ = true;
    }
    return differ;
}
