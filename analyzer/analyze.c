/* analyzer/analyze.c — the passes of `moeplan analyze` and the atomic output directory.
 *
 * The output directory is built as OUT.tmp.<pid> beside OUT and renamed at the very end; any
 * failure removes the temporary directory, so OUT is never half-written. With --force an existing
 * OUT is moved aside first and removed only after the new one is in place, and only if it holds
 * nothing but report files (check_out_dir, before any work).
 */
#include "analyzer/analyze.h"

#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "analyzer/report.h"
#include "base/input_file.h"

void mp_an_options_init(mp_an_options *o)
{
    memset(o, 0, sizeof *o);
    o->rows = MP_AN_ROWS_ALL;
    o->train_frac = 0.5;
    o->max_problems = 100;
    o->reuse_window = 8;
}

/* ---- the pass: statistics and per-request distributions, fed through the row selector ---- */

typedef struct pass_ctx {
    mp_an_rowsel sel;
    mp_an_stats *stats;
    const bool *train;     /* (n_requests) by merged ord */
    int64_t n_requests;
    const mp_an_input *in;
    /* the request being read */
    /* the request's routes per expert are the stats' counts minus these: no per-route work */
    uint64_t *count_before; /* (n_nodes, max_experts) each node's counts when it began */
    uint64_t *cur;          /* (max_experts) scratch: one node's routes in the request */
    uint64_t *history;     /* (max_experts) scratch: one node's counts before the request */
    uint16_t *order;       /* (max_experts) scratch: experts ranked by history */
    int64_t max_experts;
    int64_t cur_request, cur_rows;
    uint64_t cur_routes;
    FILE *req_csv;      /* req_out's stream, NULL once closed */
    mp_an_out req_out;
    mp_an_request_dist *dist;
} pass_ctx;

static void hist_add(uint32_t *hist, double v)
{
    int b = (int)(v * MP_AN_HIST_BINS);
    hist[b < 0 ? 0 : b >= MP_AN_HIST_BINS ? MP_AN_HIST_BINS - 1 : b]++;
}

/* Close the current request: its own concentration (distinct experts, entropy) and how it
 * compares with the popularity of every request before it (what a profile built from past
 * traffic would have seen): the share of its routes in the history's top half, and the total
 * variation distance between its distribution and the history's. The first request has no
 * history: those two are left empty. One CSV row per request; histograms for the quantiles. */
static mp_status close_request(pass_ctx *c, mp_error *err)
{
    if (c->cur_request < 0 || c->cur_routes == 0)
        return MP_OK;
    const mp_an_stats *s = c->stats;
    double distinct = 0, entropy = 0, tv = 0;
    uint64_t top_half = 0, routes = 0;
    bool has_history = true;
    for (int32_t i = 0; i < s->n_nodes; i++) {
        const int64_t E = s->nodes[i].n_experts;
        uint64_t *before = c->count_before + (size_t)i * (size_t)c->max_experts;
        uint64_t *cnt = c->cur;
        uint64_t n = 0, hist_total = 0;
        for (int64_t e = 0; e < E; e++) {
            cnt[e] = s->acc[i].count[e] - before[e]; /* the stats already hold this request */
            n += cnt[e];
            c->history[e] = before[e];
            hist_total += c->history[e];
            before[e] = s->acc[i].count[e];
        }
        if (n == 0)
            continue;
        int64_t d = 0;
        double h = 0, dist = 0;
        for (int64_t e = 0; e < E; e++) {
            const double p = (double)cnt[e] / (double)n;
            if (cnt[e]) {
                d++;
                h -= p * log2(p);
            }
            if (hist_total)
                dist += fabs(p - (double)c->history[e] / (double)hist_total);
        }
        if (hist_total) {
            mp_popularity_rank(c->history, E, c->order, NULL);
            for (int64_t r = 0; r < E / 2; r++)
                top_half += cnt[c->order[r]];
        } else {
            has_history = false;
        }
        routes += n;
        distinct += (double)d / (double)E / s->n_nodes;
        entropy += (E > 1 ? h / log2((double)E) : 0) / s->n_nodes;
        tv += 0.5 * dist / s->n_nodes;
    }
    const double cover = routes ? (double)top_half / (double)routes : 0;
    const double v[4] = {distinct, entropy, cover, tv};
    for (int m = 0; m < 4; m++) {
        if (m >= 2 && !has_history)
            continue;
        hist_add(c->dist->hist[m], v[m]);
        c->dist->mean[m] += v[m];
        c->dist->n[m]++;
    }
    c->dist->n_requests++;
    /* which trace and request_id this merged ord is */
    int ti = 0;
    while (ti + 1 < c->in->n_traces && c->cur_request >= c->in->meta[ti + 1].request_base)
        ti++;
    const int64_t ord = c->cur_request - c->in->meta[ti].request_base;
    const int64_t rid = mp_trace_reader_requests(c->in->trace[ti])[ord].request_id;
    char tail[64] = ",";
    if (has_history)
        snprintf(tail, sizeof tail, "%.6f,%.6f", cover, tv);
    if (fprintf(c->req_csv, "%lld,%d,%lld,%d,%lld,%llu,%.6f,%.6f,%s\n", (long long)c->cur_request,
                ti, (long long)rid, c->train[c->cur_request] ? 1 : 0, (long long)c->cur_rows,
                (unsigned long long)c->cur_routes, distinct, entropy, tail) < 0)
        return mp_fail(err, MP_ERR_IO, "analyzer: requests.csv: write failed");
    c->cur_routes = 0;
    c->cur_rows = 0;
    return MP_OK;
}

static mp_status to_stats(void *user, const mp_an_record *r, mp_error *err)
{
    pass_ctx *c = user;
    if (r->request_ord != c->cur_request) {
        mp_status st = close_request(c, err);
        if (st != MP_OK)
            return st;
        c->cur_request = r->request_ord;
    }
    const int64_t n = r->n_rows * r->top_k;
    if (r->node == 0)
        c->cur_rows += r->n_rows;
    c->cur_routes += (uint64_t)n;
    return mp_an_stats_add(c->stats, r, err);
}

static mp_status tag_and_select(void *user, const mp_an_record *r, mp_error *err)
{
    pass_ctx *c = user;
    mp_an_record t = *r;
    t.train = c->train[r->request_ord];
    t.segment = mp_an_segment_of(r->request_ord, c->n_requests);
    return mp_an_rowsel_add(&c->sel, &t, err);
}

/* ---- training set ---- */

static mp_status parse_train(const mp_an_options *o, const mp_an_input *in, bool *train,
                             int64_t *n_train, mp_error *err)
{
    *n_train = 0;
    if (!o->train_requests) {
        int64_t n = (int64_t)ceil(o->train_frac * (double)in->n_requests);
        for (int64_t i = 0; i < in->n_requests; i++)
            train[i] = i < n;
        *n_train = n < in->n_requests ? n : in->n_requests;
        return MP_OK;
    }
    const char *p = o->train_requests;
    while (*p) {
        char *end;
        long long a = strtoll(p, &end, 10), ti = 0, rid = a;
        if (end == p)
            goto bad;
        if (*end == ':') {
            ti = a;
            p = end + 1;
            rid = strtoll(p, &end, 10);
            if (end == p)
                goto bad;
        }
        if (ti < 0 || ti >= in->n_traces)
            return mp_fail(err, MP_ERR_ARG, "--train-requests: trace %lld: expected 0..%d "
                           "(the position of a trace on the command line)", ti, in->n_traces - 1);
        const mp_trace_request_info *q = mp_trace_reader_requests(in->trace[ti]);
        int64_t found = -1;
        for (int64_t i = 0; i < in->meta[ti].n_requests; i++)
            if (q[i].request_id == rid)
                found = i;
        if (found < 0)
            return mp_fail(err, MP_ERR_ARG, "--train-requests: request %lld: not in trace %s",
                           rid, in->meta[ti].path);
        bool *t = &train[in->meta[ti].request_base + found];
        *n_train += !*t;
        *t = true;
        p = end;
        if (*p == ',')
            p++;
        else if (*p)
            goto bad;
    }
    return MP_OK;
bad:
    return mp_fail(err, MP_ERR_ARG, "--train-requests: at offset %ld of '%s': expected a list of "
                   "[TRACE:]REQUEST_ID separated by commas",
                   (long)(p - o->train_requests), o->train_requests);
}

/* ---- output directory ---- */

/* Remove a report directory made only of report files (check_out_dir verified that). */
static void remove_tree(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d)
        return;
    struct dirent *e;
    char path[4096];
    while ((e = readdir(d))) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
            continue;
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        unlink(path);
    }
    closedir(d);
    rmdir(dir);
}

static bool is_report_file(const char *name)
{
    for (int i = 0; mp_an_report_files[i]; i++)
        if (!strcmp(name, mp_an_report_files[i]))
            return true;
    for (int i = 0; mp_an_simulation_files[i]; i++)
        if (!strcmp(name, mp_an_simulation_files[i]))
            return true;
    return false;
}

/* The simulation must be of these traces' model: its geometry is theirs. */
static mp_status check_simulation(const mp_an_options *o, const mp_an_simulation *sim,
                                  const mp_an_input *in, mp_error *err)
{
    const int64_t top_k = in->n_nodes ? in->nodes[0].top_k : 0;
    if (sim->moe_layers == in->n_nodes && sim->experts == in->max_experts && sim->top_k == top_k)
        return MP_OK;
    return mp_fail(err, MP_ERR_FORMAT, "simulation %s: $.trace_geometry: %lld MoE layers x %lld "
                   "experts, top-%lld, but the analyzed traces have %d x %lld, top-%lld: expected "
                   "a simulation of these traces' model", o->simulation_path,
                   (long long)sim->moe_layers, (long long)sim->experts, (long long)sim->top_k,
                   in->n_nodes, (long long)in->max_experts, (long long)top_k);
}

/* Before any work: --out names a new directory in a writable one, or (with --force) an existing
 * report directory. Replacing one must lose nothing but an old report, so a directory holding
 * anything else — a subdirectory, a file the analyzer does not write, an input trace (compared
 * by device and inode, whatever its name) — is refused, and so is --out inside nothing but
 * itself. */
static mp_status check_out_dir(const mp_an_options *o, mp_error *err)
{
    const char *out = o->out_dir;
    mp_file_ref in[65];
    const int n_in = o->n_traces < 63 ? o->n_traces : 63;
    for (int i = 0; i < n_in; i++)
        in[i] = (mp_file_ref){o->traces[i], "input trace"};
    in[n_in] = (mp_file_ref){o->model_path, "--model"};
    in[n_in + 1] = (mp_file_ref){o->simulation_path, "--simulation"};
    struct stat sb;
    if (stat(out, &sb) != 0) /* a new directory: its parent must exist and be writable */
        return mp_output_check(out, "--out", false, in, n_in + 2, err);
    if (!S_ISDIR(sb.st_mode))
        return mp_fail(err, MP_ERR_IO, "analyzer: --out %s: exists and is %s, expected a report "
                       "directory", out, S_ISREG(sb.st_mode) ? "a file" : mp_file_kind(sb.st_mode));
    if (!o->force)
        return mp_fail(err, MP_ERR_IO, "analyzer: output %s exists (pass --force to replace it)",
                       out);
    DIR *d = opendir(out);
    if (!d)
        return mp_fail(err, MP_ERR_IO, "analyzer: --out %s: cannot list: %s", out, strerror(errno));
    mp_status st = MP_OK;
    char path[4400];
    for (struct dirent *e; st == MP_OK && (e = readdir(d));) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
            continue;
        snprintf(path, sizeof path, "%s/%s", out, e->d_name);
        struct stat eb;
        const bool regular = lstat(path, &eb) == 0 && S_ISREG(eb.st_mode);
        if (!regular || !is_report_file(e->d_name))
            st = mp_fail(err, MP_ERR_IO, "analyzer: --out %s: holds '%s', which is not a file of "
                         "a moeplan report: refusing to replace the directory (move it away or "
                         "choose another --out)", out, e->d_name);
        for (int i = 0; st == MP_OK && i <= n_in + 1; i++)
            if (in[i].path && mp_same_file(path, in[i].path))
                st = mp_fail(err, MP_ERR_ARG, "analyzer: --out %s: its %s is the %s %s: refusing "
                             "to replace the directory", out, e->d_name, in[i].role, in[i].path);
    }
    closedir(d);
    return st;
}

/* Put tmp in place of out: the old report is moved aside, the new one renamed in, and only then
 * the old one removed (check_out_dir made sure it holds nothing else). */
static mp_status publish(const char *tmp, const char *out, mp_error *err)
{
    char old[4200];
    bool moved = false;
    struct stat sb;
    if (stat(out, &sb) == 0) {
        snprintf(old, sizeof old, "%s.old.%ld", out, (long)getpid());
        if (rename(out, old) != 0)
            return mp_fail(err, MP_ERR_IO, "analyzer: output %s: cannot move aside: %s", out,
                           strerror(errno));
        moved = true;
    }
    if (rename(tmp, out) != 0) {
        int e = errno;
        if (moved)
            rename(old, out);
        return mp_fail(err, MP_ERR_IO, "analyzer: output %s: rename from %s failed: %s", out, tmp,
                       strerror(e));
    }
    if (moved)
        remove_tree(old);
    return MP_OK;
}

/* ---- the whole run ---- */

mp_status mp_an_run(const mp_an_options *o, mp_an_problems *pb, uint64_t *decisions_out,
                    mp_error *err)
{
    mp_an_input in;
    mp_an_stats stats;
    mp_an_summary sum;
    mp_an_request_dist dist;
    bool *train = NULL;
    char tmp[4200] = "";
    pass_ctx c;
    mp_an_simulation *sim = NULL;
    mp_trace_served_node *served = NULL;
    memset(&stats, 0, sizeof stats);
    memset(&sum, 0, sizeof sum);
    memset(&dist, 0, sizeof dist);
    memset(&c, 0, sizeof c);
    if (!o->validate_only && o->out_dir) {
        mp_status cs = check_out_dir(o, err);
        if (cs)
            return cs;
    }
    if (o->simulation_path && !o->validate_only) { /* a bad file is refused before any work */
        if (!(sim = malloc(sizeof *sim)))
            return mp_fail(err, MP_ERR_NOMEM, "analyzer: out of memory");
        mp_status ss = mp_an_simulation_load(o->simulation_path, sim, err);
        if (ss) {
            free(sim);
            return ss;
        }
    }
    mp_status st = mp_an_input_open(&in, o->traces, o->n_traces, o->model_path, pb, err);
    if (st == MP_OK && pb->n == 0 && sim)
        st = check_simulation(o, sim, &in, err);
    in.progress = o->progress;
    mp_progress_set_total(o->progress, mp_an_input_records(&in));
    /* --validate-only: one scan for problems. Otherwise the one pass validates as it reads: its
     * accumulators live in memory only and are dropped at the first problem. */
    if (st == MP_OK && o->validate_only)
        st = mp_an_scan(&in, pb, NULL, NULL, err);
    if ((st == MP_OK || st == MP_ERR_FORMAT) && pb->n > 0) {
        st = mp_fail(err, MP_ERR_FORMAT, "%s", pb->msg[0]);
        goto out;
    }
    if (st != MP_OK || o->validate_only)
        goto out;

    /* the temporary output directory (requests.csv is written during the pass) */
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld", o->out_dir, (long)getpid());
    if (mkdir(tmp, 0777) != 0) {
        st = mp_fail(err, MP_ERR_IO, "analyzer: output %s: cannot create %s: %s", o->out_dir, tmp,
                     strerror(errno));
        tmp[0] = '\0';
        goto out;
    }

    /* the pass: validation, statistics and per-request distributions */
    train = calloc((size_t)in.n_requests + 1, sizeof *train);
    c.count_before = calloc((size_t)in.n_nodes * (size_t)in.max_experts, sizeof *c.count_before);
    c.cur = malloc((size_t)in.max_experts * sizeof *c.cur);
    c.history = malloc((size_t)in.max_experts * sizeof *c.history);
    c.order = malloc((size_t)in.max_experts * sizeof *c.order);
    if (!train || !c.count_before || !c.cur || !c.history || !c.order) {
        st = mp_fail(err, MP_ERR_NOMEM, "analyzer: out of memory");
        goto out;
    }
    int64_t n_train;
    if ((st = parse_train(o, &in, train, &n_train, err)) != MP_OK)
        goto out;
    mp_an_config cfg = {.rows = o->rows, .reuse_window = o->reuse_window};
    if ((st = mp_an_stats_init(&stats, in.nodes, in.n_nodes, &cfg, err)) != MP_OK)
        goto out;
    c.stats = &stats;
    c.train = train;
    c.n_requests = in.n_requests;
    c.in = &in;
    c.dist = &dist;
    c.max_experts = in.max_experts;
    c.cur_request = -1;
    if (!(c.req_csv = mp_an_open_out(&c.req_out, tmp, "requests.csv", err))) {
        st = err->code;
        goto out;
    }
    fprintf(c.req_csv, "request_ord,trace,request_id,train,rows,routes,distinct_frac,"
                       "entropy_norm,history_top_half_share,history_tv_distance\n");
    if ((st = mp_an_rowsel_init(&c.sel, o->rows, in.n_nodes, to_stats, &c, err)) != MP_OK)
        goto out;
    if ((st = mp_an_scan(&in, pb, tag_and_select, &c, err)) == MP_OK &&
        (st = mp_an_rowsel_flush(&c.sel, err)) == MP_OK)
        st = close_request(&c, err);
    mp_an_rowsel_free(&c.sel);
    if (st == MP_ERR_FORMAT && pb->n > 0)
        st = mp_fail(err, MP_ERR_FORMAT, "%s", pb->msg[0]);
    mp_status cst = MP_OK;
    if (st == MP_OK)
        cst = mp_an_close_out(&c.req_out, err);
    else
        mp_an_abort_out(&c.req_out);
    c.req_csv = NULL;
    if (st == MP_OK)
        st = cst;
    if (st != MP_OK)
        goto out;
    mp_an_stats_finish(&stats);
    if (stats.total_routes == 0) {
        st = mp_fail(err, MP_ERR_FORMAT, "trace %s: no routing rows under --rows %s, expected "
                     "at least one", o->traces[0], mp_an_rows_name(o->rows));
        goto out;
    }
    if ((st = mp_an_summarize(&stats, &sum, err)) != MP_OK)
        goto out;
    for (int m = 0; m < 4; m++)
        dist.mean[m] = dist.n[m] ? dist.mean[m] / (double)dist.n[m] : 0;

    /* the checker summed each trace's tier counts and served codes in the scan; the traces share
     * one node table */
    mp_trace_tier_totals tier = {0};
    for (int i = 0; i < in.n_traces; i++)
        if (!mp_trace_tier_sum(&tier, mp_trace_check_tier(in.check[i]))) {
            st = mp_fail(err, MP_ERR_FORMAT, "trace %s: timing: the adaptive tier's counts%s pass 2^63 "
                         "when summed, expected counts a run can reach", in.meta[i].path,
                         i ? " (with the traces before it)" : "");
            goto out;
        }
    if (!(served = calloc((size_t)in.n_nodes, sizeof *served))) {
        st = mp_fail(err, MP_ERR_NOMEM, "analyzer: out of memory");
        goto out;
    }
    for (int i = 0; i < in.n_traces; i++) {
        const mp_trace_served_node *one = mp_trace_check_served(in.check[i]);
        for (int32_t p = 0; p < in.n_nodes; p++) {
            served[p].routes += one[p].routes;
            for (int code = 0; code < MP_SERVED_N; code++)
                served[p].by_path[code] += one[p].by_path[code];
        }
    }
    mp_an_report rep = {.opt = o, .in = &in, .st = &stats, .sum = &sum, .req = &dist,
                        .n_train_requests = n_train, .sim = sim, .tier = &tier, .served = served};
    if ((st = mp_an_write_csv(&rep, tmp, err)) != MP_OK || (st = mp_an_write_svg(&rep, tmp, err)) != MP_OK ||
        (st = mp_an_write_json(&rep, tmp, err)) != MP_OK || (st = mp_an_write_html(&rep, tmp, err)) != MP_OK ||
        (sim && (st = mp_an_write_simulation(&rep, tmp, err)) != MP_OK))
        goto out;
    if ((st = publish(tmp, o->out_dir, err)) != MP_OK)
        goto out;
    tmp[0] = '\0';
    if (decisions_out)
        *decisions_out = stats.total_routes;
out:
    if (c.req_csv)
        mp_an_abort_out(&c.req_out);
    if (tmp[0])
        remove_tree(tmp);
    free(c.count_before), free(c.cur), free(c.history), free(c.order);
    free(served);
    free(train);
    free(sim);
    mp_an_summary_free(&sum);
    if (stats.acc)
        mp_an_stats_free(&stats);
    mp_an_input_close(&in);
    return st;
}
