/* analyzer/report_csv.c — the CSV tables of the report. Columns are documented in
 * docs/analyzer.md; every file has a header row, numbers are plain (no thousands separators),
 * shares are fractions in [0, 1] with 6 decimals. Node names are quoted (they are foreign text).
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "analyzer/report.h"

/* A CSV field of foreign text: quoted, inner quotes doubled. */
static void put_text(FILE *f, const char *s)
{
    fputc('"', f);
    for (; *s; s++) {
        if (*s == '"')
            fputc('"', f);
        fputc(*s, f);
    }
    fputc('"', f);
}

static double share(uint64_t part, uint64_t whole)
{
    return whole ? (double)part / (double)whole : 0;
}

static void write_nodes(const mp_an_report *r, FILE *f)
{
    fprintf(f, "node_index,node_type,node_name,layer,n_experts,top_k,expert_bytes,routes,"
               "cold_routes,entropy_bits,entropy_norm,gini,stay_frac,same_layer_pred,"
               "next_layer_pred");
    for (int t = 0; t < MP_AN_N_TARGETS; t++)
        fprintf(f, ",cap%02d_experts", (int)(mp_an_targets[t] * 100 + 0.5));
    for (int t = 0; t < MP_AN_N_TARGETS; t++)
        fprintf(f, ",cap%02d_bytes", (int)(mp_an_targets[t] * 100 + 0.5));
    fputs(",same_routing_as\n", f);
    for (int32_t i = 0; i < r->st->n_nodes; i++) {
        const mp_an_node *n = &r->st->nodes[i];
        const mp_an_node_summary *ns = &r->sum->node[i];
        fprintf(f, "%lld,", (long long)n->node_index);
        put_text(f, n->type);
        fputc(',', f);
        put_text(f, n->name);
        fprintf(f, ",%lld,%lld,%lld,%lld,%llu,%llu,%.6f,%.6f,%.6f,%.6f,", (long long)n->layer,
                (long long)n->n_experts, (long long)n->top_k, (long long)n->expert_bytes,
                (unsigned long long)r->st->acc[i].routes, (unsigned long long)r->st->acc[i].cold,
                ns->entropy_bits, ns->entropy_norm, ns->gini, ns->stay_frac);
        if (ns->has_same_layer)
            fprintf(f, "%.6f", ns->same_layer_pred);
        fputc(',', f);
        if (ns->has_next_layer)
            fprintf(f, "%.6f", ns->next_layer_pred);
        for (int t = 0; t < MP_AN_N_TARGETS; t++)
            fprintf(f, ",%lld", (long long)ns->capacity[t]);
        for (int t = 0; t < MP_AN_N_TARGETS; t++)
            fprintf(f, ",%lld", (long long)(ns->capacity[t] * n->expert_bytes));
        if (ns->same_routing_as >= 0)
            fprintf(f, ",%lld", (long long)r->st->nodes[ns->same_routing_as].node_index);
        else
            fputc(',', f);
        fputc('\n', f);
    }
}

static void write_popularity(const mp_an_report *r, FILE *f)
{
    static int32_t train_rank[65536]; /* (n_experts) inverse of train_order */
    fprintf(f, "node_index,layer,expert,count,share,rank,train_count,heldout_count,train_rank\n");
    for (int32_t i = 0; i < r->st->n_nodes; i++) {
        const mp_an_node *n = &r->st->nodes[i];
        const mp_an_node_acc *a = &r->st->acc[i];
        const mp_an_node_summary *ns = &r->sum->node[i];
        for (int64_t r2 = 0; r2 < n->n_experts; r2++)
            train_rank[ns->train_order[r2]] = (int32_t)r2;
        for (int64_t e = 0; e < n->n_experts; e++) {
            const int64_t tr = train_rank[e];
            fprintf(f, "%lld,%lld,%lld,%llu,%.6f,%d,%llu,%llu,%lld\n", (long long)n->node_index,
                    (long long)n->layer, (long long)e, (unsigned long long)a->count[e],
                    share(a->count[e], a->routes), ns->rank[e],
                    (unsigned long long)a->train_count[e],
                    (unsigned long long)(a->count[e] - a->train_count[e]), (long long)tr);
        }
    }
}

static void write_experts_global(const mp_an_report *r, FILE *f)
{
    fprintf(f, "expert,count,share,rank\n");
    for (int64_t e = 0; e < r->sum->max_experts; e++)
        fprintf(f, "%lld,%llu,%.6f,%d\n", (long long)e, (unsigned long long)r->sum->expert_count[e],
                share(r->sum->expert_count[e], r->st->total_routes), r->sum->expert_rank[e]);
}

static void write_coverage(const mp_an_report *r, FILE *f)
{
    fprintf(f, "node_index,layer,experts_kept,bytes_kept,coverage,in_sample,heldout,"
               "oracle_heldout\n");
    for (int32_t i = 0; i < r->st->n_nodes; i++) {
        const mp_an_node *n = &r->st->nodes[i];
        const mp_an_node_summary *ns = &r->sum->node[i];
        for (int64_t k = 0; k <= n->n_experts; k++)
            fprintf(f, "%lld,%lld,%lld,%lld,%.6f,%.6f,%.6f,%.6f\n", (long long)n->node_index,
                    (long long)n->layer, (long long)k, (long long)(k * n->expert_bytes),
                    ns->coverage[k], ns->cov_in_sample[k], ns->cov_heldout[k], ns->cov_oracle[k]);
    }
}

static void write_coverage_global(const mp_an_report *r, FILE *f)
{
    const mp_an_summary *s = r->sum;
    fprintf(f, "budget_experts,budget_bytes,node_index,expert,coverage,in_sample,heldout\n");
    for (int64_t p = 0; p <= s->n_global; p++) {
        fprintf(f, "%lld,%llu,", (long long)p, (unsigned long long)s->global_bytes[p]);
        if (p > 0)
            fprintf(f, "%lld,%d", (long long)r->st->nodes[s->global_order[p - 1].node].node_index,
                    s->global_order[p - 1].expert);
        else
            fputc(',', f);
        fprintf(f, ",%.6f,%.6f,%.6f\n", s->global_cov[p], s->global_in_sample[p],
                s->global_heldout[p]);
    }
}

static void write_capacity(const mp_an_report *r, FILE *f)
{
    fprintf(f, "scope,target,experts,bytes\n");
    for (int t = 0; t < MP_AN_N_TARGETS; t++)
        fprintf(f, "global,%.2f,%lld,%llu\n", mp_an_targets[t],
                (long long)r->sum->global_cap_experts[t],
                (unsigned long long)r->sum->global_cap_bytes[t]);
    for (int32_t i = 0; i < r->st->n_nodes; i++)
        for (int t = 0; t < MP_AN_N_TARGETS; t++)
            fprintf(f, "%lld,%.2f,%lld,%lld\n", (long long)r->st->nodes[i].node_index,
                    mp_an_targets[t], (long long)r->sum->node[i].capacity[t],
                    (long long)(r->sum->node[i].capacity[t] * r->st->nodes[i].expert_bytes));
}

static void write_rank_threshold(const mp_an_report *r, FILE *f)
{
    fprintf(f, "node_index,layer,t,shortlist_bytes,complement_bytes,complement_frac,coverage\n");
    for (int32_t i = 0; i < r->st->n_nodes; i++) {
        const mp_an_node *n = &r->st->nodes[i];
        const int64_t N = n->n_experts, b = n->expert_bytes;
        for (int64_t t = 0; t <= N; t++)
            fprintf(f, "%lld,%lld,%lld,%lld,%lld,%.6f,%.6f\n", (long long)n->node_index,
                    (long long)n->layer, (long long)t, (long long)(t * b), (long long)((N - t) * b),
                    (double)(N - t) / (double)N, r->sum->node[i].coverage[t]);
    }
}

static void write_locality(const mp_an_report *r, FILE *f)
{
    fprintf(f, "node_index,layer,kind,lo,hi,count\n");
    for (int32_t i = 0; i < r->st->n_nodes; i++) {
        const mp_an_node_acc *a = &r->st->acc[i];
        for (int kind = 0; kind < 2; kind++) {
            const uint64_t *h = kind == 0 ? a->reuse : a->runs;
            for (int b = 0; b < MP_AN_LOG2_BUCKETS; b++)
                if (h[b])
                    fprintf(f, "%lld,%lld,%s,%llu,%llu,%llu\n",
                            (long long)r->st->nodes[i].node_index, (long long)r->st->nodes[i].layer,
                            kind == 0 ? "reuse" : "run", 1ULL << b, (2ULL << b) - 1,
                            (unsigned long long)h[b]);
        }
    }
}

static void write_weight_reuse(const mp_an_report *r, FILE *f)
{
    const mp_an_stats *s = r->st;
    fprintf(f, "by,lo,hi,routes,reused,reused_frac\n");
    for (int b = 0; b < MP_AN_WEIGHT_BINS; b++)
        fprintf(f, "weight,%.2f,%.2f,%llu,%llu,%.6f\n", (double)b / MP_AN_WEIGHT_BINS,
                (double)(b + 1) / MP_AN_WEIGHT_BINS, (unsigned long long)s->weight_routes[b],
                (unsigned long long)s->weight_reused[b], share(s->weight_reused[b], s->weight_routes[b]));
    int64_t max_k = 0;
    for (int32_t i = 0; i < s->n_nodes; i++)
        max_k = s->nodes[i].top_k > max_k ? s->nodes[i].top_k : max_k;
    for (int64_t j = 0; j < max_k; j++)
        fprintf(f, "slot,%lld,%lld,%llu,%llu,%.6f\n", (long long)j, (long long)j,
                (unsigned long long)s->slot_routes[j], (unsigned long long)s->slot_reused[j],
                share(s->slot_reused[j], s->slot_routes[j]));
}

static void write_drift(const mp_an_report *r, FILE *f)
{
    const int64_t n = r->in->n_requests;
    fprintf(f, "segment,first_request_ord,last_request_ord,routes,heldout_half_coverage\n");
    int64_t first = 0;
    for (int s = 0; s < mp_an_n_segments(n); s++) {
        int64_t last = first;
        while (last + 1 < n && mp_an_segment_of(last + 1, n) == s)
            last++;
        fprintf(f, "%d,%lld,%lld,%llu,%.6f\n", s, (long long)first, (long long)last,
                (unsigned long long)r->sum->seg_routes[s], r->sum->seg_heldout_half[s]);
        first = last + 1;
    }
}

mp_status mp_an_write_csv(const mp_an_report *r, const char *dir, mp_error *err)
{
    static const struct {
        const char *name;
        void (*fn)(const mp_an_report *, FILE *);
    } tables[] = {
        {"nodes.csv", write_nodes},
        {"popularity.csv", write_popularity},
        {"experts_global.csv", write_experts_global},
        {"coverage.csv", write_coverage},
        {"coverage_global.csv", write_coverage_global},
        {"capacity.csv", write_capacity},
        {"rank_threshold.csv", write_rank_threshold},
        {"locality.csv", write_locality},
        {"weight_reuse.csv", write_weight_reuse},
        {"drift.csv", write_drift},
    };
    for (size_t i = 0; i < sizeof tables / sizeof tables[0]; i++) {
        mp_an_out out;
        FILE *f = mp_an_open_out(&out, dir, tables[i].name, err);
        if (!f)
            return err->code;
        tables[i].fn(r, f);
        mp_status st = mp_an_close_out(&out, err);
        if (st != MP_OK)
            return st;
    }
    return MP_OK;
}
