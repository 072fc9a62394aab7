/* runtime/placement_parse.c — the text inputs of placement: byte sizes (--gpu-budget), placement
 * specs (--placement) and placement files (--placement-file). Every parser reads the whole string
 * strictly (no trailing garbage, no silent clamping) and names the place of the first error. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "runtime/placement.h"

const char mp_placement_flags_help[] =
    "      --placement MODE   expert placement: gpu, cpu, layers:N (experts of the\n"
    "                         first N layers on the CPU), layers-last:N, fill (as many as\n"
    "                         --gpu-budget allows, spread over layers, lowest ids first;\n"
    "                         the GPU executor's default, under the device's free memory)\n"
    "      --n-cpu-moe N      llama.cpp's spelling of --placement layers:N\n"
    "      --cpu-moe          llama.cpp's spelling of --placement cpu\n"
    "      --placement-file F per-layer resident experts, lines 'LAYER: E,E,A-B' (docs/placement.md)\n"
    "      --profile P.strp   STRP v1 profile: its resident set (fewer when --gpu-budget does not hold it)\n"
    "      --gpu-budget SIZE  all GPU memory the runtime may use (16GiB, 12GB, 8000MiB, bytes)\n"
    "      --executor E       auto (default: the GPU executor when a CUDA device is usable), gpu,\n"
    "                         or cpu (the CPU forward pass; a placement is only checked, reported)\n"
    "      --costs FILE       this model's cost file (moeplan calibrate): the GPU executor decides\n"
    "                         far routes by it (decode steps reading cold experts over the bus;\n"
    "                         none without it) and prices prefill copies as plan does\n"
    "      --adaptive POLICY  an adaptive tier of GPU expert slots besides the placement, filled\n"
    "                         while running: off, lru, lfu, decayed-lfu, window-lfu, or cost\n"
    "                         (the default with --adaptive-slots: admits an expert only when the\n"
    "                         routes it is expected to serve pay for its copy; needs --costs)\n"
    "      --adaptive-slots N the tier's size: N expert slots, or P% of the budget's room for\n"
    "                         experts, at least one (taken before the placement; default 10%\n"
    "                         with a budget)\n"
    "      --adaptive-inflight N  tier copies in flight at once (default 2 × top-k)\n";

typedef struct unit {
    const char *name;
    uint64_t mult;
} unit;

static const unit units[] = {
    {"", 1},
    {"b", 1},
    {"kb", 1000ull},
    {"mb", 1000000ull},
    {"gb", 1000000000ull},
    {"tb", 1000000000000ull},
    {"kib", 1ull << 10},
    {"mib", 1ull << 20},
    {"gib", 1ull << 30},
    {"tib", 1ull << 40},
};

mp_status mp_parse_bytes(const char *text, uint64_t *out, mp_error *err)
{
    static const char *expect = "expected a positive size such as 16GiB, 12GB, 8000MiB or a byte "
                                "count (units B, KB, MB, GB, TB, KiB, MiB, GiB, TiB)";
    const char *p = text;
    if (!p || *p < '0' || *p > '9')
        return mp_fail(err, MP_ERR_ARG, "size '%s': %s", text ? text : "", expect);
    unsigned __int128 ip = 0, frac = 0, frac_den = 1;
    const unsigned __int128 cap = (unsigned __int128)1 << 64;
    for (; *p >= '0' && *p <= '9'; p++) {
        ip = ip * 10 + (unsigned)(*p - '0');
        if (ip >= cap)
            return mp_fail(err, MP_ERR_ARG, "size '%s': larger than 2^64 bytes", text);
    }
    bool has_frac = false;
    if (*p == '.') {
        p++;
        if (*p < '0' || *p > '9')
            return mp_fail(err, MP_ERR_ARG, "size '%s': %s", text, expect);
        for (; *p >= '0' && *p <= '9'; p++) {
            if (frac_den < (unsigned __int128)1000000000000000000ull) { /* 18 digits are plenty */
                frac = frac * 10 + (unsigned)(*p - '0');
                frac_den *= 10;
            }
        }
        has_frac = true;
    }
    const unit *u = NULL;
    for (size_t i = 0; i < sizeof units / sizeof units[0]; i++)
        if (!strcasecmp(p, units[i].name))
            u = &units[i];
    if (!u)
        return mp_fail(err, MP_ERR_ARG, "size '%s': unknown unit '%s': %s", text, p, expect);
    if (has_frac && u->mult == 1)
        return mp_fail(err, MP_ERR_ARG, "size '%s': a fraction of a byte; %s", text, expect);
    const unsigned __int128 v = ip * u->mult + frac * u->mult / frac_den;
    if (v >= cap)
        return mp_fail(err, MP_ERR_ARG, "size '%s': larger than 2^64 bytes", text);
    if (v == 0)
        return mp_fail(err, MP_ERR_ARG, "size '%s': %s", text, expect);
    *out = (uint64_t)v;
    return MP_OK;
}

static bool parse_count(const char *s, int64_t max, int64_t *out)
{
    if (!*s)
        return false;
    int64_t v = 0;
    for (; *s; s++) {
        if (*s < '0' || *s > '9')
            return false;
        v = v * 10 + (*s - '0');
        if (v > max)
            return false;
    }
    *out = v;
    return true;
}

mp_status mp_placement_spec_parse(const char *text, mp_placement_mode *mode, int64_t *n,
                                  mp_error *err)
{
    *n = 0;
    if (!strcmp(text, "gpu")) {
        *mode = MP_PLACEMENT_GPU;
    } else if (!strcmp(text, "cpu")) {
        *mode = MP_PLACEMENT_CPU;
    } else if (!strcmp(text, "fill")) {
        *mode = MP_PLACEMENT_FILL;
    } else if (!strncmp(text, "layers:", 7) && parse_count(text + 7, 65536, n)) {
        *mode = MP_PLACEMENT_LAYERS_FIRST;
    } else if (!strncmp(text, "layers-last:", 12) && parse_count(text + 12, 65536, n)) {
        *mode = MP_PLACEMENT_LAYERS_LAST;
    } else {
        return mp_fail(err, MP_ERR_ARG, "--placement '%s': expected gpu, cpu, layers:N, "
                       "layers-last:N or fill (N a layer count, 0..65536)", text);
    }
    return MP_OK;
}

void mp_format_bytes(uint64_t bytes, char *buf, size_t cap)
{
    static const char *names[] = {"KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
    if (bytes < 1024) {
        snprintf(buf, cap, "%" PRIu64 " B", bytes);
        return;
    }
    double v = (double)bytes / 1024.0;
    int i = 0;
    while (v >= 1024.0 && i < 5) {
        v /= 1024.0;
        i++;
    }
    snprintf(buf, cap, "%.2f %s", v, names[i]);
}

/* ---- placement files ---------------------------------------------------------------------- */

typedef struct line_cursor {
    const char *p, *end;
} line_cursor;

static void skip_ws(line_cursor *c)
{
    while (c->p < c->end && (*c->p == ' ' || *c->p == '\t'))
        c->p++;
}

/* A decimal number; false if none or larger than max. */
static bool read_num(line_cursor *c, int64_t max, int64_t *out)
{
    if (c->p >= c->end || *c->p < '0' || *c->p > '9')
        return false;
    int64_t v = 0;
    while (c->p < c->end && *c->p >= '0' && *c->p <= '9') {
        v = v * 10 + (*c->p - '0');
        if (v > max)
            return false;
        c->p++;
    }
    *out = v;
    return true;
}

static bool word_is(const line_cursor *c, const char *w)
{
    const size_t n = strlen(w);
    return (size_t)(c->end - c->p) == n && !memcmp(c->p, w, n);
}


/* One line (comments and surrounding blanks already cut): "L: list". */
static mp_status parse_line(line_cursor *c, const char *name, int64_t line, int64_t n_layer,
                            int64_t n_expert, uint64_t *bits, int64_t words, int64_t *first_line,
                            mp_error *err)
{
    int64_t L = 0;
    if (!read_num(c, INT64_C(1) << 40, &L))
        return mp_fail(err, MP_ERR_FORMAT, "%s:%" PRId64 ": expected 'LAYER: EXPERTS' (e.g. "
                       "'0: 1,5,8-11'), found '%.*s'", name, line, (int)(c->end - c->p), c->p);
    if (L >= n_layer)
        return mp_fail(err, MP_ERR_FORMAT, "%s:%" PRId64 ": layer %" PRId64 " out of range: "
                       "the model has layers 0..%" PRId64, name, line, L, n_layer - 1);
    if (first_line[L])
        return mp_fail(err, MP_ERR_FORMAT, "%s:%" PRId64 ": layer %" PRId64 " listed twice "
                       "(first at line %" PRId64 ")", name, line, L, first_line[L]);
    first_line[L] = line;
    skip_ws(c);
    if (c->p >= c->end || *c->p != ':')
        return mp_fail(err, MP_ERR_FORMAT, "%s:%" PRId64 ": expected ':' after layer %" PRId64,
                       name, line, L);
    c->p++;
    skip_ws(c);
    uint64_t *lb = bits + L * words;
    if (c->p == c->end || word_is(c, "none"))
        return MP_OK;
    if (word_is(c, "all")) {
        for (int64_t e = 0; e < n_expert; e++)
            mp_bit_put(lb, e, true);
        return MP_OK;
    }
    for (;;) {
        int64_t a = 0, b = 0;
        skip_ws(c);
        if (!read_num(c, INT64_C(1) << 40, &a))
            return mp_fail(err, MP_ERR_FORMAT, "%s:%" PRId64 ": layer %" PRId64 ": expected an "
                           "expert id, a range A-B, 'all' or 'none', found '%.*s'", name, line, L,
                           (int)(c->end - c->p), c->p);
        b = a;
        skip_ws(c);
        if (c->p < c->end && *c->p == '-') {
            c->p++;
            skip_ws(c);
            if (!read_num(c, INT64_C(1) << 40, &b) || b < a)
                return mp_fail(err, MP_ERR_FORMAT, "%s:%" PRId64 ": layer %" PRId64 ": expected "
                               "a range A-B with A <= B after %" PRId64 "-", name, line, L, a);
            skip_ws(c);
        }
        if (b >= n_expert)
            return mp_fail(err, MP_ERR_FORMAT, "%s:%" PRId64 ": layer %" PRId64 ": expert %"
                           PRId64 " out of range: the model has experts 0..%" PRId64, name, line,
                           L, b, n_expert - 1);
        for (int64_t e = a; e <= b; e++) {
            if (mp_bit_get(lb, e))
                return mp_fail(err, MP_ERR_FORMAT, "%s:%" PRId64 ": layer %" PRId64 ": expert %"
                               PRId64 " listed twice", name, line, L, e);
            mp_bit_put(lb, e, true);
        }
        if (c->p == c->end)
            return MP_OK;
        if (*c->p != ',')
            return mp_fail(err, MP_ERR_FORMAT, "%s:%" PRId64 ": layer %" PRId64 ": expected ',' "
                           "or the end of the line, found '%.*s'", name, line, L,
                           (int)(c->end - c->p), c->p);
        c->p++;
    }
}

mp_status mp_placement_file_parse(const char *text, size_t len, const char *name, int64_t n_layer,
                                  int64_t n_expert, uint64_t *bits, mp_error *err)
{
    const int64_t words = (n_expert + 63) / 64;
    int64_t *first_line = calloc((size_t)n_layer, sizeof *first_line); /* 0: not seen yet */
    if (!first_line)
        return mp_fail(err, MP_ERR_NOMEM, "%s: out of memory", name);
    mp_status st = MP_OK;
    const char *p = text, *end = text + len;
    int64_t line = 0;
    while (p < end && st == MP_OK) {
        line++;
        const char *eol = memchr(p, '\n', (size_t)(end - p));
        if (!eol)
            eol = end;
        line_cursor c = {p, eol};
        const char *hash = memchr(p, '#', (size_t)(eol - p));
        if (hash)
            c.end = hash;
        if (memchr(p, '\0', (size_t)(c.end - p))) {
            st = mp_fail(err, MP_ERR_FORMAT, "%s:%" PRId64 ": a NUL byte: expected text", name,
                         line);
            break;
        }
        while (c.end > c.p && (c.end[-1] == ' ' || c.end[-1] == '\t' || c.end[-1] == '\r'))
            c.end--;
        skip_ws(&c);
        if (c.p < c.end)
            st = parse_line(&c, name, line, n_layer, n_expert, bits, words, first_line, err);
        p = eol + 1;
    }
    for (int64_t L = 0; st == MP_OK && L < n_layer; L++)
        if (!first_line[L])
            st = mp_fail(err, MP_ERR_FORMAT, "%s: layer %" PRId64 " is missing: every layer "
                         "0..%" PRId64 " needs a line 'LAYER: EXPERTS' ('none' for no expert)",
                         name, L, n_layer - 1);
    free(first_line);
    return st;
}

mp_status mp_executor_parse(const char *text, mp_executor_kind *out, mp_error *err)
{
    if (!strcmp(text, "auto"))
        *out = MP_EXECUTOR_AUTO;
    else if (!strcmp(text, "cpu"))
        *out = MP_EXECUTOR_CPU;
    else if (!strcmp(text, "gpu"))
        *out = MP_EXECUTOR_GPU;
    else
        return mp_fail(err, MP_ERR_ARG, "--executor: '%s' is not auto, cpu or gpu", text);
    return MP_OK;
}

const char *mp_executor_name(mp_executor_kind k)
{
    return k == MP_EXECUTOR_GPU ? "gpu" : k == MP_EXECUTOR_CPU ? "cpu" : "auto";
}
