/* collector/import_csv.c — routing CSV: header `seq,pos,layer,e0..e{k-1}[,w0..w{k-1}]`.
 *
 * Mapping (docs/trace-format.md): each seq is one request holding ONE prefill step whose rows are
 * the positions 0..P-1; each layer is a node (node_index = layer = the CSV's layer number) with
 * the routing of all P rows. Rows must come grouped by seq, then by pos (0, 1, 2, ...), and every
 * pos must list the same layers in the same increasing order (the shape of a real prefill dump).
 * The e columns are taken in the router's order (e0 its first choice).
 * Text: RFC 4180 fields (any field may be "quoted", as spreadsheet and pandas QUOTE_ALL exports
 * write them; no value moeplan reads holds a quote, a comma or a line break), CRLF or LF line
 * ends, a UTF-8 byte order mark before the header.
 * A file without w columns (expert ids only) gets weight 1/top_k for every choice, and the
 * import says so (mp_import_note_uniform_weights: config_json and the command's output).
 * Memory: one seq is buffered (P × layers × k), never the whole file.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "collector/import_internal.h"

#define CSV_MAX_K 256
#define CSV_MAX_LAYERS 4096
#define CSV_MAX_SEQ_VALUES ((size_t)1 << 26) /* ids buffered for one seq */

typedef struct csv_state {
    int k;
    bool has_weights;      /* the header has w0..w{k-1}; else every weight is 1/k */
    int64_t seq;           /* current seq, valid if have_seq */
    bool have_seq;
    char seq_text[32];
    int64_t n_pos;         /* positions buffered */
    int64_t layers[CSV_MAX_LAYERS]; /* layer list of pos 0, increasing */
    int n_layers;
    int layer_i;           /* next expected layer index within the current pos */
    int32_t *ids;          /* (n_pos, n_layers, k) as read */
    float *weights;        /* (n_pos, n_layers, k) */
    size_t cap;            /* values */
    int32_t *row_ids;      /* (n_pos, k) scratch for one layer */
    float *row_w;          /* (n_pos, k) */
    size_t row_cap;
    int64_t seq_start_line;
    size_t offset;         /* bytes read up to the start of the current line */
} csv_state;

static bool parse_i64(const char *s, size_t len, int64_t *out)
{
    char buf[32];
    if (len == 0 || len >= sizeof buf)
        return false;
    memcpy(buf, s, len);
    buf[len] = 0;
    char *end;
    errno = 0;
    long long v = strtoll(buf, &end, 10);
    if (errno || *end)
        return false;
    *out = v;
    return true;
}

static bool parse_f32(const char *s, size_t len, float *out)
{
    char buf[64];
    if (len == 0 || len >= sizeof buf)
        return false;
    memcpy(buf, s, len);
    buf[len] = 0;
    char *end;
    errno = 0;
    double v = strtod(buf, &end);
    if (errno || *end || !isfinite(v))
        return false;
    *out = (float)v;
    return true;
}

static mp_status flush_seq(csv_state *st, mp_import_ctx *c, mp_error *err)
{
    if (!st->have_seq || st->n_pos == 0)
        return MP_OK;
    const char *nm = mp_import_name(c);
    char where[64];
    snprintf(where, sizeof where, "seq %s (from line %lld)", st->seq_text,
             (long long)st->seq_start_line);
    if (st->layer_i != 0 && st->layer_i != st->n_layers)
        return mp_fail(err, MP_ERR_FORMAT, "%s: %s: position %lld lists %d of the %d layers", nm,
                       where, (long long)(st->n_pos - 1), st->layer_i, st->n_layers);
    size_t need = (size_t)st->n_pos * (size_t)st->k;
    if (need > st->row_cap) {
        int32_t *a = realloc(st->row_ids, need * sizeof *a);
        if (a)
            st->row_ids = a;
        float *b = realloc(st->row_w, need * sizeof *b);
        if (b)
            st->row_w = b;
        if (!a || !b)
            return mp_fail(err, MP_ERR_NOMEM, "%s: out of memory", nm);
        st->row_cap = need;
    }
    char name[32];
    for (int li = 0; li < st->n_layers; li++) {
        for (int64_t p = 0; p < st->n_pos; p++) {
            size_t src = ((size_t)p * (size_t)st->n_layers + (size_t)li) * (size_t)st->k;
            memcpy(st->row_ids + (size_t)p * (size_t)st->k, st->ids + src, (size_t)st->k * 4);
            memcpy(st->row_w + (size_t)p * (size_t)st->k, st->weights + src, (size_t)st->k * 4);
        }
        snprintf(name, sizeof name, "layer.%lld", (long long)st->layers[li]);
        mp_import_rec r = {.request_key = st->seq, .request_ext = st->seq_text,
                           .node_index = st->layers[li], .node_name = name, .node_type = "moe",
                           .layer = st->layers[li], .n_rows = st->n_pos, .top_k = st->k,
                           .ids = st->row_ids, .weights = st->row_w, .phase = MP_PHASE_PREFILL,
                           .where = where, .offset = st->offset};
        mp_status s = mp_import_emit(c, &r, err);
        if (s)
            return s;
    }
    st->n_pos = 0;
    st->layer_i = 0;
    return MP_OK;
}

/* Split one line into fields (at most max). A field may be quoted: "..." with "" for a quote
 * inside (a comma inside is text); f/fl then give the text between the quotes, with any "" left
 * doubled (no value moeplan reads holds a quote, so its parser refuses such a field). Returns the
 * count, -1 if there are more than max fields, or -2 with *bad_col (1-based) the column of a
 * quoted field that is not closed or has text after its closing quote. */
static int split(const char *line, size_t len, const char **f, size_t *fl, int max, int *bad_col)
{
    int n = 0;
    size_t i = 0;
    for (;;) {
        if (n == max)
            return -1;
        if (i < len && line[i] == '"') {
            const size_t start = ++i;
            for (; i < len; i++)
                if (line[i] == '"') {
                    if (i + 1 < len && line[i + 1] == '"')
                        i++; /* "" inside a quoted field */
                    else
                        break;
                }
            if (i >= len || (i + 1 < len && line[i + 1] != ',')) {
                *bad_col = n + 1;
                return -2;
            }
            f[n] = line + start;
            fl[n] = i - start;
            i++; /* the closing quote */
        } else {
            const size_t start = i;
            while (i < len && line[i] != ',')
                i++;
            f[n] = line + start;
            fl[n] = i - start;
        }
        n++;
        if (i >= len)
            return n;
        i++; /* the comma */
    }
}

/* "line N: column C: a quoted field that is not closed, or text after its closing quote" */
static mp_status bad_quote(mp_import_ctx *c, int64_t line_no, int col, mp_error *err)
{
    return mp_fail(err, MP_ERR_FORMAT, "%s: line %lld: column %d: a quoted field without its "
                   "closing quote, or text after it: expected \"TEXT\" followed by a comma or the "
                   "line's end", mp_import_name(c), (long long)line_no, col);
}

static bool field_is(const char *f, size_t fl, const char *want)
{
    return fl == strlen(want) && !memcmp(f, want, fl);
}

static mp_status parse_header(const char *line, size_t len, csv_state *st, mp_import_ctx *c,
                              mp_error *err)
{
    const char *nm = mp_import_name(c);
    const char *f[3 + 2 * CSV_MAX_K];
    size_t fl[3 + 2 * CSV_MAX_K];
    int bad_col = 0;
    const int n = split(line, len, f, fl, 3 + 2 * CSV_MAX_K, &bad_col);
    if (n == -2)
        return bad_quote(c, 1, bad_col, err);
    if (n < 4 || !field_is(f[0], fl[0], "seq") || !field_is(f[1], fl[1], "pos") ||
        !field_is(f[2], fl[2], "layer"))
        return mp_fail(err, MP_ERR_FORMAT, "%s: line 1: expected the header seq,pos,layer,e0..,"
                       "w0.. (as many w as e, or no w at all; at most %d each)", nm, CSV_MAX_K);
    /* e0, e1, ... then either nothing or w0, w1, ... as many */
    int k = 0;
    char want[16];
    for (; 3 + k < n; k++) {
        snprintf(want, sizeof want, "e%d", k);
        if (!field_is(f[3 + k], fl[3 + k], want))
            break;
    }
    if (k == 0)
        return mp_fail(err, MP_ERR_FORMAT, "%s: line 1: column 4 is '%.*s', expected 'e0'", nm,
                       (int)(fl[3] > 32 ? 32 : fl[3]), f[3]);
    if (k > CSV_MAX_K)
        return mp_fail(err, MP_ERR_FORMAT, "%s: line 1: %d e columns, expected at most %d", nm, k,
                       CSV_MAX_K);
    const int n_w = n - 3 - k;
    if (n_w != 0 && n_w != k)
        return mp_fail(err, MP_ERR_FORMAT, "%s: line 1: %d columns after e0..e%d, expected "
                       "w0..w%d (as many w as e) or none (expert ids only)", nm, n_w, k - 1, k - 1);
    st->k = k;
    st->has_weights = n_w == k;
    for (int i = 0; i < n_w; i++) {
        snprintf(want, sizeof want, "w%d", i);
        if (!field_is(f[3 + k + i], fl[3 + k + i], want))
            return mp_fail(err, MP_ERR_FORMAT, "%s: line 1: column %d is '%.*s', expected '%s'",
                           nm, 4 + k + i, (int)(fl[3 + k + i] > 32 ? 32 : fl[3 + k + i]),
                           f[3 + k + i], want);
    }
    if (!st->has_weights)
        mp_import_note_uniform_weights(c);
    return MP_OK;
}

static mp_status parse_row(const char *line, size_t len, int64_t line_no, csv_state *st,
                           mp_import_ctx *c, mp_error *err)
{
    const char *nm = mp_import_name(c);
    const char *f[3 + 2 * CSV_MAX_K];
    size_t fl[3 + 2 * CSV_MAX_K];
    const int want = 3 + (st->has_weights ? 2 : 1) * st->k;
    int bad_col = 0;
    const int n = split(line, len, f, fl, want, &bad_col);
    if (n == -2)
        return bad_quote(c, line_no, bad_col, err);
    if (n != want)
        return mp_fail(err, MP_ERR_FORMAT, "%s: line %lld: expected %d fields, got %s%d", nm,
                       (long long)line_no, want, n < 0 ? "more than " : "", n < 0 ? want : n);
    int64_t seq, pos, layer;
    static const char *names[3] = {"seq", "pos", "layer"};
    int64_t *vals[3] = {&seq, &pos, &layer};
    for (int i = 0; i < 3; i++)
        if (!parse_i64(f[i], fl[i], vals[i]) || *vals[i] < 0)
            return mp_fail(err, MP_ERR_FORMAT, "%s: line %lld: %s '%.*s' is not a non-negative "
                           "integer", nm, (long long)line_no, names[i], (int)(fl[i] > 32 ? 32 : fl[i]),
                           f[i]);
    if (layer > MP_TRACE_MAX_NODE_INDEX)
        return mp_fail(err, MP_ERR_FORMAT, "%s: line %lld: layer %lld outside [0, %d]", nm,
                       (long long)line_no, (long long)layer, MP_TRACE_MAX_NODE_INDEX);
    mp_status s;
    if (!st->have_seq || seq != st->seq) {
        if ((s = flush_seq(st, c, err)))
            return s;
        if (pos != 0)
            return mp_fail(err, MP_ERR_FORMAT, "%s: line %lld: seq %lld starts at pos %lld, "
                           "expected 0", nm, (long long)line_no, (long long)seq, (long long)pos);
        st->have_seq = true;
        st->seq = seq;
        snprintf(st->seq_text, sizeof st->seq_text, "%lld", (long long)seq);
        st->seq_start_line = line_no;
        st->n_pos = 0;
        st->layer_i = 0;
        st->n_layers = 0;
    }
    /* Where this row belongs: a new pos starts when the layer list of the current one is full
     * (or, for pos 0, when the layer does not increase). */
    bool first_pos = st->n_pos <= 1 && (st->n_pos == 0 || pos == 0);
    if (st->n_pos == 0) {
        st->n_pos = 1;
    }
    if (first_pos && pos == 0) {
        if (st->n_layers > 0 && layer <= st->layers[st->n_layers - 1])
            return mp_fail(err, MP_ERR_FORMAT, "%s: line %lld: seq %lld pos 0: layer %lld after "
                           "layer %lld, expected increasing layers", nm, (long long)line_no,
                           (long long)seq, (long long)layer, (long long)st->layers[st->n_layers - 1]);
        if (st->n_layers == CSV_MAX_LAYERS)
            return mp_fail(err, MP_ERR_LIMIT, "%s: line %lld: more than %d layers", nm,
                           (long long)line_no, CSV_MAX_LAYERS);
        st->layers[st->n_layers++] = layer;
        st->layer_i = st->n_layers;
    } else {
        if (st->layer_i == st->n_layers) { /* the previous pos is complete: a new one begins */
            if (pos != st->n_pos)
                return mp_fail(err, MP_ERR_FORMAT, "%s: line %lld: seq %lld: pos %lld, expected "
                               "%lld", nm, (long long)line_no, (long long)seq, (long long)pos,
                               (long long)st->n_pos);
            st->n_pos++;
            st->layer_i = 0;
        } else if (pos != st->n_pos - 1) {
            return mp_fail(err, MP_ERR_FORMAT, "%s: line %lld: seq %lld: pos %lld before pos %lld "
                           "listed all %d layers", nm, (long long)line_no, (long long)seq,
                           (long long)pos, (long long)(st->n_pos - 1), st->n_layers);
        }
        if (layer != st->layers[st->layer_i])
            return mp_fail(err, MP_ERR_FORMAT, "%s: line %lld: seq %lld pos %lld: layer %lld, "
                           "expected %lld (the layers of pos 0, in order)", nm, (long long)line_no,
                           (long long)seq, (long long)pos, (long long)layer,
                           (long long)st->layers[st->layer_i]);
        st->layer_i++;
    }
    if (st->n_pos > (INT64_C(1) << 24))
        return mp_fail(err, MP_ERR_LIMIT, "%s: line %lld: seq %lld has more than %lld positions",
                       nm, (long long)line_no, (long long)seq, (long long)(INT64_C(1) << 24));
    size_t idx = ((size_t)(st->n_pos - 1) * (size_t)st->n_layers + (size_t)(st->layer_i - 1)) *
                 (size_t)st->k;
    /* While pos 0 is read, n_layers still grows; its rows sit at (layer_i - 1) * k, which is
     * where the final stride puts pos 0 too. */
    if (idx + (size_t)st->k > st->cap) {
        size_t cap = st->cap ? 2 * st->cap : 4096;
        while (cap < idx + (size_t)st->k)
            cap *= 2;
        if (cap > CSV_MAX_SEQ_VALUES)
            return mp_fail(err, MP_ERR_LIMIT, "%s: line %lld: seq %lld holds more than %zu routes",
                           nm, (long long)line_no, (long long)seq, CSV_MAX_SEQ_VALUES);
        int32_t *a = realloc(st->ids, cap * sizeof *a);
        if (a)
            st->ids = a;
        float *b = realloc(st->weights, cap * sizeof *b);
        if (b)
            st->weights = b;
        if (!a || !b)
            return mp_fail(err, MP_ERR_NOMEM, "%s: out of memory", nm);
        st->cap = cap;
    }
    for (int i = 0; i < st->k; i++) {
        int64_t e;
        if (!parse_i64(f[3 + i], fl[3 + i], &e) || e < 0 || e > 65535)
            return mp_fail(err, MP_ERR_FORMAT, "%s: line %lld: e%d '%.*s' is not an expert id in "
                           "[0, 65535]", nm, (long long)line_no, i,
                           (int)(fl[3 + i] > 32 ? 32 : fl[3 + i]), f[3 + i]);
        int64_t limit = mp_import_n_experts_limit(c);
        if (limit > 0 && e >= limit)
            return mp_fail(err, MP_ERR_FORMAT, "%s: line %lld: e%d %lld outside [0, %lld)", nm,
                           (long long)line_no, i, (long long)e, (long long)limit);
        for (int j = 0; j < i; j++)
            if (st->ids[idx + (size_t)j] == e)
                return mp_fail(err, MP_ERR_FORMAT, "%s: line %lld: e%d: expert %lld chosen twice",
                               nm, (long long)line_no, i, (long long)e);
        st->ids[idx + (size_t)i] = (int32_t)e;
        if (!st->has_weights) {
            st->weights[idx + (size_t)i] = 1.0f / (float)st->k;
            continue;
        }
        const char *wf = f[3 + st->k + i];
        size_t wl = fl[3 + st->k + i];
        float *wv = &st->weights[idx + (size_t)i];
        if (!parse_f32(wf, wl, wv))
            return mp_fail(err, MP_ERR_FORMAT, "%s: line %lld: w%d '%.*s' is not a finite number",
                           nm, (long long)line_no, i, (int)(wl > 32 ? 32 : wl), wf);
        if (*wv < 0)
            return mp_fail(err, MP_ERR_FORMAT, "%s: line %lld: w%d %.*s is negative, expected a "
                           "router weight >= 0", nm, (long long)line_no, i,
                           (int)(wl > 32 ? 32 : wl), wf);
    }
    return MP_OK;
}

mp_status mp_import_parse_csv(const char *data, size_t n, mp_import_ctx *c, mp_error *err)
{
    csv_state *st = calloc(1, sizeof *st);
    if (!st)
        return mp_fail(err, MP_ERR_NOMEM, "%s: out of memory", mp_import_name(c));
    mp_status s = MP_OK;
    /* a NUL would end a field early for the number parsers (strtoll stops there): refuse it */
    const char *nul = memchr(data, 0, n);
    if (nul) {
        int64_t line = 1;
        for (const char *p = data; p < nul; p++)
            line += *p == '\n';
        s = mp_fail(err, MP_ERR_FORMAT, "%s: line %lld (offset %zu): NUL byte, expected CSV text",
                    mp_import_name(c), (long long)line, (size_t)(nul - data));
    }
    size_t off = 0;
    int64_t line_no = 0;
    while (off < n && s == MP_OK) {
        const char *line = data + off;
        st->offset = off;
        const char *nl = memchr(line, '\n', n - off);
        size_t len = nl ? (size_t)(nl - line) : n - off;
        off += len + (nl ? 1 : 0);
        line_no++;
        if (len > 0 && line[len - 1] == '\r')
            len--;
        if (line_no == 1) {
            const size_t bom = mp_import_csv_bom(line, len);
            s = parse_header(line + bom, len - bom, st, c, err);
        }
        else if (len > 0)
            s = parse_row(line, len, line_no, st, c, err);
    }
    if (s == MP_OK && line_no == 0)
        s = mp_fail(err, MP_ERR_FORMAT, "%s: empty file, expected the header seq,pos,layer,e0..,"
                    "w0..", mp_import_name(c));
    st->offset = n;
    if (s == MP_OK)
        s = flush_seq(st, c, err);
    free(st->ids);
    free(st->weights);
    free(st->row_ids);
    free(st->row_w);
    free(st);
    return s;
}

size_t mp_import_csv_bom(const char *data, size_t n)
{
    return n >= 3 && !memcmp(data, "\xEF\xBB\xBF", 3) ? 3 : 0;
}

bool mp_import_csv_looks_like(const char *data, size_t n)
{
    const size_t bom = mp_import_csv_bom(data, n);
    data += bom, n -= bom;
    static const char plain[] = "seq,pos,layer", quoted[] = "\"seq\",\"pos\",\"layer\"";
    return (n >= sizeof plain - 1 && !memcmp(data, plain, sizeof plain - 1)) ||
           (n >= sizeof quoted - 1 && !memcmp(data, quoted, sizeof quoted - 1));
}
