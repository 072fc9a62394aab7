/* tests/unit/test_faults.c — fault injection, as SQLite's test_malloc and I/O error tests: every
 * allocation and write of the trace writer, the report writers (analyze, simulate), the GGUF
 * writer and the STRP writer is made to fail in turn (base/fault.h: the Nth fault point from
 * arming; for the trace writer also SQLite's own allocations and its VFS writes, syncs and
 * truncations). For every N the operation must fail cleanly — an error, one line — leave every
 * pre-existing output byte for byte as it was (or, for a command with several outputs, each one
 * either old or new), and leave no temporary. Each N runs in a child process that exits through
 * exit(), so an ASan build's leak checker runs after every injected failure (a leak makes the
 * child exit non-zero). N grows until a run passes every point without a failure. */
#include <criterion/criterion.h>
#include <dirent.h>
#include <fcntl.h>
#include <math.h>
#include <sqlite3.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "analyzer/commands.h"
#include "simulator/commands.h"
#include "collector/import.h"
#include "collector/trace.h"
#include "collector/trace_check.h"
#include "kernels/quant.h"
#include "base/fault.h"
#include "gguf/gguf.h"
#include "runtime/strp.h"
#include "tests/unit/analyzer_fixture.h"
#include "tests/unit/cli_util.h"

static char dir[256];

static void setup(void)
{
    /* tmpfs where there is one: thousands of runs each fsync several times (~10 ms on ext4) */
    struct stat sb;
    snprintf(dir, sizeof dir, "%s/mp_test_faults_XXXXXX",
             stat("/dev/shm", &sb) == 0 && S_ISDIR(sb.st_mode) && access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp");
    cr_assert_not_null(mkdtemp(dir));
}
static void teardown(void)
{
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    cr_assert_eq(system(cmd), 0);
}
TestSuite(faults, .init = setup, .fini = teardown, .timeout = 300);

static const char *at(const char *name)
{
    static char p[8][600];
    static int i;
    i = (i + 1) % 8;
    snprintf(p[i], sizeof p[i], "%s/%s", dir, name);
    return p[i];
}

typedef struct blob {
    char *p;
    size_t n;
} blob;

static blob slurp(const char *path)
{
    blob b = {0};
    FILE *f = fopen(path, "rb");
    if (!f)
        return b;
    fseek(f, 0, SEEK_END);
    b.n = (size_t)ftell(f);
    rewind(f);
    b.p = malloc(b.n + 1);
    if (fread(b.p, 1, b.n, f) != b.n)
        b.n = 0;
    fclose(f);
    return b;
}

static bool same(blob a, blob b)
{
    return a.p && b.p && a.n == b.n && !memcmp(a.p, b.p, a.n);
}

static void put(const char *path, const char *text)
{
    FILE *f = fopen(path, "wb");
    cr_assert_not_null(f);
    fputs(text, f);
    cr_assert_eq(fclose(f), 0);
}

/* ---- what a child checks; a failed check prints and exits 1 ---- */

static void child_fail(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
static void child_fail(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "fault check: ");
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    exit(1);
}

/* Nothing in d whose name marks a writer's leftovers. */
static void child_no_temporaries(const char *d, int64_t nth)
{
    DIR *dd = opendir(d);
    if (!dd)
        child_fail("cannot list %s", d);
    for (struct dirent *e; (e = readdir(dd));)
        if (strstr(e->d_name, ".tmp.") || strstr(e->d_name, ".old.") || strstr(e->d_name, "-wal") ||
            strstr(e->d_name, "-shm") || strstr(e->d_name, "-journal"))
            child_fail("fault %lld left %s/%s", (long long)nth, d, e->d_name);
    closedir(dd);
}

static void child_one_line(const char *msg, int64_t nth)
{
    if (!msg[0] || strchr(msg, '\n'))
        child_fail("fault %lld: the error is not one line: '%s'", (long long)nth, msg);
}

/* ---- SQLite behind fault points: its allocator and its default VFS's writes ---- */

static sqlite3_mem_methods real_mem;

static void *fault_sqlite_malloc(int n) { return mp_fault_point() ? NULL : real_mem.xMalloc(n); }
static void *fault_sqlite_realloc(void *p, int n) { return mp_fault_point() ? NULL : real_mem.xRealloc(p, n); }

typedef struct fault_file {
    sqlite3_file base;  /* methods: fault_io */
    sqlite3_file *real; /* the default VFS's file, allocated right after this struct */
} fault_file;

static sqlite3_vfs *real_vfs;

static int ff_close(sqlite3_file *f) { return ((fault_file *)f)->real->pMethods->xClose(((fault_file *)f)->real); }
static int ff_read(sqlite3_file *f, void *b, int n, sqlite3_int64 o)
{
    sqlite3_file *r = ((fault_file *)f)->real;
    return r->pMethods->xRead(r, b, n, o);
}
static int ff_write(sqlite3_file *f, const void *b, int n, sqlite3_int64 o)
{
    sqlite3_file *r = ((fault_file *)f)->real;
    return mp_fault_point() ? SQLITE_IOERR_WRITE : r->pMethods->xWrite(r, b, n, o);
}
static int ff_truncate(sqlite3_file *f, sqlite3_int64 size)
{
    sqlite3_file *r = ((fault_file *)f)->real;
    return mp_fault_point() ? SQLITE_IOERR_TRUNCATE : r->pMethods->xTruncate(r, size);
}
static int ff_sync(sqlite3_file *f, int flags)
{
    sqlite3_file *r = ((fault_file *)f)->real;
    return mp_fault_point() ? SQLITE_IOERR_FSYNC : r->pMethods->xSync(r, flags);
}
#define FWD(name, sig, args)                                                                       \
    static int ff_##name sig                                                                       \
    {                                                                                              \
        sqlite3_file *r = ((fault_file *)f)->real;                                                 \
        return r->pMethods->x##name args;                                                          \
    }
FWD(FileSize, (sqlite3_file *f, sqlite3_int64 *s), (r, s))
FWD(Lock, (sqlite3_file *f, int l), (r, l))
FWD(Unlock, (sqlite3_file *f, int l), (r, l))
FWD(CheckReservedLock, (sqlite3_file *f, int *o), (r, o))
FWD(FileControl, (sqlite3_file *f, int op, void *a), (r, op, a))
FWD(SectorSize, (sqlite3_file *f), (r))
FWD(DeviceCharacteristics, (sqlite3_file *f), (r))
FWD(ShmMap, (sqlite3_file *f, int pg, int sz, int ext, void volatile **pp), (r, pg, sz, ext, pp))
FWD(ShmLock, (sqlite3_file *f, int off, int n, int fl), (r, off, n, fl))
FWD(ShmUnmap, (sqlite3_file *f, int del), (r, del))
static void ff_ShmBarrier(sqlite3_file *f)
{
    sqlite3_file *r = ((fault_file *)f)->real;
    r->pMethods->xShmBarrier(r);
}

static const sqlite3_io_methods fault_io = {
    .iVersion = 2, .xClose = ff_close, .xRead = ff_read, .xWrite = ff_write,
    .xTruncate = ff_truncate, .xSync = ff_sync, .xFileSize = ff_FileSize, .xLock = ff_Lock,
    .xUnlock = ff_Unlock, .xCheckReservedLock = ff_CheckReservedLock,
    .xFileControl = ff_FileControl, .xSectorSize = ff_SectorSize,
    .xDeviceCharacteristics = ff_DeviceCharacteristics, .xShmMap = ff_ShmMap,
    .xShmLock = ff_ShmLock, .xShmBarrier = ff_ShmBarrier, .xShmUnmap = ff_ShmUnmap,
};

static int fv_open(sqlite3_vfs *v, const char *name, sqlite3_file *f, int flags, int *out_flags)
{
    fault_file *ff = (fault_file *)f;
    ff->real = (sqlite3_file *)(ff + 1);
    int rc = real_vfs->xOpen(real_vfs, name, ff->real, flags, out_flags);
    ff->base.pMethods = rc == SQLITE_OK && ff->real->pMethods ? &fault_io : NULL;
    return rc;
}

static sqlite3_vfs fault_vfs;

/* In a child, before any SQLite use: allocations and file writes pass fault points. */
static void sqlite_under_faults(void)
{
    sqlite3_shutdown();
    cr_assert_eq(sqlite3_config(SQLITE_CONFIG_GETMALLOC, &real_mem), SQLITE_OK);
    sqlite3_mem_methods m = real_mem;
    m.xMalloc = fault_sqlite_malloc;
    m.xRealloc = fault_sqlite_realloc;
    cr_assert_eq(sqlite3_config(SQLITE_CONFIG_MALLOC, &m), SQLITE_OK);
    cr_assert_eq(sqlite3_initialize(), SQLITE_OK);
    real_vfs = sqlite3_vfs_find(NULL);
    fault_vfs = *real_vfs;
    fault_vfs.zName = "fault";
    fault_vfs.szOsFile = (int)sizeof(fault_file) + real_vfs->szOsFile;
    fault_vfs.xOpen = fv_open;
    cr_assert_eq(sqlite3_vfs_register(&fault_vfs, 1), SQLITE_OK);
}

/* ---- the sweep ---- */

enum { PAST_LAST_POINT = 10 };

typedef struct sweep_case {
    bool sqlite;                          /* SQLite under faults too */
    bool persist;                         /* once failing, every later point fails (disk full) */
    /* run the operation; 0 on success, else nonzero with msg (one line) */
    int (*op)(void *ctx, char *msg, size_t cap);
    /* check what a failed run left; fails the child through child_fail */
    void (*check_failed)(void *ctx, int64_t nth);
    void (*check_ok)(void *ctx);
    void (*reset)(void *ctx); /* put the old outputs back (a run that succeeded replaced them) */
    void *ctx;
} sweep_case;

/* Every point up to DENSE (a persistent fault: up to 100), then every STRIDE-th. SQLite's
 * allocations make the trace writer's sweep 5,206 points long: every point is 50 s of child
 * processes on 2 cores, more than CI can give. Under ASan a child costs about 5 times as much
 * (the five sweeps at 600 / 7 took 410 s on the 2-core development machine, the trace writer's
 * 238 of them), so a sanitized build samples more thinly; MP_FAULT_SWEEP_FULL=1 takes every
 * point. */
#if defined(__SANITIZE_ADDRESS__)
enum { SWEEP_DENSE = 150, SWEEP_STRIDE = 17 };
#else
enum { SWEEP_DENSE = 600, SWEEP_STRIDE = 7 };
#endif
static int64_t next_nth(int64_t nth, bool persist)
{
    static int full = -1;
    if (full < 0)
        full = getenv("MP_FAULT_SWEEP_FULL") && !strcmp(getenv("MP_FAULT_SWEEP_FULL"), "1");
    return full || (nth < SWEEP_DENSE && !persist) || nth < 100 ? nth + 1 : nth + SWEEP_STRIDE;
}

static int64_t sweep(const sweep_case *c, int64_t max_points)
{
    int64_t last_failing = 0;
    for (int64_t nth = 1; nth <= max_points; last_failing = nth, nth = next_nth(nth, c->persist)) {
        c->reset(c->ctx);
        const pid_t pid = fork();
        cr_assert(pid >= 0);
        if (pid == 0) {
            if (c->sqlite)
                sqlite_under_faults();
            char msg[2048] = "";
            mp_fault_arm(nth, c->persist);
            const int rc = c->op(c->ctx, msg, sizeof msg);
            const int64_t failures = mp_fault_failures();
            mp_fault_arm(0, false);
            if (!failures && rc)
                child_fail("no fault injected (nth %lld) but the run failed: %s", (long long)nth, msg);
            if (!rc) { /* a fault the code recovered from (SQLite does, for some) or none: the
                        * output must be whole and right, never silently short */
                c->check_ok(c->ctx);
                exit(failures ? 0 : PAST_LAST_POINT);
            }
            child_one_line(msg, nth);
            c->check_failed(c->ctx, nth);
            exit(0);
        }
        int ws;
        cr_assert_eq(waitpid(pid, &ws, 0), pid);
        cr_assert(WIFEXITED(ws), "fault %lld: the child died (signal %d)", (long long)nth,
                  WIFSIGNALED(ws) ? WTERMSIG(ws) : 0);
        if (WEXITSTATUS(ws) == PAST_LAST_POINT) {
            fprintf(stderr, "fault sweep: %lld points%s\n", (long long)last_failing,
                    c->persist ? " (each failing for good)" : "");
            return last_failing;
        }
        cr_assert_eq(WEXITSTATUS(ws), 0, "fault %lld: check failed or leaked (exit %d)", (long long)nth,
                     WEXITSTATUS(ws));
    }
    cr_assert_fail("more than %lld fault points", (long long)max_points);
    return max_points;
}

/* ---- STRP ---- */

typedef struct strp_ctx {
    mp_strp p;
    blob old_profile, old_manifest;
} strp_ctx;

static int strp_op(void *ctx, char *msg, size_t cap)
{
    strp_ctx *s = ctx;
    mp_error err;
    if (mp_strp_write_file(at("p.strp"), &s->p, &err)) {
        snprintf(msg, cap, "%s", err.msg);
        return 1;
    }
    mp_strp_manifest m;
    mp_strp_manifest_init(&m);
    m.policy = "plan";
    m.params[m.n_params++] = (mp_strp_param){"alpha", 0.5};
    if (mp_strp_manifest_write(at("p.strp.json"), &m, &s->p, &err)) {
        snprintf(msg, cap, "%s", err.msg);
        return 1;
    }
    return 0;
}

static void strp_check_failed(void *ctx, int64_t nth)
{
    strp_ctx *s = ctx;
    blob p = slurp(at("p.strp")), m = slurp(at("p.strp.json"));
    mp_strp q;
    mp_error err;
    const bool new_profile = mp_strp_read_file(at("p.strp"), NULL, &q, &err) == MP_OK;
    if (new_profile)
        mp_strp_free(&q);
    if (!same(p, s->old_profile) && !new_profile)
        child_fail("fault %lld: p.strp is neither the old file nor a valid profile", (long long)nth);
    if (!same(m, s->old_manifest) && !(new_profile && m.p && strstr(m.p, "moeplan-strp-manifest")))
        child_fail("fault %lld: the manifest is neither the old file nor whole", (long long)nth);
    free(p.p), free(m.p);
    child_no_temporaries(dir, nth);
}

static void strp_reset(void *ctx)
{
    (void)ctx;
    put(at("p.strp"), "old profile");
    put(at("p.strp.json"), "old manifest");
}

static void strp_check_ok(void *ctx)
{
    mp_strp q;
    mp_error err;
    if (mp_strp_read_file(at("p.strp"), NULL, &q, &err))
        child_fail("the written profile does not read back: %s", err.msg);
    mp_strp_free(&q);
    (void)ctx;
}

Test(faults, strp_writer_and_manifest)
{
    strp_ctx s = {.p = {.n_layers = 3, .n_experts = 4, .slots = 3, .n_ranked = 3,
                        .table = MP_STRP_TABLE_U64_COUNT}};
    mp_strp_pair pairs[3] = {{0, 1}, {2, 3}, {1, 0}};
    uint64_t counts[12] = {1, 9, 0, 0, 5, 0, 0, 0, 0, 0, 0, 7};
    s.p.ranked = pairs;
    s.p.counts = counts;
    put(at("p.strp"), "old profile");
    put(at("p.strp.json"), "old manifest");
    s.old_profile = slurp(at("p.strp"));
    s.old_manifest = slurp(at("p.strp.json"));
    for (int persist = 0; persist < 2; persist++) {
        sweep_case c = {.persist = persist, .op = strp_op, .check_failed = strp_check_failed,
                        .check_ok = strp_check_ok, .reset = strp_reset, .ctx = &s};
        cr_assert_gt(sweep(&c, 2000), 5);
    }
    char msg[512];
    cr_assert_eq(strp_op(&s, msg, sizeof msg), 0, "%s", msg);
    mp_test_strp_loads(at("p.strp"));
    free(s.old_profile.p), free(s.old_manifest.p);
}

/* ---- GGUF ---- */

static int gguf_op(void *ctx, char *msg, size_t cap)
{
    (void)ctx;
    mp_gguf_writer *w;
    mp_error err;
    if (mp_gguf_writer_open(at("m.gguf"), &w, &err)) {
        snprintf(msg, cap, "%s", err.msg);
        return 1;
    }
    static float data[4096];
    const int64_t ne[2] = {64, 64};
    char name[64];
    mp_status st = mp_gguf_add_str(w, "general.architecture", "test", &err);
    for (int i = 0; !st && i < 20; i++) {
        snprintf(name, sizeof name, "test.key_%d", i);
        st = mp_gguf_add_u32(w, name, (uint32_t)i, &err);
    }
    for (int i = 0; !st && i < 12; i++) {
        snprintf(name, sizeof name, "blk.%d.weight", i);
        st = mp_gguf_add_tensor_info(w, name, 2, ne, MP_TYPE_F32, &err);
    }
    for (int i = 0; !st && i < 12; i++)
        st = mp_gguf_write_data(w, data, sizeof data, &err);
    if (st) {
        mp_gguf_writer_abort(w);
        snprintf(msg, cap, "%s", err.msg);
        return 1;
    }
    if (mp_gguf_writer_finish(w, &err)) {
        snprintf(msg, cap, "%s", err.msg);
        return 1;
    }
    return 0;
}

static blob old_gguf;

static void gguf_check_failed(void *ctx, int64_t nth)
{
    (void)ctx;
    blob b = slurp(at("m.gguf"));
    if (!same(b, old_gguf))
        child_fail("fault %lld: m.gguf changed", (long long)nth);
    free(b.p);
    child_no_temporaries(dir, nth);
}

static void gguf_reset(void *ctx)
{
    (void)ctx;
    put(at("m.gguf"), "old model");
}

static void gguf_check_ok(void *ctx)
{
    (void)ctx;
    mp_gguf *g;
    mp_error err;
    if (mp_gguf_open(at("m.gguf"), &g, &err))
        child_fail("the written model does not read back: %s", err.msg);
    if (mp_gguf_n_tensors(g) != 12 || mp_gguf_n_kv(g) != 21)
        child_fail("the written model has %lld tensors and %lld keys, expected 12 and 21",
                   (long long)mp_gguf_n_tensors(g), (long long)mp_gguf_n_kv(g));
    mp_gguf_close(g);
}

Test(faults, gguf_writer)
{
    put(at("m.gguf"), "old model");
    old_gguf = slurp(at("m.gguf"));
    for (int persist = 0; persist < 2; persist++) {
        sweep_case c = {.persist = persist, .op = gguf_op, .check_failed = gguf_check_failed,
                        .check_ok = gguf_check_ok, .reset = gguf_reset};
        cr_assert_gt(sweep(&c, 5000), 10);
    }
}

/* ---- the trace writer (collect and import write through mp_trace_writer_create) ---- */

static int trace_op(void *ctx, char *msg, size_t cap)
{
    (void)ctx;
    mp_trace_writer *w;
    mp_error err;
    mp_status st = mp_trace_writer_create(at("t.db"), true, &w, &err);
    if (st) {
        snprintf(msg, cap, "%s", err.msg);
        return 1;
    }
    mp_trace_run_info info;
    mp_trace_run_info_init(&info);
    info.source = "moeplan";
    info.n_experts = 8;
    info.top_k = 2;
    info.config_json = "{\"writer\":\"sync\"}";
    st = mp_trace_set_run(w, &info, &err);
    for (int i = 0; !st && i < 2; i++) {
        mp_trace_node nd = {.node_index = i, .node_type = "moe", .node_name = "blk", .layer = i,
                            .n_experts = 8, .top_k = 2, .expert_bytes = 4096};
        st = mp_trace_add_node(w, &nd, &err);
    }
    for (int r = 0; !st && r < 2; r++) {
        st = mp_trace_request_begin(w, r, NULL, NULL, -1, NULL, -1, &err);
        for (int s = 0; !st && s < 3; s++) {
            const int rows = s == 0 ? 40 : 1;
            int32_t ids[80];
            float wt[80];
            for (int i = 0; i < rows; i++)
                ids[2 * i] = (i + s) % 8, ids[2 * i + 1] = (i + s + 1) % 8, wt[2 * i] = 0.6f, wt[2 * i + 1] = 0.4f;
            st = mp_trace_step_begin(w, s, s ? MP_PHASE_DECODE : MP_PHASE_PREFILL, rows, -1, &err);
            for (int nd = 0; !st && nd < 2; nd++)
                st = mp_trace_add_routing(w, nd, rows, 2, ids, wt, &err);
            if (!st)
                st = mp_trace_step_end(w, 100, &err);
        }
        if (!st)
            st = mp_trace_request_end(w, 2, -1, &err);
    }
    if (!st)
        st = mp_trace_finish(w, &err);
    mp_trace_writer_close(w);
    if (st)
        snprintf(msg, cap, "%s", err.msg);
    return st != MP_OK;
}

static blob old_trace;

static void trace_check_failed(void *ctx, int64_t nth)
{
    (void)ctx;
    blob b = slurp(at("t.db"));
    if (!same(b, old_trace))
        child_fail("fault %lld: t.db changed", (long long)nth);
    free(b.p);
    child_no_temporaries(dir, nth);
}

static void trace_reset(void *ctx)
{
    (void)ctx;
    put(at("t.db"), "old trace");
}

/* The new trace, whole: it passes the fail-closed reader and holds all 12 records of 2 × 3 steps. */
static void trace_check_ok(void *ctx)
{
    (void)ctx;
    mp_trace_check *c;
    mp_trace_check_iter *it;
    mp_error err;
    if (mp_trace_check_open(at("t.db"), NULL, NULL, &c, &err) || mp_trace_check_begin(c, -1, &it, &err))
        child_fail("t.db is not a valid trace: %s", err.msg);
    mp_trace_checked_rec rec;
    int rc, n = 0;
    while ((rc = mp_trace_check_next(it, &rec, &err)) == 1)
        n++;
    if (rc != 0 || n != 12)
        child_fail("t.db: %d records, expected 12 (%s)", n, rc ? err.msg : "");
    mp_trace_check_end(it);
    mp_trace_check_close(c);
    child_no_temporaries(dir, 0);
}

Test(faults, trace_writer_with_sqlite_allocations_and_writes)
{
    put(at("t.db"), "old trace");
    old_trace = slurp(at("t.db"));
    for (int persist = 0; persist < 2; persist++) {
        sweep_case c = {.sqlite = true, .persist = persist, .op = trace_op,
                        .check_failed = trace_check_failed, .check_ok = trace_check_ok,
                        .reset = trace_reset};
        cr_assert_gt(sweep(&c, 20000), 50);
    }
}

/* ---- report writers: analyze and simulate, in-process, over existing outputs ---- */

typedef struct files_ctx {
    const char *names[5];
    blob old[5], new_[5];
    int n;
    const char *argv[24];
    int argc;
    int (*cmd)(int argc, char **argv);
    bool whole; /* a failed run leaves every output old (a directory renamed at once) */
} files_ctx;

static int cmd_op(void *ctx, char *msg, size_t cap)
{
    files_ctx *f = ctx;
    char *argv[24];
    for (int i = 0; i < f->argc; i++)
        argv[i] = (char *)f->argv[i];
    fflush(stdout), fflush(stderr);
    const int saved_out = dup(1), saved_err = dup(2);
    const int out = open("/dev/null", O_WRONLY), err = open(at("stderr"), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (saved_out < 0 || saved_err < 0 || out < 0 || err < 0)
        child_fail("cannot redirect the command's output");
    dup2(out, 1), dup2(err, 2), close(out), close(err);
    const int rc = f->cmd(f->argc, argv);
    fflush(stdout), fflush(stderr);
    dup2(saved_out, 1), dup2(saved_err, 2), close(saved_out), close(saved_err);
    blob e = slurp(at("stderr"));
    unlink(at("stderr"));
    /* notes may come first; the error is the last line, and the only one */
    int errors = 0;
    const char *last = NULL;
    for (char *line = e.p, *nl; line && line < e.p + e.n; line = nl + 1) {
        nl = memchr(line, '\n', (size_t)(e.p + e.n - line));
        if (!nl)
            nl = e.p + e.n;
        *nl = '\0';
        if (strstr(line, ": error: "))
            errors++, last = line;
    }
    if (rc && errors != 1)
        child_fail("exit %d with %d error lines (one expected)", rc, errors);
    snprintf(msg, cap, "%s", last ? last : "");
    free(e.p);
    return rc;
}

/* Each output is its old bytes or the new ones (a reference run's); for a directory report,
 * every file of it. */
static void files_check_failed(void *ctx, int64_t nth)
{
    files_ctx *f = ctx;
    for (int i = 0; i < f->n; i++) {
        blob b = slurp(at(f->names[i]));
        if (!same(b, f->old[i]) && (f->whole || !same(b, f->new_[i])))
            child_fail("fault %lld: %s is not its old content%s", (long long)nth, f->names[i],
                       f->whole ? "" : " nor the new one");
        free(b.p);
    }
    child_no_temporaries(dir, nth);
}

static void files_check_ok(void *ctx)
{
    files_ctx *f = ctx;
    for (int i = 0; i < f->n; i++) {
        blob b = slurp(at(f->names[i]));
        if (!same(b, f->new_[i]))
            child_fail("%s differs from the reference run's", f->names[i]);
        free(b.p);
    }
}

static void files_reset(void *ctx)
{
    files_ctx *f = ctx;
    for (int i = 0; i < f->n; i++) {
        FILE *o = fopen(at(f->names[i]), "wb");
        cr_assert_not_null(o);
        fwrite(f->old[i].p, 1, f->old[i].n, o);
        cr_assert_eq(fclose(o), 0);
    }
}

/* Run the command once without faults (the new contents), then put the old contents back. */
static void reference_run(files_ctx *f, const char *old_text)
{
    char *argv[24];
    for (int i = 0; i < f->argc; i++)
        argv[i] = (char *)f->argv[i];
    for (int i = 0; i < f->n; i++)
        put(at(f->names[i]), old_text);
    cr_assert_eq(f->cmd(f->argc, argv), 0, "the reference run failed");
    for (int i = 0; i < f->n; i++) {
        f->new_[i] = slurp(at(f->names[i]));
        put(at(f->names[i]), old_text);
        f->old[i] = slurp(at(f->names[i]));
    }
}

Test(faults, simulate_report_json_svg_profile_manifest)
{
    put(at("r.csv"), "seq,pos,layer,e0,e1,w0,w1\n0,0,4,0,1,0.5,0.3\n0,0,7,2,3,0.6,0.2\n"
                     "0,1,4,0,2,0.5,0.3\n0,1,7,2,0,0.6,0.2\n1,0,4,0,3,0.5,0.3\n1,0,7,2,1,0.6,0.2\n");
    mp_import_options o = {.format = MP_IMPORT_CSV, .n_experts = 4, .weight_format = MP_TRACE_W_F32};
    mp_import_result res;
    mp_error err;
    cr_assert_eq(mp_import_file(at("r.csv"), at("t.db"), &o, &res, &err), MP_OK, "%s", err.msg);
    static char costs[600];
    snprintf(costs, sizeof costs, "%s/tests/fixtures/costs/fixture.json", getenv("MP_SOURCE_ROOT"));
    static files_ctx f = {.names = {"s.json", "s.svg", "p.strp", "p.strp.json"}, .n = 4,
                          .cmd = mp_cmd_simulate};
    const char *argv[] = {"simulate", at("t.db"), "--costs", costs, "--expert", "Q4_K",
                          "--budget", "3000000B", "--non-expert-bytes", "1000000", "--policy",
                          "static-topn", "--profile-policy", "static-topn", "--force", "--json",
                          at("s.json"), "--svg", at("s.svg"), "--emit-profile", at("p.strp")};
    f.argc = (int)(sizeof argv / sizeof argv[0]);
    for (int i = 0; i < f.argc; i++)
        f.argv[i] = strdup(argv[i]);
    reference_run(&f, "old output");
    sweep_case c = {.op = cmd_op, .check_failed = files_check_failed, .check_ok = files_check_ok,
                    .reset = files_reset, .ctx = &f};
    cr_assert_gt(sweep(&c, 20000), 20);
}

Test(faults, analyze_report_directory)
{
    char *t = make_trace(dir, "t.db", (trace_opts){0});
    static files_ctx f = {.cmd = mp_cmd_analyze, .whole = true};
    static const char *const report[] = {"rep/summary.json", "rep/report.html", "rep/coverage.csv",
                                         "rep/heatmap.svg", "rep/requests.csv"};
    f.n = 5;
    for (int i = 0; i < 5; i++)
        f.names[i] = report[i];
    const char *argv[] = {"analyze", t, "--out", at("rep"), "--force"};
    f.argc = 5;
    for (int i = 0; i < f.argc; i++)
        f.argv[i] = strdup(argv[i]);
    free(t);
    /* an old report made by the analyzer, its files then marked */
    cr_assert_eq(mkdir(at("rep"), 0777), 0);
    reference_run(&f, "old report file");
    sweep_case c = {.op = cmd_op, .check_failed = files_check_failed, .check_ok = files_check_ok,
                    .reset = files_reset, .ctx = &f};
    cr_assert_gt(sweep(&c, 20000), 20);
}
