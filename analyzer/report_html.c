/* analyzer/report_html.c — report.html: one self-contained page (inline CSS, the four charts
 * embedded as inline SVG, no scripts, no external resources) that also links the CSV, SVG and
 * JSON files beside it. Every piece of trace text is escaped. */
#include <stdio.h>
#include <string.h>

#include "analyzer/report.h"
#include "analyzer/svg.h"


static void esc(FILE *f, const char *s)
{
    for (; s && *s; s++) {
        switch (*s) {
        case '<': fputs("&lt;", f); break;
        case '>': fputs("&gt;", f); break;
        case '&': fputs("&amp;", f); break;
        case '"': fputs("&quot;", f); break;
        default: fputc(*s, f);
        }
    }
}

static void bytes_cell(FILE *f, double b)
{
    char buf[64];
    mp_svg_bytes(buf, sizeof buf, b);
    fprintf(f, "<td>%s</td>", b > 0 ? buf : "?");
}

mp_status mp_an_write_html(const mp_an_report *r, const char *dir, mp_error *err)
{
    const mp_an_stats *s = r->st;
    const mp_an_summary *sum = r->sum;
    mp_an_out out;
    FILE *f = mp_an_open_out(&out, dir, "report.html", err);
    if (!f)
        return err->code;
    fprintf(f, "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n"
               "<title>moeplan analyze report</title>\n<style>\n"
               "body{font-family:sans-serif;margin:2em;max-width:1100px;color:#222}\n"
               "table{border-collapse:collapse;margin:1em 0}td,th{border:1px solid #ccc;"
               "padding:3px 8px;text-align:right}th{background:#f2f2f2}\n"
               "td.l,th.l{text-align:left}figure{margin:1.5em 0}\n</style></head><body>\n"
               "<h1 id=\"title\">MoE routing report</h1>\n<p>moeplan %s; rows: <b>%s</b>; ",
            MP_VERSION, mp_an_rows_name(r->opt->rows));
    fprintf(f, "%lld requests, %llu token rows, %llu routing decisions over %d MoE layers.</p>\n",
            (long long)r->in->n_requests, (unsigned long long)s->total_rows,
            (unsigned long long)s->total_routes, s->n_nodes);
    fprintf(f, "<h2>Traces</h2>\n<table id=\"traces\"><tr><th class=\"l\">path</th><th class=\"l\">"
               "source</th><th class=\"l\">model SHA-256</th><th>requests</th></tr>\n");
    for (int i = 0; i < r->in->n_traces; i++) {
        const mp_trace_run *run = mp_trace_reader_run(r->in->trace[i]);
        fprintf(f, "<tr><td class=\"l\">");
        esc(f, r->in->meta[i].path);
        fprintf(f, "</td><td class=\"l\">");
        esc(f, run->source);
        fprintf(f, "</td><td class=\"l\">");
        esc(f, run->model_sha256 ? run->model_sha256 : "unknown");
        fprintf(f, "</td><td>%lld</td></tr>\n", (long long)r->in->meta[i].n_requests);
    }
    fprintf(f, "</table>\n<h2>Capacity (one budget across all layers, greedy per %s)</h2>\n"
               "<table id=\"capacity\"><tr><th>coverage</th><th>experts</th><th>bytes</th></tr>\n",
            sum->by_bytes ? "byte" : "expert");
    for (int t = 0; t < MP_AN_N_TARGETS; t++) {
        fprintf(f, "<tr><td>%.0f %%</td><td>%lld of %lld</td>", mp_an_targets[t] * 100,
                (long long)sum->global_cap_experts[t], (long long)sum->n_global);
        bytes_cell(f, (double)sum->global_cap_bytes[t]);
        fprintf(f, "</tr>\n");
    }
    const int64_t half = sum->n_global / 2;
    fprintf(f, "</table>\n<p>Half the experts (popularity learned on %lld training requests): "
               "in-sample %.1f %%, held-out %.1f %% of routes. Mean normalized entropy %.3f, mean "
               "Gini %.3f.</p>\n",
            (long long)r->n_train_requests, 100 * sum->global_in_sample[half],
            100 * sum->global_heldout[half], sum->mean_entropy_norm, sum->mean_gini);
    for (int k = 0; k < MP_AN_N_CHARTS; k++) {
        fprintf(f, "<figure>\n");
        mp_status st = mp_an_svg_chart(r, k, f, err);
        if (st != MP_OK) {
            mp_an_abort_out(&out);
            return st;
        }
        fprintf(f, "<figcaption><a href=\"%s\">%s</a></figcaption></figure>\n",
                mp_an_chart_files[k], mp_an_chart_files[k]);
    }
    fprintf(f, "<h2>Layers</h2>\n<table id=\"nodes\"><tr><th>node</th><th class=\"l\">name</th>"
               "<th>layer</th><th>experts</th><th>top-k</th><th>expert bytes</th><th>routes</th>"
               "<th>entropy (norm.)</th><th>Gini</th><th>top-half share</th><th>stay</th>"
               "<th>experts for 90 %%</th></tr>\n");
    for (int32_t i = 0; i < s->n_nodes; i++) {
        const mp_an_node *n = &s->nodes[i];
        const mp_an_node_summary *ns = &sum->node[i];
        fprintf(f, "<tr><td>%lld</td><td class=\"l\">", (long long)n->node_index);
        esc(f, n->name);
        fprintf(f, "</td><td>%lld</td><td>%lld</td><td>%lld</td>", (long long)n->layer,
                (long long)n->n_experts, (long long)n->top_k);
        bytes_cell(f, (double)n->expert_bytes);
        fprintf(f, "<td>%llu</td><td>%.3f</td><td>%.3f</td><td>%.3f</td><td>%.3f</td><td>%lld</td>"
                   "</tr>\n",
                (unsigned long long)s->acc[i].routes, ns->entropy_norm, ns->gini,
                ns->coverage[n->n_experts / 2], ns->stay_frac, (long long)ns->capacity[2]);
    }
    fprintf(f, "</table>\n<h2>Files</h2>\n<ul id=\"files\">\n");
    for (int i = 0; mp_an_report_files[i]; i++)
        fprintf(f, "<li><a href=\"%s\">%s</a></li>\n", mp_an_report_files[i], mp_an_report_files[i]);
    fprintf(f, "</ul>\n<p>Column definitions: docs/analyzer.md.</p>\n</body></html>\n");
    return mp_an_close_out(&out, err);
}
