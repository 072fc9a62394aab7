/* tests/fuzz/fuzz_trace.c — libFuzzer target for the trace reader: the raw reader's SQLite rows,
 * its version 2 slicing of a step's BLOBs per node, the routing BLOB decoder, and the fail-closed
 * checker (collector/trace_check.h) with its three consumers.
 *
 * The input is not a SQLite file (that would fuzz SQLite's own parser, which SQLite fuzzes): it
 * is a recipe, read byte by byte (zeros once exhausted), for the rows of a trace built with the
 * schema and CHECK constraints off, so that every column may hold what a hostile file holds —
 * nodes (experts, top-k, id_bytes, weight format, indices), the run row (status, geometry), the
 * requests, the steps (numbering, phase, rows) and the routing BLOBs (ids, weights, cut short or
 * padded), the timing rows of a routed step (hits, misses, the tier's hits and the served codes:
 * counts that agree with the codes or not, codes out of range, BLOBs cut short or padded, NULL,
 * a row for a node the step has not), the footer's counts. The database goes to a file in /dev/shm (or /tmp).
 *
 * Properties (abort on violation, so the fuzzer reports it):
 *  - no crash, no sanitizer report, every error one line naming the file;
 *  - a record the checker hands out holds n_rows × top_k ids below n_experts, distinct within a
 *    row, and finite weights >= 0, its rows equal to its step's;
 *  - the analyzer's validation refuses exactly what the checker refuses, and the simulator's
 *    loader and route replay accept nothing the checker refuses.
 * The BLOB decoders get the input's tail directly as well (sizes that do and do not match), and
 * the reading of a run's quant_types text (mp_expert_quant_from_types) the input as a string.
 */
#include <math.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "analyzer/validate.h"
#include "collector/route_replay.h"
#include "collector/trace.h"
#include "collector/trace_check.h"
#include "collector/trace_read.h"
#include "runtime/model.h"
#include "simulator/sim_load.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

typedef struct cursor {
    const uint8_t *p;
    size_t n, at;
} cursor;

static unsigned byte(cursor *c) { return c->at < c->n ? c->p[c->at++] : 0; }
static unsigned u16(cursor *c) { return byte(c) | byte(c) << 8; }

static void exec(sqlite3 *db, const char *sql)
{
    if (sqlite3_exec(db, sql, NULL, NULL, NULL) != SQLITE_OK) {
        fprintf(stderr, "fuzz_trace: %s: %s\n", sql, sqlite3_errmsg(db));
        abort();
    }
}

typedef struct node {
    int64_t index, experts, top_k, id_bytes;
    int wf; /* 0 f16, 1 f32, 2 unknown */
} node;

/* Build the trace at path from the recipe; returns false if SQLite itself refused a row (a
 * uniqueness clash the recipe made): such inputs are skipped. */
static bool build(const char *path, cursor *c)
{
    unlink(path);
    sqlite3 *db;
    if (sqlite3_open(path, &db) != SQLITE_OK)
        abort();
    exec(db, "PRAGMA journal_mode=OFF; PRAGMA synchronous=OFF; PRAGMA ignore_check_constraints=ON");
    exec(db, mp_trace_schema_sql);
    const unsigned flags = byte(c);
    node nodes[4];
    const int n_nodes = 1 + (int)(flags & 3);
    int64_t index = 0;
    for (int i = 0; i < n_nodes; i++) {
        const unsigned b = byte(c);
        node *x = &nodes[i];
        x->index = index;
        index += 1 + (b >> 6 == 3 ? 4096 : b >> 6); /* sometimes beyond 4095 */
        x->experts = b & 0x20 ? 1 + u16(c) : 1 + byte(c) % 64;
        x->top_k = 1 + byte(c) % 8;
        x->id_bytes = b & 0x10 ? 2 : (b & 0x08 ? 3 : 1);
        x->wf = (b >> 1) % 3 == 2 && (b & 1) ? 2 : (b >> 1) & 1;
    }
    static const char *const wfs[3] = {"f16", "f32", "bf16"};
    static const char *const statuses[4] = {"complete", "complete", "running", "aborted"};
    char sql[1024];
    snprintf(sql, sizeof sql,
             "INSERT INTO run(id, moeplan_version, source, n_moe_layers, n_experts, top_k, start_time,"
             " status, config_json) VALUES (1, 'fuzz', 'csv', %d, %lld, %lld, 't', '%s', %s)",
             flags & 0x40 ? n_nodes + 1 : n_nodes,
             (long long)(flags & 0x80 ? nodes[0].experts + 1 : nodes[0].experts),
             (long long)nodes[0].top_k, statuses[(flags >> 2) & 3],
             flags & 0x10 ? "'{\"truncated\": true}'" : "NULL");
    exec(db, sql);
    bool ok = true;
    for (int i = 0; i < n_nodes && ok; i++) {
        snprintf(sql, sizeof sql,
                 "INSERT INTO nodes VALUES (%lld, 'moe', 'n', %d, %lld, %lld, %d, %lld, '%s')",
                 (long long)nodes[i].index, i, (long long)nodes[i].experts, (long long)nodes[i].top_k,
                 4096 * (i + 1), (long long)nodes[i].id_bytes, wfs[nodes[i].wf]);
        ok = sqlite3_exec(db, sql, NULL, NULL, NULL) == SQLITE_OK;
    }
    const int n_req = 1 + (int)(byte(c) % 3);
    int64_t n_steps = 0, n_routing = 0;
    int64_t n_timing = 0;
    sqlite3_stmt *ins_step, *ins_route, *ins_timing;
    if (sqlite3_prepare_v2(db, "INSERT INTO steps VALUES (?1, ?2, ?3, ?4, NULL, 100)", -1, &ins_step, NULL) ||
        sqlite3_prepare_v2(db, "INSERT INTO routing(key, n_rows, expert_ids, weights) VALUES (?1, ?2, ?3, ?4)",
                           -1, &ins_route, NULL) ||
        sqlite3_prepare_v2(db, "INSERT INTO timing(key, gpu_expert_ns, cpu_expert_ns, h2d_bytes, h2d_ns, d2h_bytes,"
                           " d2h_ns, sync_ns, merge_ns, hits, misses, tier_hits, tier_late, tier_admissions,"
                           " tier_evictions, tier_copy_bytes, served) VALUES (?1, 1, 1, 0, 0, 0, 0, 0, 0, ?2, ?3, ?4,"
                           " 0, 0, 0, 0, ?5)", -1, &ins_timing, NULL))
        abort();
    static uint8_t ids[4 * 8 * 8 * 2 + 16], wts[4 * 8 * 8 * 4 + 16];
    for (int r = 0; r < n_req && ok; r++) {
        const unsigned rb = byte(c);
        const int64_t request_id = r + (rb & 0x80 ? 1 : 0);
        snprintf(sql, sizeof sql, "INSERT INTO requests(request_id, ord, external_id) VALUES (%lld, %d, %s)",
                 (long long)request_id, rb & 0x40 ? 0 : r, rb & 0x20 ? "'x'" : "NULL");
        ok = sqlite3_exec(db, sql, NULL, NULL, NULL) == SQLITE_OK;
        const int steps = rb & 3;
        for (int s = 0; s <= steps && ok; s++) {
            const unsigned sb = byte(c);
            const int64_t step = s + (sb & 0x80 ? 1 : 0);
            const int rows = sb & 0x40 ? 0 : 1 + (int)(sb & 7);
            sqlite3_bind_int64(ins_step, 1, request_id);
            sqlite3_bind_int64(ins_step, 2, step);
            sqlite3_bind_text(ins_step, 3, sb & 0x20 ? "other" : s ? "decode" : "prefill", -1, SQLITE_STATIC);
            sqlite3_bind_int64(ins_step, 4, rows);
            ok = sqlite3_step(ins_step) == SQLITE_DONE;
            sqlite3_reset(ins_step);
            n_steps++;
            if (!ok || (sb & 0x10)) /* a step without routing */
                continue;
            size_t ni = 0, nw = 0;
            for (int i = 0; i < n_nodes; i++) {
                const int64_t k = nodes[i].top_k, e = nodes[i].experts;
                const int64_t idb = nodes[i].id_bytes > 2 ? 1 : nodes[i].id_bytes;
                const int64_t wb = nodes[i].wf == 1 ? 4 : 2;
                for (int64_t j = 0; j < rows * k; j++) {
                    /* bytes below 250: expert (slot + byte) mod experts, distinct within a row (the
                     * modulus is one more than the experts when bit 6 is set: then out of range);
                     * 250 and above: an id far out of range, or repeated */
                    const unsigned v = byte(c);
                    const int64_t id = v >= 250 ? (v & 1 ? (int64_t)v * 97 : 0)
                                                : (j % k + (int64_t)v) % (e + (v & 0x40 ? 1 : 0));
                    for (int64_t q = 0; q < idb; q++)
                        ids[ni++] = (uint8_t)(id >> (8 * q));
                    /* bytes below 250: the weight (byte + 1) / 256; 250..253 NaN or inf, 254..255 < 0 */
                    const unsigned w = byte(c);
                    if (wb == 2) {
                        const uint16_t h = w >= 254 ? 0xBC00 : w >= 250 ? (uint16_t)(0x7C00 | (w & 1))
                                                                        : (uint16_t)(0x1C00 + w);
                        wts[nw++] = (uint8_t)h, wts[nw++] = (uint8_t)(h >> 8);
                    } else {
                        const float f = w >= 254 ? -1.0f : w >= 250 ? (w & 1 ? NAN : INFINITY) : (float)(w + 1) / 256.0f;
                        memcpy(wts + nw, &f, 4);
                        nw += 4;
                    }
                }
            }
            const unsigned cut = byte(c);
            if (cut & 0x80 && ni)
                ni -= 1 + cut % ni; /* cut short */
            if (cut & 0x40)
                ids[ni++] = 0; /* one byte too many */
            if (cut & 0x20 && nw)
                nw -= 1 + cut % nw;
            sqlite3_bind_int64(ins_route, 1, request_id << 24 | step);
            sqlite3_bind_int64(ins_route, 2, cut & 0x10 ? rows + 1 : rows);
            sqlite3_bind_blob(ins_route, 3, ids, (int)ni, SQLITE_STATIC);
            sqlite3_bind_blob(ins_route, 4, wts, (int)nw, SQLITE_STATIC);
            ok = sqlite3_step(ins_route) == SQLITE_DONE;
            sqlite3_reset(ins_route);
            n_routing += n_nodes;
            if (!ok || !(sb & 0x08)) /* a step without timing rows */
                continue;
            for (int i = 0; i < n_nodes && ok; i++) {
                /* codes below 5 are paths (byte % 5, mostly), 5..7 out of range; the counts agree
                 * with the codes unless the recipe says otherwise */
                static uint8_t served[8 * 8 + 2];
                const unsigned tb = byte(c);
                int64_t ns = rows * nodes[i].top_k, hits = 0, tier = 0;
                for (int64_t j = 0; j < ns; j++) {
                    const unsigned v = byte(c);
                    served[j] = (uint8_t)(v >= 252 ? 5 + v % 3 : v % 5);
                    hits += served[j] <= 1;
                    tier += served[j] == 1;
                }
                if (tb & 0x01 && ns)
                    ns--; /* cut short */
                if (tb & 0x02)
                    served[ns++] = 0; /* one too many */
                sqlite3_bind_int64(ins_timing, 1, request_id << 36 | step << 12 | (tb & 0x04 ? 4095 : nodes[i].index));
                sqlite3_bind_int64(ins_timing, 2, hits + (tb & 0x08 ? 1 : 0));
                sqlite3_bind_int64(ins_timing, 3, rows * nodes[i].top_k - hits - (tb & 0x10 ? 1 : 0));
                sqlite3_bind_int64(ins_timing, 4, tier + (tb & 0x20 ? 1 : 0));
                if (tb & 0x40)
                    sqlite3_bind_null(ins_timing, 5);
                else
                    sqlite3_bind_blob(ins_timing, 5, served, (int)ns, SQLITE_STATIC);
                ok = sqlite3_step(ins_timing) == SQLITE_DONE;
                sqlite3_reset(ins_timing);
                n_timing++;
            }
        }
    }
    sqlite3_finalize(ins_step);
    sqlite3_finalize(ins_route);
    sqlite3_finalize(ins_timing);
    if (ok && !(flags & 0x20)) {
        const unsigned d = byte(c);
        snprintf(sql, sizeof sql, "INSERT INTO footer VALUES (1, %d, %lld, %lld, %lld, %d)", n_req,
                 (long long)(n_steps + (d & 1)), (long long)(n_routing + ((d >> 1) & 1)),
                 (long long)(n_timing + ((d >> 2) & 1)), (d >> 3) & 1);
        exec(db, sql);
    }
    sqlite3_close(db);
    return ok;
}

static void one_line(const char *msg, const char *path)
{
    if (!msg[0] || strchr(msg, '\n') || !strstr(msg, path))
        abort();
}

/* The checker's verdict (MP_OK: every record handed out and checked, with the properties). */
static mp_status checker(const char *path)
{
    mp_trace_check *c;
    mp_error err;
    mp_status st = mp_trace_check_open(path, NULL, NULL, &c, &err);
    if (st && getenv("MP_FUZZ_TRACE_VERBOSE"))
        fprintf(stderr, "fuzz_trace: %s\n", err.msg);
    if (st) {
        one_line(err.msg, path);
        return st;
    }
    mp_trace_check_iter *it;
    if ((st = mp_trace_check_begin(c, -1, &it, &err)))
        abort();
    mp_trace_checked_rec rec;
    int rc;
    while ((rc = mp_trace_check_next(it, &rec, &err)) == 1) {
        if (rec.n_rows < 1 || rec.top_k < 1 || rec.top_k > rec.n_experts)
            abort();
        for (int64_t row = 0; row < rec.n_rows; row++)
            for (int64_t j = 0; j < rec.top_k; j++) {
                const int64_t i = row * rec.top_k + j;
                if (rec.expert_ids[i] >= rec.n_experts || !isfinite(rec.weights[i]) || rec.weights[i] < 0)
                    abort();
                for (int64_t q = 0; q < j; q++)
                    if (rec.expert_ids[row * rec.top_k + q] == rec.expert_ids[i])
                        abort();
            }
    }
    if (rc < 0 && getenv("MP_FUZZ_TRACE_VERBOSE"))
        fprintf(stderr, "fuzz_trace: %s\n", err.msg);
    if (rc < 0)
        one_line(err.msg, path);
    mp_trace_check_end(it);
    mp_trace_check_close(c);
    return rc < 0 ? (mp_status)rc : MP_OK;
}

static mp_status analyzer(const char *path)
{
    mp_an_problems pb;
    mp_error err;
    if (mp_an_problems_init(&pb, 1, &err))
        abort();
    mp_an_input in;
    const char *paths[1] = {path};
    mp_status st = mp_an_input_open(&in, paths, 1, NULL, &pb, &err);
    if (st == MP_OK)
        st = mp_an_scan(&in, &pb, NULL, NULL, &err);
    mp_an_input_close(&in);
    mp_an_problems_free(&pb);
    return st;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    /* the decoders on the raw bytes: any size, the one that matches and the ones that do not */
    int32_t ids[64];
    float w[64];
    mp_error err;
    const size_t tail = size < 128 ? size : 128;
    for (int64_t n = 0; n <= 64; n += 16) {
        mp_trace_decode_ids(data, tail < 2 * (size_t)n ? tail : 2 * (size_t)n, 1 + (n & 1), n, ids, &err);
        mp_trace_decode_weights(data, tail < 4 * (size_t)n ? tail : 4 * (size_t)n, n & 16 ? "f16" : "f32", n, w, &err);
    }
    /* the run's quant_types text as the simulator reads it (mp_expert_quant_from_types): the input
     * as a string; a name it gives is a NUL-terminated run of type names and '/' */
    char text[256], name[MP_EXPERT_QUANT_MAX];
    const size_t tn = size < sizeof text - 1 ? size : sizeof text - 1;
    memcpy(text, data, tn);
    text[tn] = 0;
    memset(name, 0x5a, sizeof name);
    if (mp_expert_quant_from_types(text, name)) {
        if (!memchr(name, 0, sizeof name) || !name[0])
            abort();
        for (const char *q = name; *q; q++)
            if (!(*q == '/' || *q == '_' || (*q >= '0' && *q <= '9') || (*q >= 'A' && *q <= 'Z')))
                abort();
    }
    static char path[128];
    if (!path[0])
        snprintf(path, sizeof path, "%s/mp_fuzz_trace_%d.db",
                 access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp", (int)getpid());
    cursor c = {data, size, 0};
    if (!build(path, &c)) {
        unlink(path);
        return 0;
    }
    const mp_status chk = checker(path), an = analyzer(path);
    if (getenv("MP_FUZZ_TRACE_VERBOSE")) /* what each input became, for writing seeds */
        fprintf(stderr, "fuzz_trace: checker %d, analyzer %d\n", chk, an);
    if ((chk == MP_OK) != (an == MP_OK))
        abort(); /* the analyzer and the checker disagree */
    mp_sim_trace t;
    mp_sim_trace_facts facts;
    if (mp_sim_load_trace(path, NULL, &t, &facts, &err) == MP_OK) {
        if (chk != MP_OK)
            abort(); /* the simulator accepted what the checker refused */
        mp_sim_trace_free(&t);
    } else {
        one_line(err.msg, path);
    }
    /* route replay with the trace's own geometry: it must stop with an error before its first
     * wrap (a whole pass) whenever the checker refused */
    mp_trace_reader *r;
    int64_t L = 0, E = 0, K = 0;
    if (mp_trace_reader_open(path, &r, &err) == MP_OK) {
        L = mp_trace_reader_n_nodes(r);
        if (L > 0)
            E = mp_trace_reader_nodes(r)[0].n_experts, K = mp_trace_reader_nodes(r)[0].top_k;
        mp_trace_reader_close(r);
    }
    mp_route_replay *rr;
    if (L >= 1 && L <= 4 && K >= 1 && K <= 64 && E >= K && E <= 65536 &&
        mp_route_replay_open(path, L, E, K, &rr, &err) == MP_OK) {
        mp_route_source src = mp_route_replay_source(rr);
        int32_t rids[64];
        float rw[64];
        bool failed = false;
        for (int row = 0; row < 4096 && !failed && mp_route_replay_wraps(rr) == 0; row++)
            for (int64_t layer = 0; layer < L && !failed; layer++)
                failed = src.route(src.user, layer, 1, K, rids, rw) != 0;
        if (failed)
            one_line(mp_route_replay_error(rr)->msg, path);
        else if (chk != MP_OK)
            abort(); /* route replay accepted a whole pass of what the checker refused */
        mp_route_replay_close(rr);
    }
    unlink(path);
    return 0;
}
