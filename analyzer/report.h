/* analyzer/report.h — the report files of `moeplan analyze` (columns in docs/analyzer.md):
 * CSV tables (report_csv.c), the JSON summary (report_json.c, schemas/report.schema.json), SVG
 * charts (report_svg.c over svg.h) and the self-contained HTML page (report_html.c).
 * Every writer writes into an existing directory (the temporary one of analyze.c) and fails with
 * the file's path on any I/O error.
 */
#ifndef MP_ANALYZER_REPORT_H
#define MP_ANALYZER_REPORT_H

#include <stdio.h>

#include "analyzer/analyze.h"
#include "analyzer/simulation.h"
#include "base/atomic_file.h"

typedef struct mp_an_report {
    const mp_an_options *opt;
    const mp_an_input *in;
    const mp_an_stats *st;
    const mp_an_summary *sum;
    const mp_an_request_dist *req;
    int64_t n_train_requests;
    const mp_an_simulation *sim; /* --simulation, NULL without */
    const mp_trace_tier_totals *tier; /* the traces' adaptive tier counts (mp_trace_check_tier) */
    const mp_trace_served_node *served; /* (n_nodes) routes by the path that served them, summed over
                                         * the traces (mp_trace_check_served) */
} mp_an_report;

mp_status mp_an_write_csv(const mp_an_report *r, const char *dir, mp_error *err);
mp_status mp_an_write_json(const mp_an_report *r, const char *dir, mp_error *err);
mp_status mp_an_write_svg(const mp_an_report *r, const char *dir, mp_error *err);
mp_status mp_an_write_html(const mp_an_report *r, const char *dir, mp_error *err);

/* Shared by the writers: create dir/name (in the fresh temporary report directory) as a stream
 * whose writes are checked (base/atomic_file.h); close flushes and fsyncs it, reporting the
 * first failed write with its offset and errno; abort removes it. */
typedef struct mp_an_out {
    mp_outfile file;
    FILE *f;
} mp_an_out;
FILE *mp_an_open_out(mp_an_out *o, const char *dir, const char *name, mp_error *err);
mp_status mp_an_close_out(mp_an_out *o, mp_error *err);
void mp_an_abort_out(mp_an_out *o);

/* Every file a report directory holds (NULL-terminated); --force replaces only a directory
 * made of these. */
extern const char *const mp_an_report_files[];

/* With --simulation (report_sim.c): simulation.csv and simulation.svg, the predicted tok/s of
 * every policy at every budget (held-out where the simulation has it), the chart also embedded in
 * report.html. mp_an_simulation_files lists them (NULL-terminated): a --force may replace them. */
extern const char *const mp_an_simulation_files[];
mp_status mp_an_write_simulation(const mp_an_report *r, const char *dir, mp_error *err);
void mp_an_sim_chart(const mp_an_report *r, FILE *f);
/* At budget index b: the fastest placement (all-gpu and belady left out: one ignores the budget,
 * the other is a bound, not a placement), the fastest whole-layer one (first-n-cpu, last-n-cpu,
 * best-layers: what llama.cpp's -ot expresses), and the baselines; -1 where none ran. */
typedef struct mp_an_sim_verdict {
    int best, whole_layer, all_cpu, all_gpu; /* policy indices */
} mp_an_sim_verdict;
void mp_an_sim_verdict_at(const mp_an_simulation *s, int b, mp_an_sim_verdict *v);
/* The smallest budget (index) whose best placement is within 5 % of the largest budget's best;
 * -1 if no placement ran. */
int mp_an_sim_enough_budget(const mp_an_simulation *s);

/* The charts, each written to its own .svg file and embedded in report.html: heat map, coverage,
 * rank threshold, held-out, locality, weight reuse, drift, requests. */
#define MP_AN_N_CHARTS 8
extern const char *const mp_an_chart_files[MP_AN_N_CHARTS];
extern const char *const mp_an_chart_ids[MP_AN_N_CHARTS];
mp_status mp_an_svg_chart(const mp_an_report *r, int which, FILE *f, mp_error *err);

/* The global greedy budget under uniform routing (each row's experts drawn uniformly): a
 * polyline of n_nodes + 1 points, x in the budget's unit (bytes when sum->by_bytes, else
 * experts), y the share of routes served. The caller frees x and y; -1 when out of memory. */
int mp_an_uniform_coverage(const mp_an_report *r, double **x, double **y);

/* The representative nodes of the rank-threshold chart: first, quarter, middle, three quarters,
 * last (deduplicated). Returns how many (<= 5). */
int mp_an_representative_nodes(int32_t n_nodes, int32_t out[5]);

#endif
