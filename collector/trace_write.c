/* collector/trace_write.c — the trace writer (see trace.h for the call order and guarantees).
 *
 * Invariants:
 *  - w->failed != MP_OK after the first SQLite error; every later call returns it unchanged, so a
 *    caller that ignores one error still stops at the next call with the original message.
 *  - In a step, everything is inserted inside one transaction opened by step_begin; counts of the
 *    step are added to w->counts only when step_end's COMMIT succeeds (the footer counts what is
 *    in the file).
 *  - Routing of a step is gathered in ids_buf / weights_buf (one step: every node's (n_rows,
 *    top_k) block at its place in node_index order, see node_slot's offsets) and written as one
 *    routing row by step_end: every node or none (a partial step is refused, not written). The
 *    buffers grow to the largest step seen and are reused.
 */
#include "collector/trace.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cjson/cJSON.h>
#include <sqlite3.h>
#include <sys/random.h>

#include "base/sha256.h"
#include "base/atomic_file.h"
#include "base/build_info.h"
#include "base/fault.h"
#include "base/json.h"
#include "kernels/quant.h"
#include "base/clock.h"

#define MAX_NODES (MP_TRACE_MAX_NODE_INDEX + 1)

typedef struct node_slot {
    bool present;
    int64_t n_experts, top_k;
    int id_bytes;
    mp_trace_weight_format wf;
    int64_t id_off_row, w_off_row; /* bytes per step row of the nodes before this one (node_index
                                    * order): the node's block starts at n_rows × these */
    uint32_t seen_step;            /* step_serial of the last step that had its routing */
} node_slot;

enum { ST_OPEN, ST_RUN, ST_REQUEST, ST_STEP, ST_FINISHED };

struct mp_trace_writer {
    sqlite3 *db;
    char *path;
    int state;
    mp_status failed;          /* first error, sticky */
    char failed_msg[MP_ERROR_MSG_MAX];
    bool in_txn;
    node_slot nodes[MAX_NODES];  /* by node_index */
    int16_t layer_to_node[MAX_NODES]; /* -1: no MoE node for this layer */
    int64_t request_id;        /* open or last request */
    bool have_request;
    int64_t next_step;         /* the step number step_begin expects */
    int64_t step, step_rows, step_pos;
    mp_phase step_phase;
    int64_t step_routing, step_timing, step_cupti; /* pending counts of the open step */
    mp_trace_counts counts;    /* committed */
    int64_t t0_ns;             /* CLOCK_MONOTONIC at open */
    sqlite3_stmt *ins_routing, *ins_timing, *ins_step, *ins_cupti;
    const char *const *label_ids;   /* (n_labels) external ids by request_id, or NULL */
    const char *const *label_texts; /* (n_labels) prompt texts, or NULL */
    int64_t n_labels;
    int64_t n_nodes;           /* nodes added */
    bool layout_ready;         /* node offsets computed (at the first step; nodes are fixed then) */
    int64_t row_id_bytes, row_w_bytes; /* a step row's bytes over all nodes */
    uint32_t step_serial;      /* increments per step_begin; node_slot.seen_step compares to it */
    uint8_t *ids_buf;          /* (step rows) × row_id_bytes: the open step's expert_ids BLOB */
    uint8_t *weights_buf;      /* (step rows) × row_w_bytes: its weights BLOB */
    size_t ids_cap_bytes, weights_cap_bytes;
    int64_t max_bytes;         /* mp_trace_writer_limit_bytes, 0: none */
    bool atomic;               /* made by mp_trace_writer_create: the database is out.tmp until
                                * finish renames it to path; close before that removes it */
    mp_outfile out;
};

static void utc_now(char out[32])
{
    time_t t = time(NULL);
    struct tm tm;
    gmtime_r(&t, &tm);
    strftime(out, 32, "%Y-%m-%dT%H:%M:%SZ", &tm);
}

void mp_trace_run_info_init(mp_trace_run_info *info)
{
    memset(info, 0, sizeof *info);
    info->n_layers = info->n_moe_layers = info->n_experts = info->top_k = -1;
    info->n_embd = info->n_ff_expert = info->n_vocab = info->threads = info->budget_bytes = -1;
}

static void mark_aborted(mp_trace_writer *w, const char *reason);
static void finalize_and_close(mp_trace_writer *w);

void mp_trace_sql_cause(sqlite3 *db, char *buf, size_t cap)
{
    const int code = sqlite3_extended_errcode(db);
    int sys = sqlite3_system_errno(db);
    if (sys == 0) /* not kept on every path (a write of a page the cache spilled): the file's own */
        sqlite3_file_control(db, "main", SQLITE_FCNTL_LAST_ERRNO, &sys);
    if (((code & 0xff) == SQLITE_IOERR || (code & 0xff) == SQLITE_FULL) && sys != 0)
        snprintf(buf, cap, "%s%s (sqlite error %d)", strerror(sys),
                 sys == EFBIG ? " (the file-size limit, ulimit -f)" : "", code);
    else
        snprintf(buf, cap, "%s (sqlite error %d)", sqlite3_errmsg(db), code);
}

/* Record the first SQLite failure, roll back the open step and mark the run aborted. The
 * message says the cause in the user's terms: the OS error of an I/O failure (EFBIG under a
 * file-size limit, ENOSPC on a full disk) and, for SQLITE_FULL without one, the size limit
 * (max_page_count) that stopped it, not "database or disk is full". */
static mp_status sql_fail(mp_trace_writer *w, mp_error *err, const char *what)
{
    int code = sqlite3_extended_errcode(w->db);
    mp_status st = (code & 0xff) == SQLITE_FULL || (code & 0xff) == SQLITE_IOERR ||
                           (code & 0xff) == SQLITE_CANTOPEN || (code & 0xff) == SQLITE_READONLY
                       ? MP_ERR_IO
                       : (code & 0xff) == SQLITE_NOMEM ? MP_ERR_NOMEM : MP_ERR_INTERNAL;
    const int sys = sqlite3_system_errno(w->db);
    if ((code & 0xff) == SQLITE_FULL && sys != ENOSPC && w->max_bytes > 0)
        mp_fail(err, st, "trace %s: %s: the trace reached its size limit of %lld bytes "
                "(--trace-max-bytes)", w->path, what, (long long)w->max_bytes);
    else {
        char cause[256];
        mp_trace_sql_cause(w->db, cause, sizeof cause);
        mp_fail(err, st, "trace %s: %s: %s", w->path, what, cause);
    }
    if (w->failed == MP_OK) {
        w->failed = st;
        snprintf(w->failed_msg, sizeof w->failed_msg, "%s", err ? err->msg : what);
        mark_aborted(w, w->failed_msg);
    }
    return st;
}

static mp_status check(mp_trace_writer *w, mp_error *err)
{
    if (w->failed != MP_OK)
        return mp_fail(err, w->failed, "%s", w->failed_msg);
    return MP_OK;
}

static mp_status exec(mp_trace_writer *w, const char *sql, mp_error *err, const char *what)
{
    if (sqlite3_exec(w->db, sql, NULL, NULL, NULL) != SQLITE_OK)
        return sql_fail(w, err, what);
    return MP_OK;
}

static void mark_aborted(mp_trace_writer *w, const char *reason)
{
    /* Best effort: the failing condition (disk full) may stop this too; then the run stays
     * 'running', which readers treat as incomplete as well. */
    if (!w->db)
        return;
    if (w->in_txn || !sqlite3_get_autocommit(w->db))
        sqlite3_exec(w->db, "ROLLBACK", NULL, NULL, NULL);
    w->in_txn = false;
    sqlite3_stmt *st = NULL;
    char t[32];
    utc_now(t);
    if (sqlite3_prepare_v2(w->db, "UPDATE run SET status='aborted', error=?1, end_time=?2", -1,
                           &st, NULL) == SQLITE_OK) {
        sqlite3_bind_text(st, 1, reason, -1, SQLITE_TRANSIENT);
        sqlite3_bind_text(st, 2, t, -1, SQLITE_TRANSIENT);
        sqlite3_step(st);
    }
    sqlite3_finalize(st);
}

static mp_status prepare(mp_trace_writer *w, const char *sql, sqlite3_stmt **st, mp_error *err)
{
    if (sqlite3_prepare_v3(w->db, sql, -1, SQLITE_PREPARE_PERSISTENT, st, NULL) != SQLITE_OK)
        return sql_fail(w, err, "preparing a statement");
    return MP_OK;
}

static void remove_with_journals(const char *path)
{
    static const char *suffix[] = {"", "-wal", "-shm", "-journal"};
    char p[4096];
    for (int i = 0; i < 4; i++) {
        snprintf(p, sizeof p, "%s%s", path, suffix[i]);
        unlink(p);
    }
}

/* Open (create) the database at db_path; messages name name. */
static mp_status writer_open(const char *db_path, const char *name, mp_trace_writer **out,
                             mp_error *err)
{
    mp_trace_writer *w = mp_fault_calloc(1, sizeof *w);
    if (!w)
        return mp_fail(err, MP_ERR_NOMEM, "trace %s: out of memory", name);
    w->path = mp_fault_strdup(name);
    w->t0_ns = mp_now_ns();
    memset(w->layer_to_node, 0xff, sizeof w->layer_to_node);
    if (!w->path) {
        free(w);
        return mp_fail(err, MP_ERR_NOMEM, "trace %s: out of memory", name);
    }
    int rc = sqlite3_open_v2(db_path, &w->db,
                             SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX, NULL);
    if (rc != SQLITE_OK) {
        mp_fail(err, MP_ERR_IO, "trace %s: cannot create: %s", name,
                w->db ? sqlite3_errmsg(w->db) : "out of memory");
        sqlite3_close(w->db);
        free(w->path);
        free(w);
        return MP_ERR_IO;
    }
    sqlite3_extended_result_codes(w->db, 1);
    mp_status st;
    if ((st = exec(w, "PRAGMA journal_mode=WAL", err, "setting WAL mode")) ||
        (st = exec(w, "PRAGMA synchronous=NORMAL", err, "setting synchronous")) ||
        (st = exec(w, "BEGIN", err, "creating the schema")) ||
        (st = exec(w, mp_trace_schema_sql, err, "creating the schema")) ||
        (st = exec(w, "COMMIT", err, "creating the schema")) ||
        (st = prepare(w, "INSERT INTO routing(key, n_rows, expert_ids, weights) VALUES (?1,?2,?3,?4)",
                      &w->ins_routing, err)) ||
        (st = prepare(w, "INSERT INTO timing(key, gpu_expert_ns, cpu_expert_ns, h2d_bytes, h2d_ns,"
                         " d2h_bytes, d2h_ns, sync_ns, merge_ns, hits, misses, tier_hits, tier_late,"
                         " tier_admissions, tier_evictions, tier_copy_bytes, served)"
                         " VALUES (?1,?2,?3,?4,?5,?6,?7,?8,?9,?10,?11,?12,?13,?14,?15,?16,?17)",
                      &w->ins_timing, err)) ||
        (st = prepare(w, "INSERT INTO steps(request_id, step, phase, n_rows, pos, duration_ns)"
                         " VALUES (?1,?2,?3,?4,?5,?6)",
                      &w->ins_step, err)) ||
        (st = prepare(w, "INSERT INTO cupti(kind, name, start_ns, end_ns, bytes, device_id,"
                         " stream_id, correlation_id, request_id, step, node_index)"
                         " VALUES (?1,?2,?3,?4,?5,?6,?7,?8,?9,?10,?11)",
                      &w->ins_cupti, err))) {
        mp_trace_writer_close(w);
        return st;
    }
    w->state = ST_OPEN;
    *out = w;
    return MP_OK;
}

mp_status mp_trace_writer_open(const char *path, bool force, mp_trace_writer **out, mp_error *err)
{
    *out = NULL;
    struct stat sb;
    if (stat(path, &sb) == 0) {
        if (!force)
            return mp_fail(err, MP_ERR_IO, "trace %s: file exists (use --force to replace it)",
                           path);
        if (!S_ISREG(sb.st_mode))
            return mp_fail(err, MP_ERR_IO, "trace %s: exists and is not a regular file", path);
    }
    if (force)
        remove_with_journals(path);
    return writer_open(path, path, out, err);
}

mp_status mp_trace_writer_create(const char *path, bool force, mp_trace_writer **out,
                                 mp_error *err)
{
    *out = NULL;
    mp_status st = mp_output_check(path, "trace", force, NULL, 0, err);
    mp_outfile o;
    if (st || (st = mp_outfile_open(&o, path, "trace", MP_OUT_NO_FD, err)))
        return st;
    if ((st = writer_open(o.tmp, path, out, err))) {
        mp_outfile_abort(&o);
        return st;
    }
    (*out)->atomic = true;
    (*out)->out = o;
    return MP_OK;
}

mp_status mp_trace_writer_limit_bytes(mp_trace_writer *w, int64_t max_bytes, mp_error *err)
{
    mp_status s;
    if ((s = check(w, err)))
        return s;
    if (max_bytes < 0)
        return mp_fail(err, MP_ERR_ARG, "trace %s: size limit %lld bytes", w->path,
                       (long long)max_bytes);
    char sql[96];
    /* page_size is 4096 unless the SQLite build says otherwise; read it rather than assume */
    sqlite3_stmt *st = NULL;
    int64_t page = 4096;
    if (sqlite3_prepare_v2(w->db, "PRAGMA page_size", -1, &st, NULL) == SQLITE_OK &&
        sqlite3_step(st) == SQLITE_ROW)
        page = sqlite3_column_int64(st, 0);
    sqlite3_finalize(st);
    int64_t pages = max_bytes ? (max_bytes + page - 1) / page : 4294967294LL;
    w->max_bytes = max_bytes;
    snprintf(sql, sizeof sql, "PRAGMA max_page_count=%lld", (long long)pages);
    return exec(w, sql, err, "setting the size limit");
}

static void bind_text_or_null(sqlite3_stmt *st, int i, const char *s)
{
    if (s)
        sqlite3_bind_text(st, i, s, -1, SQLITE_TRANSIENT);
    else
        sqlite3_bind_null(st, i);
}

static void bind_int_or_null(sqlite3_stmt *st, int i, int64_t v)
{
    if (v >= 0)
        sqlite3_bind_int64(st, i, v);
    else
        sqlite3_bind_null(st, i);
}

static mp_status step_once(mp_trace_writer *w, sqlite3_stmt *st, mp_error *err, const char *what)
{
    int rc = sqlite3_step(st);
    sqlite3_reset(st);
    sqlite3_clear_bindings(st);
    if (rc != SQLITE_DONE)
        return sql_fail(w, err, what);
    return MP_OK;
}

static mp_status bad_order(mp_trace_writer *w, mp_error *err, const char *call)
{
    return mp_fail(err, MP_ERR_ARG, "trace %s: %s called out of order", w->path, call);
}

/* config_json (a JSON object, or NULL: {}) with "run_id": 32 hex digits of 128 random bits
 * added: what tells a copy of a trace from another run of the same prompts (the analyzer refuses
 * to merge one run twice), whatever the files are called. A config that is not a JSON object is
 * stored as given (NULL only when out of memory). */
static char *with_run_id(const char *config_json)
{
    uint8_t rnd[16];
    if (getrandom(rnd, sizeof rnd, 0) != (ssize_t)sizeof rnd) { /* never blocks once booted */
        const uint64_t t = (uint64_t)mp_now_ns() ^ ((uint64_t)getpid() << 32);
        for (int i = 0; i < 16; i++)
            rnd[i] = (uint8_t)(t >> (8 * (i % 8))) ^ (uint8_t)(i * 37);
    }
    char hex[33];
    for (int i = 0; i < 16; i++)
        snprintf(hex + 2 * i, 3, "%02x", rnd[i]);
    const mp_json_mark mark = mp_json_begin();
    cJSON *cfg = config_json ? cJSON_Parse(config_json) : cJSON_CreateObject();
    if (mp_json_failed_since(mark)) { /* out of memory, not a config that is no object */
        cJSON_Delete(cfg);
        return NULL;
    }
    if (!cJSON_IsObject(cfg)) {
        cJSON_Delete(cfg);
        return config_json ? mp_fault_strdup(config_json) : NULL;
    }
    cJSON_DeleteItemFromObjectCaseSensitive(cfg, "run_id");
    char *text = cJSON_AddStringToObject(cfg, "run_id", hex) && !mp_json_failed_since(mark)
                     ? cJSON_PrintUnformatted(cfg) : NULL;
    cJSON_Delete(cfg);
    return text;
}

mp_status mp_trace_set_run(mp_trace_writer *w, const mp_trace_run_info *in, mp_error *err)
{
    mp_status s;
    if ((s = check(w, err)))
        return s;
    if (w->state != ST_OPEN)
        return bad_order(w, err, "set_run");
    static const char *sources[] = {"moeplan", "onnxruntime", "strata", "csv"};
    bool ok = false;
    for (int i = 0; i < 4 && in->source; i++)
        ok |= !strcmp(in->source, sources[i]);
    if (!ok)
        return mp_fail(err, MP_ERR_ARG, "trace %s: source '%s' is not moeplan, onnxruntime, strata "
                                        "or csv", w->path, in->source ? in->source : "(null)");
    sqlite3_stmt *st = NULL;
    if ((s = prepare(w, "INSERT INTO run(id, moeplan_version, source, source_path, model_path,"
                        " model_sha256, architecture, n_layers, n_moe_layers, n_experts, top_k,"
                        " n_embd, n_ff_expert, n_vocab, quant_types, device, gpu_name, cpu_model,"
                        " threads, profile_sha256, budget_bytes, config_json, start_time, status,"
                        " moeplan_commit, moeplan_build)"
                        " VALUES (1,?1,?2,?3,?4,?5,?6,?7,?8,?9,?10,?11,?12,?13,?14,?15,?16,?17,"
                        "?18,?19,?20,?21,?22,'running',?23,?24)",
                     &st, err)))
        return s;
    char t[32];
    utc_now(t);
    sqlite3_bind_text(st, 1, MP_VERSION, -1, SQLITE_STATIC);
    bind_text_or_null(st, 2, in->source);
    bind_text_or_null(st, 3, in->source_path);
    bind_text_or_null(st, 4, in->model_path);
    bind_text_or_null(st, 5, in->model_sha256);
    bind_text_or_null(st, 6, in->architecture);
    bind_int_or_null(st, 7, in->n_layers);
    bind_int_or_null(st, 8, in->n_moe_layers);
    bind_int_or_null(st, 9, in->n_experts);
    bind_int_or_null(st, 10, in->top_k);
    bind_int_or_null(st, 11, in->n_embd);
    bind_int_or_null(st, 12, in->n_ff_expert);
    bind_int_or_null(st, 13, in->n_vocab);
    bind_text_or_null(st, 14, in->quant_types);
    bind_text_or_null(st, 15, in->device);
    bind_text_or_null(st, 16, in->gpu_name);
    bind_text_or_null(st, 17, in->cpu_model);
    bind_int_or_null(st, 18, in->threads);
    bind_text_or_null(st, 19, in->profile_sha256);
    bind_int_or_null(st, 20, in->budget_bytes);
    char *config = with_run_id(in->config_json);
    if (!config) {
        sqlite3_finalize(st);
        return mp_fail(err, MP_ERR_NOMEM, "trace %s: out of memory for the run's config", w->path);
    }
    sqlite3_bind_text(st, 21, config, -1, SQLITE_TRANSIENT);
    free(config);
    sqlite3_bind_text(st, 22, t, -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(st, 23, mp_build_commit(), -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 24, mp_build_options(), -1, SQLITE_STATIC);
    s = step_once(w, st, err, "writing the run row");
    sqlite3_finalize(st);
    if (s == MP_OK)
        w->state = ST_RUN;
    return s;
}

mp_status mp_trace_add_node(mp_trace_writer *w, const mp_trace_node *n, mp_error *err)
{
    mp_status s;
    if ((s = check(w, err)))
        return s;
    if (w->state != ST_RUN || w->counts.n_requests > 0)
        return bad_order(w, err, "add_node");
    if (n->node_index < 0 || n->node_index > MP_TRACE_MAX_NODE_INDEX)
        return mp_fail(err, MP_ERR_LIMIT, "trace %s: node_index %lld outside [0, %d]", w->path,
                       (long long)n->node_index, MP_TRACE_MAX_NODE_INDEX);
    if (w->nodes[n->node_index].present)
        return mp_fail(err, MP_ERR_ARG, "trace %s: node_index %lld added twice", w->path,
                       (long long)n->node_index);
    if (n->n_experts < 1 || n->n_experts > 65536 || n->top_k < 1 || n->top_k > n->n_experts)
        return mp_fail(err, MP_ERR_ARG,
                       "trace %s: node %lld: expected 1 <= top_k <= n_experts <= 65536, got "
                       "top_k %lld, n_experts %lld", w->path, (long long)n->node_index,
                       (long long)n->top_k, (long long)n->n_experts);
    if (!n->node_type || !n->node_name)
        return mp_fail(err, MP_ERR_ARG, "trace %s: node %lld: type and name are required", w->path,
                       (long long)n->node_index);
    sqlite3_stmt *st = NULL;
    if ((s = prepare(w, "INSERT INTO nodes(node_index, node_type, node_name, layer, n_experts,"
                        " top_k, expert_bytes, id_bytes, weight_format) VALUES (?1,?2,?3,?4,?5,?6,"
                        "?7,?8,?9)", &st, err)))
        return s;
    int id_bytes = n->n_experts <= 256 ? 1 : 2;
    sqlite3_bind_int64(st, 1, n->node_index);
    sqlite3_bind_text(st, 2, n->node_type, -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(st, 3, n->node_name, -1, SQLITE_TRANSIENT);
    sqlite3_bind_int64(st, 4, n->layer);
    sqlite3_bind_int64(st, 5, n->n_experts);
    sqlite3_bind_int64(st, 6, n->top_k);
    bind_int_or_null(st, 7, n->expert_bytes);
    sqlite3_bind_int(st, 8, id_bytes);
    sqlite3_bind_text(st, 9, n->weight_format == MP_TRACE_W_F16 ? "f16" : "f32", -1, SQLITE_STATIC);
    s = step_once(w, st, err, "writing a node");
    sqlite3_finalize(st);
    if (s)
        return s;
    w->n_nodes++;
    node_slot *slot = &w->nodes[n->node_index];
    slot->present = true;
    slot->n_experts = n->n_experts;
    slot->top_k = n->top_k;
    slot->id_bytes = id_bytes;
    slot->wf = n->weight_format;
    if (n->layer >= 0 && n->layer < MAX_NODES)
        w->layer_to_node[n->layer] = (int16_t)n->node_index;
    return MP_OK;
}

void mp_trace_writer_set_request_labels(mp_trace_writer *w, const char *const *external_ids,
                                        const char *const *prompt_texts, int64_t n)
{
    w->label_ids = external_ids;
    w->label_texts = prompt_texts;
    w->n_labels = n;
}

mp_status mp_trace_request_begin(mp_trace_writer *w, int64_t request_id, const char *external_id,
                                 const int32_t *tokens, int64_t n_tokens, const char *prompt_text,
                                 int64_t start_ns, mp_error *err)
{
    mp_status s;
    if (!external_id && request_id >= 0 && request_id < w->n_labels) {
        external_id = w->label_ids ? w->label_ids[request_id] : NULL;
        if (!prompt_text && w->label_texts)
            prompt_text = w->label_texts[request_id];
    }
    if ((s = check(w, err)))
        return s;
    if (w->state != ST_RUN)
        return bad_order(w, err, "request_begin");
    if (request_id < 0 || request_id > MP_TRACE_MAX_REQUEST_ID)
        return mp_fail(err, MP_ERR_LIMIT, "trace %s: request_id %lld outside [0, %lld]", w->path,
                       (long long)request_id, (long long)MP_TRACE_MAX_REQUEST_ID);
    if (w->have_request && request_id <= w->request_id)
        return mp_fail(err, MP_ERR_ARG, "trace %s: request_id %lld after %lld: ids must increase "
                       "in the order requests run", w->path, (long long)request_id,
                       (long long)w->request_id);
    char hex[65];
    if (tokens && n_tokens >= 0) {
        mp_sha256 sh;
        uint8_t d[32];
        mp_sha256_init(&sh);
        for (int64_t i = 0; i < n_tokens; i++) { /* int32 little-endian, whatever the host */
            uint8_t b[4] = {(uint8_t)tokens[i], (uint8_t)(tokens[i] >> 8),
                            (uint8_t)(tokens[i] >> 16), (uint8_t)((uint32_t)tokens[i] >> 24)};
            mp_sha256_update(&sh, b, 4);
        }
        if (!mp_sha256_final(&sh, d))
            return mp_fail(err, MP_ERR_NOMEM, "trace %s: out of memory for the prompt's hash", w->path);
        mp_sha256_hex(d, hex);
    }
    sqlite3_stmt *st = NULL;
    if ((s = prepare(w, "INSERT INTO requests(request_id, ord, external_id, n_prompt_tokens,"
                        " start_ns, prompt_sha256, prompt_text) VALUES (?1,?2,?3,?4,?5,?6,?7)",
                     &st, err)))
        return s;
    sqlite3_bind_int64(st, 1, request_id);
    sqlite3_bind_int64(st, 2, w->counts.n_requests);
    bind_text_or_null(st, 3, external_id);
    bind_int_or_null(st, 4, n_tokens);
    bind_int_or_null(st, 5, start_ns);
    bind_text_or_null(st, 6, tokens && n_tokens >= 0 ? hex : NULL);
    bind_text_or_null(st, 7, prompt_text);
    s = step_once(w, st, err, "writing a request");
    sqlite3_finalize(st);
    if (s)
        return s;
    w->counts.n_requests++;
    w->request_id = request_id;
    w->have_request = true;
    w->next_step = 0;
    w->state = ST_REQUEST;
    return MP_OK;
}

mp_status mp_trace_request_end(mp_trace_writer *w, int64_t n_gen_tokens, int64_t end_ns,
                               mp_error *err)
{
    mp_status s;
    if ((s = check(w, err)))
        return s;
    if (w->state != ST_REQUEST)
        return bad_order(w, err, "request_end");
    sqlite3_stmt *st = NULL;
    if ((s = prepare(w, "UPDATE requests SET n_gen_tokens=?1, end_ns=?2 WHERE request_id=?3", &st,
                     err)))
        return s;
    bind_int_or_null(st, 1, n_gen_tokens);
    bind_int_or_null(st, 2, end_ns);
    sqlite3_bind_int64(st, 3, w->request_id);
    s = step_once(w, st, err, "ending a request");
    sqlite3_finalize(st);
    if (s == MP_OK)
        w->state = ST_RUN;
    return s;
}

static mp_status grow_buffers(mp_trace_writer *w, size_t ids_bytes, size_t weights_bytes,
                              mp_error *err)
{
    if (ids_bytes > w->ids_cap_bytes) {
        uint8_t *ids = mp_fault_realloc(w->ids_buf, ids_bytes);
        if (!ids)
            return mp_fail(err, MP_ERR_NOMEM, "trace %s: out of memory", w->path);
        w->ids_buf = ids;
        w->ids_cap_bytes = ids_bytes;
    }
    if (weights_bytes > w->weights_cap_bytes) {
        uint8_t *wts = mp_fault_realloc(w->weights_buf, weights_bytes);
        if (!wts)
            return mp_fail(err, MP_ERR_NOMEM, "trace %s: out of memory", w->path);
        w->weights_buf = wts;
        w->weights_cap_bytes = weights_bytes;
    }
    return MP_OK;
}

mp_status mp_trace_step_begin(mp_trace_writer *w, int64_t step, mp_phase phase, int64_t n_rows,
                              int64_t pos, mp_error *err)
{
    mp_status s;
    if ((s = check(w, err)))
        return s;
    if (w->state != ST_REQUEST)
        return bad_order(w, err, "step_begin");
    if (step != w->next_step)
        return mp_fail(err, MP_ERR_ARG, "trace %s: request %lld: step %lld where %lld was expected",
                       w->path, (long long)w->request_id, (long long)step,
                       (long long)w->next_step);
    if (step > MP_TRACE_MAX_STEP)
        return mp_fail(err, MP_ERR_LIMIT, "trace %s: request %lld: more than %lld steps", w->path,
                       (long long)w->request_id, (long long)MP_TRACE_MAX_STEP);
    if (n_rows < 1 || (phase != MP_PHASE_PREFILL && phase != MP_PHASE_DECODE))
        return mp_fail(err, MP_ERR_ARG, "trace %s: step %lld: expected n_rows >= 1 and a phase",
                       w->path, (long long)step);
    if (!w->layout_ready) {
        for (int64_t i = 0; i < MAX_NODES; i++) {
            node_slot *nd = &w->nodes[i];
            if (!nd->present)
                continue;
            nd->id_off_row = w->row_id_bytes;
            nd->w_off_row = w->row_w_bytes;
            w->row_id_bytes += nd->top_k * nd->id_bytes;
            w->row_w_bytes += nd->top_k * (nd->wf == MP_TRACE_W_F16 ? 2 : 4);
        }
        w->layout_ready = true;
    }
    /* one step's BLOB must fit SQLite's length limit (1e9 bytes by default) */
    if (w->row_w_bytes > 0 && n_rows > (int64_t)1000000000 / w->row_w_bytes)
        return mp_fail(err, MP_ERR_LIMIT, "trace %s: request %lld step %lld: %lld rows × %lld "
                       "routing bytes per row over all nodes, expected at most 1e9 bytes",
                       w->path, (long long)w->request_id, (long long)step, (long long)n_rows,
                       (long long)w->row_w_bytes);
    if ((s = grow_buffers(w, (size_t)(n_rows * w->row_id_bytes),
                          (size_t)(n_rows * w->row_w_bytes), err)))
        return s;
    if ((s = exec(w, "BEGIN", err, "beginning a step")))
        return s;
    w->in_txn = true;
    w->step_serial++;
    w->step = step;
    w->step_rows = n_rows;
    w->step_pos = pos;
    w->step_phase = phase;
    w->step_routing = w->step_timing = w->step_cupti = 0;
    w->state = ST_STEP;
    return MP_OK;
}

static inline int64_t pack_key(int64_t request_id, int64_t step, int64_t node_index)
{
    return request_id << 36 | step << 12 | node_index;
}

static inline int64_t pack_step_key(int64_t request_id, int64_t step)
{
    return request_id << 24 | step;
}

mp_status mp_trace_add_routing(mp_trace_writer *w, int64_t node_index, int64_t n_rows,
                               int64_t top_k, const int32_t *ids, const float *weights,
                               mp_error *err)
{
    mp_status s;
    if ((s = check(w, err)))
        return s;
    if (w->state != ST_STEP)
        return bad_order(w, err, "add_routing");
    if (node_index < 0 || node_index > MP_TRACE_MAX_NODE_INDEX || !w->nodes[node_index].present)
        return mp_fail(err, MP_ERR_ARG, "trace %s: routing for node %lld, which is not in the "
                       "node table", w->path, (long long)node_index);
    const node_slot *nd = &w->nodes[node_index];
    if (top_k != nd->top_k || n_rows != w->step_rows)
        return mp_fail(err, MP_ERR_ARG, "trace %s: request %lld step %lld node %lld: routing of "
                       "%lld rows × top-%lld, expected %lld rows × top-%lld", w->path,
                       (long long)w->request_id, (long long)w->step, (long long)node_index,
                       (long long)n_rows, (long long)top_k, (long long)w->step_rows,
                       (long long)nd->top_k);
    if (nd->seen_step == w->step_serial)
        return mp_fail(err, MP_ERR_ARG, "trace %s: request %lld step %lld node %lld: routing "
                       "recorded twice in one step", w->path, (long long)w->request_id,
                       (long long)w->step, (long long)node_index);
    size_t n = (size_t)(n_rows * top_k);
    /* this node's block of the step's BLOBs (filled in place; written by step_end) */
    uint8_t *ids_buf = w->ids_buf + n_rows * nd->id_off_row;
    uint8_t *weights_buf = w->weights_buf + n_rows * nd->w_off_row;
    for (size_t i = 0; i < n; i++) {
        int32_t e = ids[i];
        if (e < 0 || e >= nd->n_experts)
            return mp_fail(err, MP_ERR_ARG, "trace %s: request %lld step %lld node %lld row %zu: "
                           "expert id %d outside [0, %lld)", w->path, (long long)w->request_id,
                           (long long)w->step, (long long)node_index, i / (size_t)top_k, e,
                           (long long)nd->n_experts);
        if (nd->id_bytes == 1) {
            ids_buf[i] = (uint8_t)e;
        } else {
            ids_buf[2 * i] = (uint8_t)e;
            ids_buf[2 * i + 1] = (uint8_t)(e >> 8);
        }
    }
    if (nd->wf == MP_TRACE_W_F16) {
        for (size_t i = 0; i < n; i++) {
            uint16_t h = mp_f32_to_f16(weights[i]);
            weights_buf[2 * i] = (uint8_t)h;
            weights_buf[2 * i + 1] = (uint8_t)(h >> 8);
        }
    } else {
        for (size_t i = 0; i < n; i++) {
            uint32_t x;
            memcpy(&x, &weights[i], 4);
            for (int b = 0; b < 4; b++)
                weights_buf[4 * i + b] = (uint8_t)(x >> (8 * b));
        }
    }
    w->nodes[node_index].seen_step = w->step_serial;
    w->step_routing++;
    return MP_OK;
}

mp_status mp_trace_add_timing(mp_trace_writer *w, int64_t node_index, const mp_moe_timing *t,
                              mp_error *err)
{
    mp_status s;
    if ((s = check(w, err)))
        return s;
    if (w->state != ST_STEP)
        return bad_order(w, err, "add_timing");
    if (node_index < 0 || node_index > MP_TRACE_MAX_NODE_INDEX || !w->nodes[node_index].present)
        return mp_fail(err, MP_ERR_ARG, "trace %s: timing for node %lld, which is not in the node "
                       "table", w->path, (long long)node_index);
    sqlite3_stmt *st = w->ins_timing;
    sqlite3_bind_int64(st, 1, pack_key(w->request_id, w->step, node_index));
    const int64_t v[15] = {t->gpu_expert_ns, t->cpu_expert_ns, t->h2d_bytes, t->h2d_ns,
                           t->d2h_bytes, t->d2h_ns, t->sync_ns, t->merge_ns, t->hits, t->misses,
                           t->tier_hits, t->tier_late, t->tier_admissions, t->tier_evictions,
                           t->tier_copy_bytes};
    for (int i = 0; i < 15; i++)
        sqlite3_bind_int64(st, 2 + i, v[i]);
    /* the step's rows × the node's top-k codes (runtime/hooks.h); stored as given: the checker
     * (trace_check.h) holds them against hits, misses and tier_hits */
    if (t->served)
        sqlite3_bind_blob(st, 17, t->served, (int)(w->step_rows * w->nodes[node_index].top_k), SQLITE_STATIC);
    else
        sqlite3_bind_null(st, 17);
    if ((s = step_once(w, st, err, "writing timing")))
        return s;
    w->step_timing++;
    return MP_OK;
}

mp_status mp_trace_add_cupti(mp_trace_writer *w, const mp_trace_cupti_rec *r, mp_error *err)
{
    mp_status s;
    if ((s = check(w, err)))
        return s;
    if (w->state != ST_STEP)
        return bad_order(w, err, "add_cupti");
    if (!r->kind || (strcmp(r->kind, "kernel") && strcmp(r->kind, "memcpy")))
        return mp_fail(err, MP_ERR_ARG, "trace %s: cupti kind must be kernel or memcpy", w->path);
    sqlite3_stmt *st = w->ins_cupti;
    sqlite3_bind_text(st, 1, r->kind, -1, SQLITE_STATIC);
    bind_text_or_null(st, 2, r->name);
    sqlite3_bind_int64(st, 3, r->start_ns);
    sqlite3_bind_int64(st, 4, r->end_ns);
    bind_int_or_null(st, 5, r->bytes);
    bind_int_or_null(st, 6, r->device_id);
    bind_int_or_null(st, 7, r->stream_id);
    bind_int_or_null(st, 8, r->correlation_id);
    bind_int_or_null(st, 9, r->request_id);
    bind_int_or_null(st, 10, r->step);
    bind_int_or_null(st, 11, r->node_index);
    if ((s = step_once(w, st, err, "writing a cupti record")))
        return s;
    w->step_cupti++;
    return MP_OK;
}

mp_status mp_trace_step_end(mp_trace_writer *w, int64_t duration_ns, mp_error *err)
{
    mp_status s;
    if ((s = check(w, err)))
        return s;
    if (w->state != ST_STEP)
        return bad_order(w, err, "step_end");
    if (w->step_routing > 0 && w->step_routing < w->n_nodes) {
        int64_t missing = 0;
        while (!w->nodes[missing].present || w->nodes[missing].seen_step == w->step_serial)
            missing++;
        return mp_fail(err, MP_ERR_ARG, "trace %s: request %lld step %lld: routing for %lld of "
                       "%lld nodes (first missing: node %lld), expected every node or none",
                       w->path, (long long)w->request_id, (long long)w->step,
                       (long long)w->step_routing, (long long)w->n_nodes, (long long)missing);
    }
    sqlite3_stmt *st;
    if (w->step_routing > 0) {
        st = w->ins_routing;
        sqlite3_bind_int64(st, 1, pack_step_key(w->request_id, w->step));
        sqlite3_bind_int64(st, 2, w->step_rows);
        sqlite3_bind_blob(st, 3, w->ids_buf, (int)(w->step_rows * w->row_id_bytes), SQLITE_STATIC);
        sqlite3_bind_blob(st, 4, w->weights_buf, (int)(w->step_rows * w->row_w_bytes),
                          SQLITE_STATIC);
        if ((s = step_once(w, st, err, "writing routing")))
            return s;
    }
    st = w->ins_step;
    sqlite3_bind_int64(st, 1, w->request_id);
    sqlite3_bind_int64(st, 2, w->step);
    sqlite3_bind_text(st, 3, w->step_phase == MP_PHASE_PREFILL ? "prefill" : "decode", -1,
                      SQLITE_STATIC);
    sqlite3_bind_int64(st, 4, w->step_rows);
    bind_int_or_null(st, 5, w->step_pos);
    bind_int_or_null(st, 6, duration_ns);
    if ((s = step_once(w, st, err, "writing a step")) ||
        (s = exec(w, "COMMIT", err, "committing a step")))
        return s;
    w->in_txn = false;
    w->counts.n_steps++;
    w->counts.n_routing += w->step_routing;
    w->counts.n_timing += w->step_timing;
    w->counts.n_cupti += w->step_cupti;
    w->next_step++;
    w->state = ST_REQUEST;
    return MP_OK;
}

mp_status mp_trace_finish(mp_trace_writer *w, mp_error *err)
{
    mp_status s;
    if ((s = check(w, err)))
        return s;
    if (w->state != ST_RUN)
        return bad_order(w, err, "finish");
    sqlite3_stmt *st = NULL;
    if ((s = exec(w, "BEGIN", err, "writing the footer")))
        return s;
    w->in_txn = true;
    if ((s = prepare(w, "INSERT INTO footer(id, n_requests, n_steps, n_routing, n_timing, n_cupti)"
                        " VALUES (1,?1,?2,?3,?4,?5)", &st, err)))
        return s;
    sqlite3_bind_int64(st, 1, w->counts.n_requests);
    sqlite3_bind_int64(st, 2, w->counts.n_steps);
    sqlite3_bind_int64(st, 3, w->counts.n_routing);
    sqlite3_bind_int64(st, 4, w->counts.n_timing);
    sqlite3_bind_int64(st, 5, w->counts.n_cupti);
    s = step_once(w, st, err, "writing the footer");
    sqlite3_finalize(st);
    if (s)
        return s;
    if ((s = prepare(w, "UPDATE run SET status='complete', end_time=?1", &st, err)))
        return s;
    char t[32];
    utc_now(t);
    sqlite3_bind_text(st, 1, t, -1, SQLITE_TRANSIENT);
    s = step_once(w, st, err, "marking the run complete");
    sqlite3_finalize(st);
    if (s || (s = exec(w, "COMMIT", err, "writing the footer")))
        return s;
    w->in_txn = false;
    /* One self-contained file from here on: readers need no -wal/-shm (or a writable folder). */
    if ((s = exec(w, "PRAGMA journal_mode=DELETE", err, "leaving WAL mode")))
        return s;
    w->state = ST_FINISHED;
    if (w->atomic) { /* complete: close, fsync, and only now replace whatever was at path */
        finalize_and_close(w);
        if ((s = mp_outfile_commit(&w->out, err))) {
            w->failed = s;
            snprintf(w->failed_msg, sizeof w->failed_msg, "%s", err ? err->msg : "commit failed");
            return s;
        }
    }
    return MP_OK;
}

mp_status mp_trace_abort(mp_trace_writer *w, const char *reason, mp_error *err)
{
    if (w->failed != MP_OK)
        return check(w, err);
    mark_aborted(w, reason);
    w->failed = MP_ERR_ARG;
    snprintf(w->failed_msg, sizeof w->failed_msg, "trace %s: run aborted: %s", w->path, reason);
    return MP_OK;
}

static void finalize_and_close(mp_trace_writer *w)
{
    sqlite3_finalize(w->ins_routing);
    sqlite3_finalize(w->ins_timing);
    sqlite3_finalize(w->ins_step);
    sqlite3_finalize(w->ins_cupti);
    w->ins_routing = w->ins_timing = w->ins_step = w->ins_cupti = NULL;
    sqlite3_close(w->db);
    w->db = NULL;
}

mp_trace_counts mp_trace_writer_counts(const mp_trace_writer *w)
{
    return w->counts;
}

void mp_trace_writer_close(mp_trace_writer *w)
{
    if (!w)
        return;
    if (w->db && !sqlite3_get_autocommit(w->db))
        sqlite3_exec(w->db, "ROLLBACK", NULL, NULL, NULL); /* an unfinished step is not kept */
    finalize_and_close(w);
    if (w->atomic)
        mp_outfile_abort(&w->out); /* unfinished: the temporary goes, path keeps its old file */
    free(w->ids_buf);
    free(w->weights_buf);
    free(w->path);
    free(w);
}

/* ---- live capture through runtime/hooks.h ---- */

static void record(mp_trace_hooks_state *h, mp_status s)
{
    if (s != MP_OK && h->status == MP_OK)
        h->status = s;
}

static void hk_request_begin(void *user, int64_t request_id, const int32_t *tokens, int64_t n)
{
    mp_trace_hooks_state *h = user;
    if (h->status == MP_OK)
        record(h, mp_trace_request_begin(h->w, request_id, NULL, tokens, n, NULL,
                                         mp_now_ns() - h->clock_start_ns, &h->error));
}

static void hk_step_begin(void *user, int64_t request_id, int64_t step, mp_phase phase,
                          int64_t n_rows, int64_t pos)
{
    mp_trace_hooks_state *h = user;
    if (h->status != MP_OK)
        return;
    if (request_id != h->w->request_id) {
        record(h, mp_fail(&h->error, MP_ERR_ARG, "trace %s: step of request %lld inside request "
                          "%lld", h->w->path, (long long)request_id, (long long)h->w->request_id));
        return;
    }
    record(h, mp_trace_step_begin(h->w, step, phase, n_rows, pos, &h->error));
}

static void hk_routing(void *user, int64_t layer, int64_t n_rows, int64_t top_k,
                       const int32_t *ids, const float *weights)
{
    mp_trace_hooks_state *h = user;
    if (h->status != MP_OK)
        return;
    int64_t node = layer >= 0 && layer < MAX_NODES ? h->w->layer_to_node[layer] : -1;
    if (node < 0) {
        record(h, mp_fail(&h->error, MP_ERR_ARG, "trace %s: routing for layer %lld, which has no "
                          "node", h->w->path, (long long)layer));
        return;
    }
    record(h, mp_trace_add_routing(h->w, node, n_rows, top_k, ids, weights, &h->error));
}

static void hk_moe_timing(void *user, int64_t layer, const mp_moe_timing *t)
{
    mp_trace_hooks_state *h = user;
    if (h->status != MP_OK)
        return;
    int64_t node = layer >= 0 && layer < MAX_NODES ? h->w->layer_to_node[layer] : -1;
    if (node < 0) {
        record(h, mp_fail(&h->error, MP_ERR_ARG, "trace %s: timing for layer %lld, which has no "
                          "node", h->w->path, (long long)layer));
        return;
    }
    record(h, mp_trace_add_timing(h->w, node, t, &h->error));
}

static void hk_step_end(void *user, int64_t duration_ns)
{
    mp_trace_hooks_state *h = user;
    if (h->status == MP_OK)
        record(h, mp_trace_step_end(h->w, duration_ns, &h->error));
}

static void hk_request_end(void *user, int64_t n_generated)
{
    mp_trace_hooks_state *h = user;
    if (h->status == MP_OK)
        record(h, mp_trace_request_end(h->w, n_generated, mp_now_ns() - h->clock_start_ns,
                                       &h->error));
}

mp_hooks mp_trace_hooks(mp_trace_hooks_state *state, mp_trace_writer *w)
{
    memset(state, 0, sizeof *state);
    state->w = w;
    state->status = MP_OK;
    state->clock_start_ns = w->t0_ns;
    mp_hooks h = {
        .user = state,
        .request_begin = hk_request_begin,
        .step_begin = hk_step_begin,
        .routing = hk_routing,
        .moe_timing = hk_moe_timing,
        .step_end = hk_step_end,
        .request_end = hk_request_end,
    };
    return h;
}
