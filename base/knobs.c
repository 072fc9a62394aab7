/* base/knobs.c — the knob table (see knobs.h) and its reader, printers and JSON.
 *
 * The table is the one place a knob's name, type, allowed values, default and doc are written;
 * docs/config.md holds its `moeplan config --doc` output, and tests/unit/test_knobs.c fails when
 * the two differ. Adding a knob: a field in mp_knobs, an entry here, the code that uses the field,
 * and docs/config.md regenerated.
 */
#include "base/knobs.h"

#include "mp_config.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "base/numparse.h"

static const mp_knob_choice k_isa[] = {{"best", MP_KNOB_ISA_BEST},
                                       {"scalar", MP_KNOB_ISA_SCALAR},
                                       {"avx2", MP_KNOB_ISA_AVX2},
                                       {"avx512", MP_KNOB_ISA_AVX512},
                                       {"amx", MP_KNOB_ISA_AMX}};
static const mp_knob_choice k_host[] = {
    {"pinned", MP_GPU_HOST_PINNED}, {"copy", MP_GPU_HOST_COPY}, {"mapping", MP_GPU_HOST_MAPPING}};

#define FIELD(f) offsetof(mp_knobs, f)
#define N(a) ((int)(sizeof(a) / sizeof((a)[0])))
/* costs: COSTS where the knob changes what calibrate times, TUNED where calibrate also chooses it
 * (mp_knob_def.costs), else 0 */
#define COSTS MP_KNOB_COSTS_TIMED
#define TUNED MP_KNOB_COSTS_TUNED
#define SWITCH(name, f, dflt, costs, doc) {name, MP_KNOB_SWITCH, FIELD(f), 0, 1, 0, {0, 0}, NULL, 0, dflt, costs, doc, NULL}
#define NUMBER(name, f, lo, hi, dflt, costs, doc) \
    {name, MP_KNOB_NUMBER, FIELD(f), lo, hi, 0, {0, 0}, NULL, 0, dflt, costs, doc, NULL}
#define NUMBER_ALSO(name, f, lo, hi, n_also, a0, a1, dflt, costs, doc) \
    {name, MP_KNOB_NUMBER, FIELD(f), lo, hi, n_also, {a0, a1}, NULL, 0, dflt, costs, doc, NULL}
#define CHOICE(name, f, list, dflt, costs, doc) \
    {name, MP_KNOB_CHOICE, FIELD(f), 0, 0, 0, {0, 0}, list, N(list), dflt, costs, doc, NULL}
#define LIST(name, f, pair_name, lo, hi, costs, doc) \
    {name, MP_KNOB_LIST, FIELD(f), lo, hi, 0, {0, 0}, NULL, 0, 0, costs, doc, pair_name}

#define ROWS_MAX 2147483647 /* a row threshold past any batch: that path never runs */
#define LIST_NAME_MAX 15    /* a list pair's NAME: at most this many characters */

static const mp_knob_def k_knobs[] = {
    CHOICE("MP_ISA", isa, k_isa, MP_KNOB_ISA_BEST, COSTS,
           "caps the CPU kernels' SIMD level; best: the best this CPU has (a level it lacks runs its best); amx: "
           "avx512 with the prefill GEMMs of Q4_0, Q5_0, IQ4_NL, MXFP4, Q8_0, Q4_K-Q6_K and IQ4_XS on AMX tiles, "
           "where the CPU has AMX and Linux grants the tile state (a type whose tile GEMM fails its check at start "
           "runs avx512's)"),
    NUMBER("MP_PREFETCH_BYTES", prefetch_bytes, 0, MP_KNOB_PREFETCH_BYTES_MAX, MP_KNOB_PREFETCH_BYTES, TUNED,
           "how far ahead of its loads each CPU dot product (and GEMM of blocks of 32) prefetches its weight row, in bytes, rounded down to "
           "64-byte lines (0: no prefetch instructions); calibrate times a decode step's CPU experts at 0-16384, the "
           "cores alone and, where a GPU is usable, beside the bus (its copy engine reading host memory), and "
           "records the fastest over both (the default unless another is over 5 % faster), which run, bench, collect "
           "and plan given that cost file take where this is unset: the best is the host's (2048 for one thread of "
           "the H200 host's Xeon, none 10-23 % faster on one AMD Zen 5 core; on an H100 host's 16 threads with far "
           "routes, 4096-16384 decoded 4-10 % faster than 2048, and calibrate's 8192 beside the bus ran 1.05x and "
           "1.07x 2048 on an olmoe-like and the Mixtral shape); GEMVs of four rows at once fetch the next four "
           "(docs/kernels.md)"),
    LIST("MP_AMX_ROWS", amx_rows, "TYPE", 1, ROWS_MAX, TUNED,
         "the activation rows from which a type's prefill GEMM runs on AMX tiles at the amx level (below: the "
         "avx512 dots), by type (empty: the kernels' table, the larger of two Intel hosts' one-thread "
         "crossovers: Q4_K/Q5_K/Q8_0 8, Q6_K 12, IQ4_XS/Q5_0 4, Q4_0/IQ4_NL/MXFP4 2); calibrate times the "
         "runtime's expert call at 2-32 rows an expert, tiles against dots, for each type of the model's "
         "experts, and records the rows that lose least (the table's unless another loses over 1 % less): the "
         "crossover is the host's and its thread count's (an Emerald Rapids host's 16 threads kept Q4_K 8 and "
         "Q6_K 12; a Xeon VM's 2 threads chose Q4_K 4-6)"),
    SWITCH("MP_POOL_PIN", pool_pin, 0, COSTS,
           "pins each worker thread of a session's pool to one CPU of the affinity set, one CPU of each physical "
           "core before any core's second hardware thread, when the set has enough CPUs "
           "(on the H200 host: the same median decode speed, half the spread between processes, accuracy-matrix "
           "rows no closer to the prediction; keep 0 where another process shares the CPUs)"),
    NUMBER("MP_POOL_SPIN_US", pool_spin_us, 0, 1000000, MP_KNOB_POOL_SPIN_US, COSTS,
           "how long a pool worker polls for the next region before it sleeps, in microseconds (a time, so "
           "that it holds on any CPU; the GPU executor's CPU experts can run a layer or a token apart, and a "
           "worker that slept starts late)"),
    NUMBER("MP_MOE_PIPE_UNITS", moe_pipe_units, 1, 64, 8, COSTS,
           "units per thread in each half of the pipelined region"),
    NUMBER("MP_MOE_UNIT_KB", moe_unit_kb, 0, 16384, MP_KNOB_MOE_UNIT_KB, COSTS,
           "the least weight bytes, in KiB, one unit of the pipelined region reads (its rows are at least this "
           "over the bytes of a row, and at least 16), while each half still has a unit for every thread; 0: 16 "
           "rows, whatever their bytes (a 2 MB expert's down then comes in units of 6.7 KB on 16 threads; one "
           "such route a call took 1.29-1.35x as long as with 64 on the H200 host)"),
    NUMBER("MP_MOE_UNIT_MAX_KB", moe_unit_max_kb, 0, 16384, MP_KNOB_MOE_UNIT_MAX_KB, COSTS,
           "the most weight bytes, in KiB, one unit of the pipelined region reads (its rows at most this over "
           "the bytes of a row, and at least 16; MP_MOE_UNIT_KB wins where the two meet), so that a call of one "
           "large expert is cut finer than MP_MOE_PIPE_UNITS a thread (0: no cap; a one-route Mixtral call "
           "took a median 0.955x the time with units of about 129 KB against 516 KB over eight rounds on two "
           "H100 hosts' 16 threads, inside a round's spread)"),
    SWITCH("MP_MOE_CPU_PROFILE", moe_cpu_profile, 0, COSTS,
           "prints where each CPU expert call's time goes, one line on stderr when run, bench or plan ends"),
    SWITCH("MP_GPU_GRAPHS", gpu_graphs, 1, COSTS,
           "runs a decode step as one CUDA graph (0: enqueued launch by launch, as a profiler wants to see "
           "them; hybrid layers hand off with copies and events then)"),
    SWITCH("MP_GPU_STEP_STAMPS", gpu_step_stamps, 0, COSTS,
           "stamps each decode step's GPU span, launch and host gaps into bench's JSON"),
    NUMBER("MP_GPU_GEMM_MIN_ROWS", gpu_gemm_min_rows, MP_KNOB_GEMM_MIN_ROWS, ROWS_MAX, MP_KNOB_GEMM_MIN_ROWS, COSTS,
           "prefill rows from which dense projections run as cuBLAS GEMMs"),
    CHOICE("MP_GPU_HOST_EXPERTS", gpu_host_experts, k_host, MP_GPU_HOST_PINNED, COSTS,
           "where the GPU executor keeps the cold experts: a page-locked copy, a pageable copy, the model's "
           "file mapping"),
    SWITCH("MP_GPU_INIT_TRACE", gpu_init_trace, 0, 0,
           "prints each start-up phase of the GPU executor on stderr (where a start hangs)"),
    SWITCH("MP_GPU_PART_BY_UNIT", gpu_part_by_unit, 1, COSTS,
           "keeps a second host copy of the cold experts' down, laid out by the far plan's split units, so that "
           "a split far route's CPU side reads its units whole instead of a segment of every down row (more host "
           "memory: each such expert's down up to the largest part, made only while that is at most half the "
           "memory available; needs the host copy); 0 saves that memory for a slower split route"),
    NUMBER("MP_GPU_TIER_HOLD", gpu_tier_hold, 0, 1000, 0, 0,
           "steps an adaptive tier copy stays in flight after it landed before its expert serves (a test of "
           "the steps that run while copies are in flight; 0: it serves from the step after it landed)"),
    SWITCH("MP_CUDA_PDL", cuda_pdl, 1, COSTS,
           "programmatic dependent launch of decode kernels on compute capability 9.0+ (0: each waits for "
           "the one before, so that a profiler's kernel durations leave out the wait)"),
    NUMBER_ALSO("MP_HANG_DUMP_S", hang_dump_s, 1, 86400, 1, 0, 0, 0, 0,
                "after this many seconds, prints the main thread's stack and kernel-side state on stderr "
                "(0: off)"),
};

_Static_assert(N(k_knobs) <= MP_KNOBS_MAX, "mp_knobs.source has a slot per knob");

/* Knobs whose losing arm was measured and removed (docs/config.md, "Retired knobs"): set, they stop
 * the command, so that an A/B run written for them cannot measure one arm twice. */
static const struct {
    const char *name, *now;
} k_retired[] = {
    {"MP_CUDA_MOE_DEC", "decode experts run the pair kernels for Q4_K gate/up and Q6_K down"},
    {"MP_CUDA_MOE_DOWN", "the decode down launch is a warp per output element"},
    {"MP_CUDA_MOE_MMA", "prefill experts take the tensor cores from the rows where they win"},
    {"MP_CUDA_MOE_MMA2", "the tensor-core experts take the pipelined kernel wherever it fits"},
    {"MP_CUDA_QKV_WARP", "the Q/K/V finish takes a warp per head from 16 rows"},
    {"MP_CUDA_NORM_THREADS", "the row norms take 2 elements per thread"},
    {"MP_GPU_ONE_GRAPH", "a decode step is one graph, hybrid layers handing off through mapped memory"},
    {"MP_GPU_ROUTER_FUSED", "a decode step's router is one launch"},
    {"MP_GPU_QKV_FORK", "a decode step's K and V projections run beside Q"},
    {"MP_MOE_CPU_PIPELINE", "a decode step's CPU experts run in one pipelined pool region"},
    {"MP_MOE_CPU_COMBINE", "the pipelined region combines its output range by range inside it"},
    {"MP_MOE_PART_STREAM", "a split far route's CPU side reads only its segment of each down row"},
    {"MP_MOE_DOWN_PREFETCH", "a pipelined down unit that waits for its expert's hidden rows just waits"},
    {"MP_GPU_FAR_TRACK_US", "far routes are decided once, from the cost file's grid as measured"},
};

int mp_knob_count(void)
{
    return N(k_knobs);
}

const mp_knob_def *mp_knob_at(int i)
{
    return &k_knobs[i];
}

int mp_knob_index(const char *name)
{
    for (int i = 0; i < N(k_knobs); i++)
        if (!strcmp(k_knobs[i].name, name))
            return i;
    return -1;
}

const mp_knob_def *mp_knob_find(const char *name)
{
    const int i = mp_knob_index(name);
    return i < 0 ? NULL : &k_knobs[i];
}

/* Store v (an allowed value of d) into its field of k. */
static void store(mp_knobs *k, const mp_knob_def *d, int64_t v)
{
    char *field = (char *)k + d->offset;
    switch (d->type) {
    case MP_KNOB_SWITCH: *(bool *)field = v != 0; break;
    case MP_KNOB_NUMBER: *(int64_t *)field = v; break;
    case MP_KNOB_CHOICE: *(int *)field = (int)v; break;
    case MP_KNOB_LIST: field[0] = '\0'; break; /* v is the default: no pairs (mp_knobs_set stores text) */
    }
}

static int64_t load(const mp_knobs *k, const mp_knob_def *d)
{
    const char *field = (const char *)k + d->offset;
    switch (d->type) {
    case MP_KNOB_SWITCH: return *(const bool *)field;
    case MP_KNOB_NUMBER: return *(const int64_t *)field;
    case MP_KNOB_CHOICE: return *(const int *)field;
    case MP_KNOB_LIST: {
        int64_t pairs = 0;
        char name[LIST_NAME_MAX + 1];
        int64_t n;
        while (mp_knob_list_at(field, (int)pairs, name, sizeof name, &n))
            pairs++;
        return pairs;
    }
    }
    return 0;
}

void mp_knobs_defaults(mp_knobs *k)
{
    memset(k, 0, sizeof *k);
    for (int i = 0; i < N(k_knobs); i++)
        store(k, &k_knobs[i], k_knobs[i].dflt);
}

const mp_knobs *mp_knobs_or_defaults(const mp_knobs *k, mp_knobs *storage)
{
    if (k)
        return k;
    mp_knobs_defaults(storage);
    return storage;
}

/* Whether the len characters at pair are NAME:N with N in [lo, hi]; *name_len, *n: the NAME's length
 * and N then */
static bool list_pair(const char *pair, size_t len, int64_t lo, int64_t hi, size_t *name_len, int64_t *n)
{
    const char *colon = memchr(pair, ':', len);
    if (!colon || colon == pair || (size_t)(colon - pair) > LIST_NAME_MAX)
        return false;
    for (const char *c = pair; c < colon; c++)
        if (!((*c >= 'A' && *c <= 'Z') || (*c >= 'a' && *c <= 'z') || (*c >= '0' && *c <= '9') || *c == '_'))
            return false;
    char num[24];
    const size_t num_len = len - (size_t)(colon + 1 - pair);
    if (!num_len || num_len >= sizeof num)
        return false;
    memcpy(num, colon + 1, num_len);
    num[num_len] = '\0';
    *name_len = (size_t)(colon - pair);
    return mp_parse_i64(num, lo, hi, n);
}

bool mp_knob_list_at(const char *text, int i, char *name, size_t cap, int64_t *n)
{
    for (int at = 0; text && *text; at++) {
        const char *end = strchr(text, ',');
        const size_t len = end ? (size_t)(end - text) : strlen(text);
        size_t name_len;
        if (!list_pair(text, len, INT64_MIN, INT64_MAX, &name_len, n))
            return false;
        if (at == i) {
            snprintf(name, cap, "%.*s", (int)name_len, text);
            return true;
        }
        text = end ? end + 1 : text + len;
    }
    return false;
}

/* Whether text is an allowed list of d; else *bad, *bad_len: the first pair that is not (or the
 * whole text where it is too long) */
static bool list_ok(const mp_knob_def *d, const char *text, const char **bad, size_t *bad_len)
{
    *bad = text;
    *bad_len = strlen(text);
    if (*bad_len >= MP_KNOB_TEXT_MAX)
        return false;
    for (const char *pair = text;;) {
        const char *end = strchr(pair, ',');
        const size_t len = end ? (size_t)(end - pair) : strlen(pair);
        size_t name_len;
        int64_t n;
        *bad = pair, *bad_len = len;
        if (!list_pair(pair, len, d->lo, d->hi, &name_len, &n))
            return false;
        for (const char *o = text; o < pair;) { /* each NAME once, case ignored */
            const char *o_end = strchr(o, ',');
            if ((size_t)(strchr(o, ':') - o) == name_len && !strncasecmp(o, pair, name_len))
                return false;
            o = o_end + 1;
        }
        if (!end)
            return true;
        pair = end + 1;
    }
}

/* Whether text is an allowed value of d (not a list); *v: the value then. */
static bool parse(const mp_knob_def *d, const char *text, int64_t *v)
{
    switch (d->type) {
    case MP_KNOB_SWITCH:
        if (strcmp(text, "0") && strcmp(text, "1"))
            return false;
        *v = text[0] == '1';
        return true;
    case MP_KNOB_NUMBER:
        if (!mp_parse_i64(text, INT64_MIN, INT64_MAX, v))
            return false;
        if (*v >= d->lo && *v <= d->hi)
            return true;
        for (int a = 0; a < d->n_also; a++)
            if (*v == d->also[a])
                return true;
        return false;
    case MP_KNOB_CHOICE:
        for (int c = 0; c < d->n_choices; c++)
            if (!strcmp(text, d->choices[c].word)) {
                *v = d->choices[c].value;
                return true;
            }
        return false;
    case MP_KNOB_LIST: return false; /* list_ok */
    }
    return false;
}

/* What d takes, in one of two styles: prose for a refusal ("0 or 1", "a whole number in 1..64",
 * "0 or a whole number in 1..86400", "one of pinned, copy, mapping", "TYPE:N pairs separated by
 * commas, each TYPE once, N a whole number in 1..99") or the table's short form ("0|1", "1..64",
 * "0 or 1..86400", "pinned|copy|mapping", "TYPE:1..99,..."); with two values besides the range,
 * "0, 1 or ...". */
typedef struct allowed_style {
    const char *sw, *range, *choices, *sep;
    bool prose;
} allowed_style;
static const allowed_style k_prose = {"0 or 1", "a whole number in ", "one of ", ", ", true};
static const allowed_style k_table = {"0|1", "", "", "|", false};

static const char *allowed_text(const mp_knob_def *d, const allowed_style *st, char *buf, size_t cap)
{
    size_t used = 0;
    buf[0] = '\0';
    switch (d->type) {
    case MP_KNOB_SWITCH: snprintf(buf, cap, "%s", st->sw); break;
    case MP_KNOB_NUMBER:
        for (int a = 0; a < d->n_also && used < cap; a++)
            used += (size_t)snprintf(buf + used, cap - used, "%" PRId64 "%s", d->also[a],
                                     a + 1 < d->n_also ? ", " : " or ");
        if (used < cap)
            snprintf(buf + used, cap - used, "%s%" PRId64 "..%" PRId64, st->range, d->lo, d->hi);
        break;
    case MP_KNOB_CHOICE:
        used = (size_t)snprintf(buf, cap, "%s", st->choices);
        for (int c = 0; c < d->n_choices && used < cap; c++)
            used += (size_t)snprintf(buf + used, cap - used, "%s%s", c ? st->sep : "", d->choices[c].word);
        break;
    case MP_KNOB_LIST:
        if (st->prose)
            snprintf(buf, cap, "%s:N pairs separated by commas, each %s once, N a whole number in %" PRId64
                               "..%" PRId64, d->pair_name, d->pair_name, d->lo, d->hi);
        else
            snprintf(buf, cap, "%s:%" PRId64 "..%" PRId64 ",...", d->pair_name, d->lo, d->hi);
        break;
    }
    return buf;
}

mp_status mp_knobs_set(mp_knobs *k, const char *name, const char *text, mp_knob_source source, mp_error *err)
{
    const int i = mp_knob_index(name);
    if (i < 0)
        return mp_fail(err, MP_ERR_ARG, "%s: no such knob (moeplan config lists them)", name);
    const mp_knob_def *d = &k_knobs[i];
    int64_t v = d->dflt;
    char expected[160];
    if (d->type == MP_KNOB_LIST && text && *text) {
        const char *bad;
        size_t bad_len;
        if (!list_ok(d, text, &bad, &bad_len)) {
            const bool one_pair = bad_len < strlen(text); /* else the whole text: no pair named */
            return mp_fail(err, MP_ERR_ARG, "%s=%.100s: %s%.*s%sexpected %s", name, text, one_pair ? "'" : "",
                           one_pair ? (int)bad_len : 0, bad, one_pair ? "': " : "",
                           allowed_text(d, &k_prose, expected, sizeof expected));
        }
        snprintf((char *)k + d->offset, MP_KNOB_TEXT_MAX, "%s", text);
        k->source[i] = (uint8_t)source;
        return MP_OK;
    }
    if (text && *text && !parse(d, text, &v))
        return mp_fail(err, MP_ERR_ARG, "%s=%.60s: expected %s", name, text,
                       allowed_text(d, &k_prose, expected, sizeof expected));
    store(k, d, v);
    k->source[i] = (uint8_t)(text && *text ? source : MP_KNOB_DEFAULT);
    return MP_OK;
}

mp_status mp_knobs_read(mp_knobs *k, mp_knob_lookup lookup, void *ctx, mp_error *err)
{
    mp_knobs_defaults(k);
    for (int i = 0; i < N(k_knobs); i++) {
        mp_status st = mp_knobs_set(k, k_knobs[i].name, lookup(ctx, k_knobs[i].name), MP_KNOB_ENV, err);
        if (st)
            return st;
    }
    for (int i = 0; i < N(k_retired); i++) {
        const char *text = lookup(ctx, k_retired[i].name);
        if (text && *text)
            return mp_fail(err, MP_ERR_ARG, "%s=%.60s: no longer a knob: %s (docs/config.md, \"Retired knobs\")",
                           k_retired[i].name, text, k_retired[i].now);
    }
    return MP_OK;
}

static const char *env_lookup(void *ctx, const char *name)
{
    (void)ctx;
    return getenv(name);
}

mp_status mp_knobs_read_env(mp_knobs *k, mp_error *err)
{
    return mp_knobs_read(k, env_lookup, NULL, err);
}

/* The word of choice value v of d, or NULL when d has none for it (not a choice). */
static const char *choice_word(const mp_knob_def *d, int64_t v)
{
    for (int c = 0; c < d->n_choices; c++)
        if (d->choices[c].value == v)
            return d->choices[c].word;
    return NULL;
}

static const char *text_of(const mp_knob_def *d, int64_t v, char *buf, size_t cap)
{
    const char *word = choice_word(d, v);
    if (word)
        snprintf(buf, cap, "%s", word);
    else
        snprintf(buf, cap, "%" PRId64, v);
    return buf;
}

int64_t mp_knob_value(const mp_knobs *k, int i)
{
    return load(k, &k_knobs[i]);
}

const char *mp_knob_value_text(const mp_knobs *k, int i, char *buf, size_t cap)
{
    if (k_knobs[i].type == MP_KNOB_LIST) {
        snprintf(buf, cap, "%s", (const char *)k + k_knobs[i].offset);
        return buf;
    }
    return text_of(&k_knobs[i], load(k, &k_knobs[i]), buf, cap);
}

const char *mp_knob_default_text(int i, char *buf, size_t cap)
{
    if (k_knobs[i].type == MP_KNOB_LIST) {
        snprintf(buf, cap, "%s", "");
        return buf;
    }
    return text_of(&k_knobs[i], k_knobs[i].dflt, buf, cap);
}

const char *mp_knob_allowed_text(int i, char *buf, size_t cap)
{
    return allowed_text(&k_knobs[i], &k_table, buf, cap);
}

const char *mp_knob_source_name(mp_knob_source s)
{
    return s == MP_KNOB_ENV ? "env" : s == MP_KNOB_FLAG ? "flag" : s == MP_KNOB_CALIBRATED ? "calibrated" : "default";
}

mp_status mp_knobs_take_calibrated(mp_knobs *k, const char *name, const char *text, bool *taken, mp_error *err)
{
    const int i = mp_knob_index(name);
    *taken = false;
    if (i < 0 || k_knobs[i].costs != MP_KNOB_COSTS_TUNED || k->source[i] != MP_KNOB_DEFAULT)
        return MP_OK;
    if (!text || !*text) { /* mp_knobs_set takes none as the default; a cost file's choice is a value */
        char expected[160];
        return mp_fail(err, MP_ERR_ARG, "%s: expected %s, not nothing", name,
                       allowed_text(&k_knobs[i], &k_prose, expected, sizeof expected));
    }
    mp_status st = mp_knobs_set(k, name, text, MP_KNOB_CALIBRATED, err); /* k unchanged when refused */
    *taken = st == MP_OK;
    return st;
}

const char *mp_knobs_isa_cap(const mp_knobs *k)
{
    return k->isa == MP_KNOB_ISA_BEST ? NULL : choice_word(mp_knob_find("MP_ISA"), k->isa);
}


bool mp_knobs_add_json(const mp_knobs *k, cJSON *obj)
{
    cJSON *values = cJSON_AddObjectToObject(obj, "knobs");
    cJSON *set = cJSON_AddObjectToObject(obj, "knobs_set");
    bool ok = values && set;
    for (int i = 0; ok && i < N(k_knobs); i++) {
        const mp_knob_def *d = &k_knobs[i];
        char text[MP_KNOB_TEXT_MAX];
        ok = (d->type == MP_KNOB_CHOICE || d->type == MP_KNOB_LIST
                  ? cJSON_AddStringToObject(values, d->name, mp_knob_value_text(k, i, text, sizeof text))
                  : cJSON_AddNumberToObject(values, d->name, (double)load(k, d))) != NULL;
        if (ok && k->source[i] != MP_KNOB_DEFAULT)
            ok = cJSON_AddStringToObject(set, d->name, mp_knob_source_name((mp_knob_source)k->source[i])) != NULL;
    }
    return ok;
}
