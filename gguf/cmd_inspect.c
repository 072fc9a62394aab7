/* gguf/cmd_inspect.c — `moeplan inspect MODEL [--tensors] [--json]`.
 *
 * Prints a GGUF file's header facts, its metadata (arrays abbreviated), optionally every tensor,
 * and for MoE models the bytes one expert occupies per layer, from the stacked expert tensors
 * blk.N.ffn_{gate,up,down}_exps.weight (ne = [cols, rows, n_expert]; one expert is the
 * contiguous slice nbytes / ne[2] of each) or, in files that store each expert as its own tensor,
 * blk.N.ffn_{gate,up,down}.E.weight (gguf/gguf_experts.h reads both). Everything is computed and checked before anything
 * is printed, so a bad file yields one error line and exit 1, never a half report.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/args.h"
#include "gguf/commands.h"
#include "gguf/gguf_experts.h"
#include "kernels/quant.h"
#include "gguf/gguf.h"

#define TEXT_ARRAY_ELEMS 8  /* metadata arrays show this many elements in text output */
#define JSON_ARRAY_ELEMS 16 /* ... and in JSON ("head") */

enum { PART_GATE = MP_GGUF_EXPERT_GATE, PART_UP = MP_GGUF_EXPERT_UP, PART_DOWN = MP_GGUF_EXPERT_DOWN,
       N_PARTS = MP_GGUF_EXPERT_KINDS };

typedef struct moe_layer {
    int64_t layer;
    int64_t n_expert;
    uint64_t part_bytes[N_PARTS]; /* one expert's slice of gate, up, down */
    uint64_t bytes_per_expert;    /* sum of part_bytes */
    uint64_t layer_bytes;         /* all experts of the layer: n_expert × bytes_per_expert */
    bool split;                   /* one tensor per expert (blk.N.ffn_gate.E.weight) */
    bool fused;                   /* gate and up in one tensor (blk.N.ffn_gate_up_exps.weight) */
} moe_layer;

typedef struct moe_table {
    moe_layer *layers; /* (n_layers), ascending layer */
    int64_t n_layers;
    uint64_t expert_bytes, tensor_bytes;
} moe_table;

/* An expert tensor's layer, kind and expert (-1: merged), and the file position for messages. */
typedef struct expert_name {
    int64_t layer, expert;
    int kind;
    const mp_gguf_tensor *t;
} expert_name;

static int name_cmp(const void *a, const void *b)
{
    const expert_name *x = a, *y = b;
    if (x->layer != y->layer)
        return x->layer < y->layer ? -1 : 1;
    if (x->kind != y->kind)
        return x->kind - y->kind;
    return x->expert < y->expert ? -1 : x->expert > y->expert;
}

/* One layer's table row from its expert tensors names[0 .. n) (sorted by kind, then expert). */
static mp_status layer_row(const mp_gguf *g, const expert_name *names, int64_t n, moe_layer *L, mp_error *err)
{
    memset(L, 0, sizeof *L);
    L->layer = names[0].layer;
    for (int k = 0; k < N_PARTS; k++) {
        mp_gguf_experts x;
        mp_status st = mp_gguf_layer_experts(g, L->layer, k, 0, &x, err);
        if (st)
            return st;
        if (!x.present)
            return mp_fail(err, MP_ERR_FORMAT, "file %s: layer %lld has expert tensors but no "
                           "blk.%lld.ffn_%s_exps.weight (nor blk.%lld.ffn_%s.0.weight)", mp_gguf_path(g),
                           (long long)L->layer, (long long)L->layer, mp_gguf_expert_kind_name(k),
                           (long long)L->layer, mp_gguf_expert_kind_name(k));
        if (x.merged && x.merged->n_dims != 3)
            return mp_fail(err, MP_ERR_FORMAT, "file %s: offset %llu: tensor '%.*s': expected 3 dimensions (cols, "
                           "rows, experts), found %u", mp_gguf_path(g), (unsigned long long)x.merged->file_offset,
                           (int)x.merged->name.len, x.merged->name.ptr, x.merged->n_dims);
        /* a split kind's tensors: experts 0 .. n_expert - 1, nothing past a gap, no merged one beside */
        for (int64_t i = 0; i < n; i++) {
            const expert_name *e = &names[i];
            if (e->kind != k || e->expert < 0)
                continue;
            if (!x.split || e->expert >= x.n_expert)
                return mp_fail(err, MP_ERR_FORMAT, "file %s: offset %llu: tensor '%.*s': %s", mp_gguf_path(g),
                               (unsigned long long)e->t->file_offset, (int)e->t->name.len, e->t->name.ptr,
                               x.split ? "an expert past a missing one (the layer's experts are numbered from 0 "
                                         "without gaps)"
                                       : "one expert's tensor beside the layer's merged tensor of that kind");
        }
        if (L->n_expert && x.n_expert != L->n_expert) {
            const mp_gguf_tensor *t = x.merged ? x.merged : mp_gguf_split_expert(g, L->layer, k, 0);
            return mp_fail(err, MP_ERR_FORMAT, "file %s: offset %llu: tensor '%.*s': %lld experts, but the layer's "
                           "other expert tensors have %lld", mp_gguf_path(g), (unsigned long long)t->file_offset,
                           (int)t->name.len, t->name.ptr, (long long)x.n_expert, (long long)L->n_expert);
        }
        L->n_expert = x.n_expert;
        L->split |= x.split;
        L->fused |= x.fused;
        L->part_bytes[k] = x.expert_bytes;
        L->bytes_per_expert += x.expert_bytes;
        L->layer_bytes += x.expert_bytes * (uint64_t)x.n_expert;
    }
    return MP_OK;
}

static mp_status build_moe_table(const mp_gguf *g, moe_table *mt, mp_error *err)
{
    memset(mt, 0, sizeof *mt);
    int64_t n = mp_gguf_n_tensors(g), n_names = 0;
    expert_name *names = malloc((size_t)(n ? n : 1) * sizeof *names);
    mt->layers = malloc((size_t)(n ? n : 1) * sizeof *mt->layers);
    if (!names || !mt->layers) {
        free(names);
        free(mt->layers);
        mt->layers = NULL;
        return mp_fail(err, MP_ERR_NOMEM, "out of memory");
    }
    for (int64_t i = 0; i < n; i++) {
        const mp_gguf_tensor *t = mp_gguf_tensor_at(g, i);
        mt->tensor_bytes += t->nbytes;
        expert_name e = {.t = t};
        if (mp_gguf_expert_name(t->name, &e.layer, &e.kind, &e.expert))
            names[n_names++] = e;
    }
    qsort(names, (size_t)n_names, sizeof *names, name_cmp);
    mp_status st = MP_OK;
    for (int64_t i = 0; i < n_names && !st;) {
        int64_t j = i;
        while (j < n_names && names[j].layer == names[i].layer)
            j++;
        moe_layer *L = &mt->layers[mt->n_layers++];
        st = layer_row(g, names + i, j - i, L, err);
        mt->expert_bytes += L->layer_bytes;
        i = j;
    }
    free(names);
    if (st) {
        free(mt->layers);
        mt->layers = NULL;
    }
    return st;
}

static void shape_text(const mp_gguf_tensor *t, char *buf, size_t cap)
{
    size_t len = 0;
    buf[0] = 0;
    for (uint32_t d = 0; d < t->n_dims && len < cap; d++)
        len += (size_t)snprintf(buf + len, cap - len, "%s%lld", d ? ", " : "[", (long long)t->ne[d]);
    if (len < cap)
        snprintf(buf + len, cap - len, "]");
}

/* ---- text ---- */

/* A key or name on one line: control bytes as \xNN, padded to width. */
static void print_escaped(const char *s, uint64_t n, int width)
{
    int shown = 0;
    for (uint64_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c < 0x20 || c == 0x7f)
            shown += printf("\\x%02x", c);
        else {
            putchar(c);
            shown++;
        }
    }
    for (; shown < width; shown++)
        putchar(' ');
}


static void print_text(const mp_gguf *g, const moe_table *mt, bool tensors)
{
    printf("file: %s\nversion: %u\nsize_bytes: %llu\nalignment: %u\ndata_offset: %llu\n"
           "n_kv: %lld\nn_tensors: %lld\n",
           mp_gguf_path(g), mp_gguf_version(g), (unsigned long long)mp_gguf_file_size(g),
           mp_gguf_alignment(g), (unsigned long long)mp_gguf_data_offset(g),
           (long long)mp_gguf_n_kv(g), (long long)mp_gguf_n_tensors(g));
    if (mp_gguf_n_files(g) > 1) /* size_bytes and n_tensors are the set's; alignment, data_offset the first's */
        printf("files: %lld (a model split in files; tensor offsets are within each tensor's own file)\n",
               (long long)mp_gguf_n_files(g));
    printf("\nmetadata:\n");
    char value[1024], type[48];
    for (int64_t i = 0; i < mp_gguf_n_kv(g); i++) {
        mp_str k = mp_gguf_kv_key(g, i);
        mp_gguf_vtype t = mp_gguf_kv_type(g, i);
        mp_gguf_vtype et;
        uint64_t n;
        if (mp_gguf_kv_arr_info(g, i, &et, &n))
            snprintf(type, sizeof type, "%s[%llu]", mp_gguf_vtype_name(et), (unsigned long long)n);
        else
            snprintf(type, sizeof type, "%s", mp_gguf_vtype_name(t));
        mp_gguf_kv_format(g, i, value, sizeof value, TEXT_ARRAY_ELEMS);
        printf("  ");
        print_escaped(k.ptr, k.len, 40);
        printf(" %-16s %s\n", type, value);
    }
    if (tensors) {
        printf("\ntensors:\n  %-40s %-5s %-22s %14s %14s\n", "name", "type", "shape", "bytes",
               "offset");
        for (int64_t i = 0; i < mp_gguf_n_tensors(g); i++) {
            const mp_gguf_tensor *t = mp_gguf_tensor_at(g, i);
            char shape[96];
            shape_text(t, shape, sizeof shape);
            printf("  ");
            print_escaped(t->name.ptr, t->name.len, 40);
            printf(" %-5s %-22s %14llu %14llu\n", mp_type_name(t->type), shape,
                   (unsigned long long)t->nbytes,
                   (unsigned long long)t->file_offset);
        }
    }
    if (mt->n_layers) {
        printf("\nexperts (blk.N.ffn_{gate,up,down}_exps.weight; one expert = nbytes / ne[2]; a layer marked *\n"
               "stores each expert as its own tensor, blk.N.ffn_{gate,up,down}.E.weight; one marked + its gate\n"
               "and up in one tensor, blk.N.ffn_gate_up_exps.weight, each expert's gate rows then its up rows):\n");
        printf("  %5s %7s %12s %12s %12s %16s %16s\n", "layer", "experts", "gate_bytes",
               "up_bytes", "down_bytes", "bytes_per_expert", "layer_bytes");
        for (int64_t i = 0; i < mt->n_layers; i++) {
            const moe_layer *L = &mt->layers[i];
            printf("  %5lld%c%7lld %12llu %12llu %12llu %16llu %16llu\n", (long long)L->layer,
                   L->split ? '*' : L->fused ? '+' : ' ',
                   (long long)L->n_expert, (unsigned long long)L->part_bytes[PART_GATE],
                   (unsigned long long)L->part_bytes[PART_UP],
                   (unsigned long long)L->part_bytes[PART_DOWN],
                   (unsigned long long)L->bytes_per_expert, (unsigned long long)L->layer_bytes);
        }
    }
    printf("\ntotals:\n  moe_layers: %lld\n  expert_bytes: %llu\n  non_expert_bytes: %llu\n"
           "  tensor_bytes: %llu\n",
           (long long)mt->n_layers, (unsigned long long)mt->expert_bytes,
           (unsigned long long)(mt->tensor_bytes - mt->expert_bytes),
           (unsigned long long)mt->tensor_bytes);
}

/* ---- JSON ---- */

/* Length of a valid UTF-8 sequence at p (max n bytes), 0 if invalid. */
static int utf8_len(const unsigned char *p, uint64_t n)
{
    int len = p[0] < 0x80 ? 1 : (p[0] >> 5) == 6 ? 2 : (p[0] >> 4) == 14 ? 3 : (p[0] >> 3) == 30 ? 4 : 0;
    if (len == 0 || (uint64_t)len > n)
        return 0;
    for (int i = 1; i < len; i++)
        if ((p[i] & 0xc0) != 0x80)
            return 0;
    if ((len == 2 && p[0] < 0xc2) || (len == 3 && p[0] == 0xe0 && p[1] < 0xa0) ||
        (len == 3 && p[0] == 0xed && p[1] >= 0xa0) || (len == 4 && p[0] == 0xf0 && p[1] < 0x90) ||
        (len == 4 && (p[0] > 0xf4 || (p[0] == 0xf4 && p[1] >= 0x90))))
        return 0; /* overlong, surrogate or beyond U+10FFFF */
    return len;
}

/* A JSON string; bytes that are not valid UTF-8 become U+FFFD so that the output stays JSON. */
static void json_str(const char *s, uint64_t n)
{
    const unsigned char *p = (const unsigned char *)s;
    putchar('"');
    for (uint64_t i = 0; i < n;) {
        unsigned char c = p[i];
        int len = utf8_len(p + i, n - i);
        if (len == 0) {
            fputs("\\ufffd", stdout);
            i++;
        } else if (len > 1) {
            fwrite(p + i, 1, (size_t)len, stdout);
            i += (uint64_t)len;
        } else {
            if (c == '"' || c == '\\')
                printf("\\%c", c);
            else if (c == '\n')
                fputs("\\n", stdout);
            else if (c < 0x20 || c == 0x7f)
                printf("\\u%04x", c);
            else
                putchar(c);
            i++;
        }
    }
    putchar('"');
}

static void json_double(double v, bool is_f32)
{
    if (v != v || v - v != 0) { /* NaN or infinity: JSON has neither */
        fputs("null", stdout);
        return;
    }
    char buf[48];
    mp_gguf_format_double(v, is_f32, buf, sizeof buf);
    fputs(buf, stdout);
}

/* One element of an array, or a scalar stored under key. */
static void json_number_elem(const mp_gguf *g, const char *key, mp_gguf_vtype t, uint64_t i)
{
    const uint8_t *raw = mp_gguf_arr_data(g, key);
    if (t == MP_GGUF_BOOL) {
        fputs(raw[i] ? "true" : "false", stdout);
        return;
    }
    int64_t iv;
    double dv;
    if (t == MP_GGUF_UINT64) {
        uint64_t u;
        memcpy(&u, raw + i * 8, 8);
        printf("%llu", (unsigned long long)u);
    } else if (t != MP_GGUF_FLOAT32 && t != MP_GGUF_FLOAT64 &&
               mp_gguf_get_arr_i64(g, key, i, &iv, NULL) == MP_OK)
        printf("%lld", (long long)iv);
    else if (mp_gguf_get_arr_f64(g, key, i, &dv, NULL) == MP_OK)
        json_double(dv, t == MP_GGUF_FLOAT32);
    else
        fputs("null", stdout);
}

static void json_value(const mp_gguf *g, int64_t i, const char *key)
{
    mp_gguf_vtype t = mp_gguf_kv_type(g, i);
    mp_str s;
    bool b;
    uint64_t u;
    int64_t iv;
    double dv;
    switch (t) {
    case MP_GGUF_STRING:
        (void)mp_gguf_get_str(g, key, &s, NULL);
        json_str(s.ptr, s.len);
        break;
    case MP_GGUF_BOOL:
        (void)mp_gguf_get_bool(g, key, &b, NULL);
        fputs(b ? "true" : "false", stdout);
        break;
    case MP_GGUF_FLOAT32: case MP_GGUF_FLOAT64:
        (void)mp_gguf_get_f64(g, key, &dv, NULL);
        json_double(dv, t == MP_GGUF_FLOAT32);
        break;
    case MP_GGUF_UINT64:
        (void)mp_gguf_get_u64(g, key, &u, NULL);
        printf("%llu", (unsigned long long)u);
        break;
    case MP_GGUF_ARRAY: {
        mp_gguf_vtype et = MP_GGUF_UINT8;
        uint64_t n = 0;
        (void)mp_gguf_get_arr(g, key, &et, &n, NULL);
        printf("{\"elem_type\": \"%s\", \"n\": %llu, \"head\": [", mp_gguf_vtype_name(et),
               (unsigned long long)n);
        for (uint64_t e = 0; e < n && e < JSON_ARRAY_ELEMS; e++) {
            if (e)
                fputs(", ", stdout);
            if (et == MP_GGUF_STRING) {
                (void)mp_gguf_get_arr_str(g, key, e, &s, NULL);
                json_str(s.ptr, s.len);
            } else
                json_number_elem(g, key, et, e);
        }
        fputs("]}", stdout);
        break;
    }
    default:
        (void)mp_gguf_get_i64(g, key, &iv, NULL);
        printf("%lld", (long long)iv);
    }
}

static void print_json(const mp_gguf *g, const moe_table *mt, bool tensors)
{
    printf("{\n  \"file\": ");
    json_str(mp_gguf_path(g), strlen(mp_gguf_path(g)));
    printf(",\n  \"version\": %u,\n  \"size_bytes\": %llu,\n  \"alignment\": %u,\n"
           "  \"data_offset\": %llu,\n  \"n_kv\": %lld,\n  \"n_tensors\": %lld,\n  \"files\": %lld,\n"
           "  \"metadata\": [",
           mp_gguf_version(g), (unsigned long long)mp_gguf_file_size(g), mp_gguf_alignment(g),
           (unsigned long long)mp_gguf_data_offset(g), (long long)mp_gguf_n_kv(g),
           (long long)mp_gguf_n_tensors(g), (long long)mp_gguf_n_files(g));
    for (int64_t i = 0; i < mp_gguf_n_kv(g); i++) {
        mp_str k = mp_gguf_kv_key(g, i);
        printf("%s\n    {\"key\": ", i ? "," : "");
        json_str(k.ptr, k.len);
        printf(", \"type\": \"%s\", \"value\": ", mp_gguf_vtype_name(mp_gguf_kv_type(g, i)));
        char *key = strndup(k.ptr, k.len);
        /* A key with an embedded NUL cannot be looked up by name; its value is shown as null. */
        if (key && strlen(key) == k.len && mp_gguf_find_key(g, key) == i)
            json_value(g, i, key);
        else
            fputs("null", stdout);
        free(key);
        putchar('}');
    }
    printf("\n  ],\n");
    if (tensors) {
        printf("  \"tensors\": [");
        for (int64_t i = 0; i < mp_gguf_n_tensors(g); i++) {
            const mp_gguf_tensor *t = mp_gguf_tensor_at(g, i);
            char shape[96];
            shape_text(t, shape, sizeof shape);
            printf("%s\n    {\"name\": ", i ? "," : "");
            json_str(t->name.ptr, t->name.len);
            printf(", \"type\": \"%s\", \"shape\": %s, \"bytes\": %llu, \"offset\": %llu}",
                   mp_type_name(t->type), shape, (unsigned long long)t->nbytes,
                   (unsigned long long)t->file_offset);
        }
        printf("\n  ],\n");
    }
    printf("  \"moe_layers\": [");
    for (int64_t i = 0; i < mt->n_layers; i++) {
        const moe_layer *L = &mt->layers[i];
        printf("%s\n    {\"layer\": %lld, \"experts\": %lld, \"gate_bytes\": %llu, "
               "\"up_bytes\": %llu, \"down_bytes\": %llu, \"bytes_per_expert\": %llu, "
               "\"layer_bytes\": %llu, \"one_tensor_per_expert\": %s, \"gate_up_fused\": %s}",
               i ? "," : "", (long long)L->layer, (long long)L->n_expert,
               (unsigned long long)L->part_bytes[PART_GATE],
               (unsigned long long)L->part_bytes[PART_UP],
               (unsigned long long)L->part_bytes[PART_DOWN],
               (unsigned long long)L->bytes_per_expert, (unsigned long long)L->layer_bytes,
               L->split ? "true" : "false", L->fused ? "true" : "false");
    }
    printf("%s],\n  \"expert_bytes\": %llu,\n  \"non_expert_bytes\": %llu,\n"
           "  \"tensor_bytes\": %llu\n}\n",
           mt->n_layers ? "\n  " : "", (unsigned long long)mt->expert_bytes,
           (unsigned long long)(mt->tensor_bytes - mt->expert_bytes),
           (unsigned long long)mt->tensor_bytes);
}

/* ---- entry point ---- */

static void usage(FILE *f)
{
    fprintf(f,
            "usage: moeplan inspect MODEL.gguf [--tensors] [--json]\n\n"
            "Validate a GGUF file and print its header, metadata (arrays abbreviated) and, for\n"
            "MoE models, the bytes of one expert per layer (gate + up + down slices of\n"
            "blk.N.ffn_{gate,up,down}_exps.weight, or blk.N.ffn_{gate,up,down}.E.weight where each\n"
            "expert is its own tensor) with expert and non-expert totals.\n\n"
            "  --tensors   also list every tensor: name, type, shape, bytes, file offset\n"
            "  --json      print one JSON object instead of text\n"
            "  -h, --help  show this help\n\n"
            "Exit status: 0 ok, 1 unreadable or malformed file, 2 usage error.\n");
}

enum { OPT_TENSORS = 256, OPT_JSON };

static const mp_cli_opt inspect_flags[] = {
    {"tensors", 0, false, OPT_TENSORS, NULL},
    {"json", 0, false, OPT_JSON, NULL},
    {"help", 'h', false, 'h', NULL},
    {0},
};

int mp_cmd_inspect(int argc, char **argv)
{
    const char *path = NULL;
    bool tensors = false, json = false;
    mp_cli c;
    mp_cli_init(&c, "inspect", inspect_flags, argc, argv);
    const char *v;
    for (int id; (id = mp_cli_next(&c, &v)) != MP_CLI_END;) {
        switch (id) {
        case MP_CLI_ERROR:
            return mp_cli_usage_error("inspect", c.err.msg);
        case 'h':
            usage(stdout);
            return MP_EXIT_OK;
        case OPT_TENSORS:
            tensors = true;
            break;
        case OPT_JSON:
            json = true;
            break;
        case MP_CLI_POSITIONAL:
            if (path) {
                fprintf(stderr, "moeplan inspect: error: expected one MODEL, got '%s' and '%s'\n", path, v);
                return MP_EXIT_USAGE;
            }
            path = v;
            break;
        }
    }
    if (!path) {
        fprintf(stderr, "moeplan inspect: error: missing MODEL argument (see moeplan inspect --help)\n");
        return 2;
    }
    mp_error err;
    mp_gguf *g = NULL;
    moe_table mt;
    if (mp_gguf_open(path, &g, &err) != MP_OK || build_moe_table(g, &mt, &err) != MP_OK) {
        fprintf(stderr, "moeplan inspect: error: %s\n", err.msg);
        mp_gguf_close(g);
        return 1;
    }
    if (json)
        print_json(g, &mt, tensors);
    else
        print_text(g, &mt, tensors);
    free(mt.layers);
    mp_gguf_close(g);
    if (fflush(stdout) != 0 || ferror(stdout)) {
        fprintf(stderr, "moeplan inspect: error: writing the report to stdout failed\n");
        return 1;
    }
    return 0;
}
