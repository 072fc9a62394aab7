/* tests/unit/test_inspect.c — `moeplan inspect` end to end: runs the built binary ($MP_MOEPLAN,
 * set by tests/meson.build) on the GGUFWriter fixture, a truncated copy of it and a missing
 * file, and checks exit codes, the per-layer expert table, totals and the one-line errors. */
#include <criterion/criterion.h>
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "kernels/quant.h"
#include "gguf/gguf.h"

typedef struct run_result {
    int status; /* exit code */
    char *out, *err;
} run_result;

static char *slurp(const char *path)
{
    FILE *f = fopen(path, "rb");
    cr_assert_not_null(f, "%s", path);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc((size_t)n + 1);
    cr_assert_eq(fread(buf, 1, (size_t)n, f), (size_t)n);
    buf[n] = 0;
    fclose(f);
    return buf;
}

/* Run moeplan with args (NULL-terminated), capturing stdout and stderr. */
static run_result run_moeplan(const char *const *args)
{
    const char *exe = getenv("MP_MOEPLAN");
    cr_assert_not_null(exe, "MP_MOEPLAN must be set (tests/meson.build)");
    char out_path[] = "/tmp/mp_inspect_out_XXXXXX", err_path[] = "/tmp/mp_inspect_err_XXXXXX";
    int out_fd = mkstemp(out_path), err_fd = mkstemp(err_path);
    cr_assert(out_fd >= 0 && err_fd >= 0);
    pid_t pid = fork();
    cr_assert(pid >= 0);
    if (pid == 0) {
        dup2(out_fd, 1);
        dup2(err_fd, 2);
        char *argv[16];
        int n = 0;
        argv[n++] = (char *)exe;
        for (; args[n - 1] && n < 15; n++)
            argv[n] = (char *)args[n - 1];
        argv[n] = NULL;
        execv(exe, argv);
        _exit(127);
    }
    int ws;
    cr_assert_eq(waitpid(pid, &ws, 0), pid);
    close(out_fd);
    close(err_fd);
    run_result r = {WIFEXITED(ws) ? WEXITSTATUS(ws) : -1, slurp(out_path), slurp(err_path)};
    unlink(out_path);
    unlink(err_path);
    return r;
}

static void free_result(run_result *r)
{
    free(r->out);
    free(r->err);
}

static const char *fixture(void)
{
    static char path[1024];
    const char *root = getenv("MP_SOURCE_ROOT");
    cr_assert_not_null(root);
    snprintf(path, sizeof path, "%s/tests/fixtures/gguf_pywriter.gguf", root);
    return path;
}

static int count_lines(const char *s)
{
    int n = 0;
    for (; *s; s++)
        n += *s == '\n';
    return n;
}

Test(inspect, text_report_of_a_moe_model)
{
    const char *args[] = {"inspect", fixture(), "--tensors", NULL};
    run_result r = run_moeplan(args);
    cr_assert_eq(r.status, 0, "stderr: %s", r.err);
    cr_assert_str_eq(r.err, "");
    cr_assert_not_null(strstr(r.out, "version: 3\n"));
    cr_assert_not_null(strstr(r.out, "alignment: 64\n"));
    cr_assert_not_null(strstr(r.out, "n_tensors: 11\n"));
    cr_assert_not_null(strstr(r.out, "test.arr_str"), "metadata listed");
    cr_assert_not_null(strstr(r.out, "[\"a\", \"bc\", \"\", "), "arrays shown");
    /* --tensors: name, type, shape, bytes, offset. */
    cr_assert_not_null(strstr(r.out, "blk.0.ffn_up_exps.weight                 Q4_0  [32, 32, 4]"),
                       "%s", r.out);
    /* One expert: gate Q8_0 32x32 = 1088, up Q4_0 32x32 = 576, down Q8_0 = 1088 bytes. */
    cr_assert_not_null(strstr(r.out, "      0       4         1088          576         1088             2752            11008\n"),
                       "%s", r.out);
    cr_assert_not_null(strstr(r.out, "      1       4         1088          576         1088"));
    cr_assert_not_null(strstr(r.out, "expert_bytes: 22016\n"));
    cr_assert_not_null(strstr(r.out, "non_expert_bytes: 2052\n"));
    cr_assert_not_null(strstr(r.out, "tensor_bytes: 24068\n"));
    free_result(&r);

    const char *args_plain[] = {"inspect", fixture(), NULL};
    r = run_moeplan(args_plain);
    cr_assert_eq(r.status, 0);
    cr_assert_null(strstr(r.out, "\ntensors:"), "no tensor list without --tensors");
    cr_assert_not_null(strstr(r.out, "bytes_per_expert"));
    free_result(&r);
}

Test(inspect, json_report)
{
    const char *args[] = {"inspect", "--json", "--tensors", fixture(), NULL};
    run_result r = run_moeplan(args);
    cr_assert_eq(r.status, 0, "stderr: %s", r.err);
    cJSON *j = cJSON_Parse(r.out);
    cr_assert_not_null(j, "output is JSON: %s", r.out);
    cr_assert_eq(cJSON_GetObjectItem(j, "version")->valueint, 3);
    cr_assert_eq(cJSON_GetArraySize(cJSON_GetObjectItem(j, "tensors")), 11);
    cr_assert_eq(cJSON_GetArraySize(cJSON_GetObjectItem(j, "metadata")), 21);
    cJSON *layers = cJSON_GetObjectItem(j, "moe_layers");
    cr_assert_eq(cJSON_GetArraySize(layers), 2);
    cJSON *l1 = cJSON_GetArrayItem(layers, 1);
    cr_assert_eq(cJSON_GetObjectItem(l1, "layer")->valueint, 1);
    cr_assert_eq(cJSON_GetObjectItem(l1, "experts")->valueint, 4);
    cr_assert_eq(cJSON_GetObjectItem(l1, "bytes_per_expert")->valuedouble, 2752);
    cr_assert_eq(cJSON_GetObjectItem(j, "expert_bytes")->valuedouble, 22016);
    cr_assert_eq(cJSON_GetObjectItem(j, "non_expert_bytes")->valuedouble, 2052);
    /* Values keep their types: the u64 exactly, strings as UTF-8, arrays as elem_type/n/head. */
    cJSON *meta = cJSON_GetObjectItem(j, "metadata");
    bool seen_str = false, seen_arr = false;
    for (int i = 0; i < cJSON_GetArraySize(meta); i++) {
        cJSON *kv = cJSON_GetArrayItem(meta, i);
        const char *key = cJSON_GetObjectItem(kv, "key")->valuestring;
        cJSON *v = cJSON_GetObjectItem(kv, "value");
        if (!strcmp(key, "test.str")) {
            cr_assert_str_eq(v->valuestring, "h\xc3\xa9llo");
            seen_str = true;
        } else if (!strcmp(key, "test.arr_i32")) {
            cr_assert_eq(cJSON_GetObjectItem(v, "n")->valueint, 3);
            cr_assert_eq(cJSON_GetArrayItem(cJSON_GetObjectItem(v, "head"), 1)->valueint, -2);
            seen_arr = true;
        }
    }
    cr_assert(seen_str && seen_arr);
    cJSON_Delete(j);
    free_result(&r);
}

Test(inspect, truncated_file_fails_with_one_line)
{
    char *whole = NULL;
    FILE *f = fopen(fixture(), "rb");
    cr_assert_not_null(f);
    whole = malloc(30000);
    size_t n = fread(whole, 1, 30000, f);
    fclose(f);
    char path[] = "/tmp/mp_inspect_trunc_XXXXXX";
    int fd = mkstemp(path);
    cr_assert(fd >= 0);
    cr_assert_eq(write(fd, whole, n - 100), (ssize_t)(n - 100));
    close(fd);
    free(whole);
    const char *args[] = {"inspect", path, NULL};
    run_result r = run_moeplan(args);
    unlink(path);
    cr_assert_eq(r.status, 1);
    cr_assert_str_eq(r.out, "", "nothing printed on stdout for a bad file");
    cr_assert_eq(count_lines(r.err), 1, "one line: %s", r.err);
    cr_assert_not_null(strstr(r.err, "moeplan inspect: error: file "), "%s", r.err);
    cr_assert_not_null(strstr(r.err, path), "%s", r.err);
    cr_assert_not_null(strstr(r.err, "offset "), "%s", r.err);
    free_result(&r);
}

Test(inspect, missing_file_and_usage_errors)
{
    const char *missing[] = {"inspect", "/nonexistent/model.gguf", NULL};
    run_result r = run_moeplan(missing);
    cr_assert_eq(r.status, 1);
    cr_assert_eq(count_lines(r.err), 1);
    cr_assert_not_null(strstr(r.err, "/nonexistent/model.gguf"), "%s", r.err);
    free_result(&r);

    const char *none[] = {"inspect", NULL};
    r = run_moeplan(none);
    cr_assert_eq(r.status, 2);
    free_result(&r);

    const char *bad_flag[] = {"inspect", fixture(), "--bogus", NULL};
    r = run_moeplan(bad_flag);
    cr_assert_eq(r.status, 2);
    cr_assert_not_null(strstr(r.err, "--bogus"));
    free_result(&r);

    const char *help[] = {"inspect", "--help", NULL};
    r = run_moeplan(help);
    cr_assert_eq(r.status, 0);
    cr_assert_not_null(strstr(r.out, "usage: moeplan inspect"));
    free_result(&r);
}

/* MP_HANG_DUMP_S (cli/hang_dump.c, any command; a knob, base/knobs.h): a value that is not 0
 * (off) or 1..86400 seconds stops the command in one line, exit 2, before it runs; a valid one
 * arms the dump silently. */
Test(inspect, hang_dump_variable_is_checked)
{
    const char *help[] = {"inspect", "--help", NULL};
    const char *bad[] = {"soon", "86401", "-1", "5s"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        cr_assert_eq(setenv("MP_HANG_DUMP_S", bad[i], 1), 0);
        run_result r = run_moeplan(help);
        cr_assert_eq(r.status, 2, "MP_HANG_DUMP_S=%s: exit %d", bad[i], r.status);
        char want[128];
        snprintf(want, sizeof want, "moeplan: MP_HANG_DUMP_S=%s: expected 0 or a whole number in 1..86400\n", bad[i]);
        cr_assert_str_eq(r.err, want);
        cr_assert_null(strstr(r.out, "usage: moeplan inspect"), "the command ran: %s", r.out);
        free_result(&r);
    }
    cr_assert_eq(setenv("MP_HANG_DUMP_S", "0", 1), 0);
    run_result r = run_moeplan(help);
    cr_assert_eq(r.status, 0);
    cr_assert_null(strstr(r.err, "MP_HANG_DUMP_S"), "%s", r.err);
    free_result(&r);
    cr_assert_eq(setenv("MP_HANG_DUMP_S", "600", 1), 0);
    r = run_moeplan(help);
    cr_assert_eq(r.status, 0);
    cr_assert_null(strstr(r.err, "MP_HANG_DUMP_S"), "%s", r.err);
    free_result(&r);
    unsetenv("MP_HANG_DUMP_S");
}

/* MP_HANG_DUMP_S=1 on a command that waits: `inspect --tensors` of a model with 4,000 tensors
 * prints ~300 KB into a pipe that nobody reads until the dump is out, so its main thread blocks in
 * write() once the pipe's 64 KiB are full (an input FIFO no longer works for this: inputs that are
 * not regular files are refused before they are opened). The dump must have printed the main
 * thread's stack and what the kernel says of it (state, wait channel) by then. The watcher
 * prints without malloc, so it also works while the main thread holds the address space's lock. */
Test(inspect, hang_dump_prints_a_waiting_main_thread, .timeout = 60)
{
    char dir[] = "/tmp/mp_hang_dump_XXXXXX";
    cr_assert_not_null(mkdtemp(dir));
    char model[64], err_path[64];
    snprintf(model, sizeof model, "%s/many.gguf", dir);
    snprintf(err_path, sizeof err_path, "%s/stderr", dir);
    mp_gguf_writer *w;
    mp_error err;
    cr_assert_eq(mp_gguf_writer_open(model, &w, &err), MP_OK, "%s", err.msg);
    const int64_t ne[1] = {8};
    char name[64];
    for (int i = 0; i < 4000; i++) {
        snprintf(name, sizeof name, "blk.%d.some_long_tensor_name.weight", i);
        cr_assert_eq(mp_gguf_add_tensor_info(w, name, 1, ne, MP_TYPE_F32, &err), MP_OK, "%s", err.msg);
    }
    static float zeros[8];
    for (int i = 0; i < 4000; i++)
        cr_assert_eq(mp_gguf_write_data(w, zeros, sizeof zeros, &err), MP_OK);
    cr_assert_eq(mp_gguf_writer_finish(w, &err), MP_OK, "%s", err.msg);
    int out[2];
    cr_assert_eq(pipe(out), 0);
    const int err_fd = open(err_path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    cr_assert(err_fd >= 0);
    const pid_t pid = fork();
    cr_assert(pid >= 0);
    if (pid == 0) {
        dup2(out[1], 1);
        dup2(err_fd, 2);
        close(out[0]);
        setenv("MP_HANG_DUMP_S", "1", 1);
        const char *exe = getenv("MP_MOEPLAN");
        execl(exe, exe, "inspect", model, "--tensors", (char *)NULL);
        _exit(127);
    }
    close(out[1]);
    close(err_fd);
    /* the pipe stays unread until the dump is in the file (up to 30 s: a loaded machine may take
     * seconds to start the process), so the main thread is still blocked when the watcher fires */
    for (int tick = 0; tick < 300; tick++) {
        char *so_far = slurp(err_path);
        const bool dumped = so_far && strstr(so_far, "== main thread wchan: ");
        free(so_far);
        if (dumped)
            break;
        usleep(100000);
    }
    char buf[65536];
    while (read(out[0], buf, sizeof buf) > 0)
        ;
    close(out[0]);
    int ws;
    cr_assert_eq(waitpid(pid, &ws, 0), pid);
    cr_assert(WIFEXITED(ws) && WEXITSTATUS(ws) == 0, "inspect failed");
    char *text = slurp(err_path);
    unlink(err_path);
    unlink(model);
    rmdir(dir);
    cr_assert_not_null(strstr(text, "== main thread stack (MP_HANG_DUMP_S)"), "%s", text);
    cr_assert_not_null(strstr(text, "== main thread stat: "), "%s", text);
    cr_assert_not_null(strstr(text, "== main thread wchan: "), "%s", text);
    free(text);
}

/* Expert tensors that disagree (expert counts, a missing part, not 3-D) are an error, not a
 * silently wrong table. The files are written with moeplan's own GGUF writer. */
static void write_moe(const char *path, const int64_t *up_ne, uint32_t up_dims, bool with_down)
{
    mp_gguf_writer *w;
    mp_error err;
    int64_t ne[3] = {32, 2, 4};
    cr_assert_eq(mp_gguf_writer_open(path, &w, &err), MP_OK, "%s", err.msg);
    cr_assert_eq(mp_gguf_add_tensor_info(w, "blk.0.ffn_gate_exps.weight", 3, ne, MP_TYPE_F32, &err), MP_OK);
    cr_assert_eq(mp_gguf_add_tensor_info(w, "blk.0.ffn_up_exps.weight", up_dims, up_ne, MP_TYPE_F32, &err), MP_OK);
    if (with_down)
        cr_assert_eq(mp_gguf_add_tensor_info(w, "blk.0.ffn_down_exps.weight", 3, ne, MP_TYPE_F32, &err), MP_OK);
    static float zeros[32 * 2 * 4];
    size_t up_bytes = 4;
    for (uint32_t d = 0; d < up_dims; d++)
        up_bytes *= (size_t)up_ne[d];
    cr_assert_eq(mp_gguf_write_data(w, zeros, sizeof zeros, &err), MP_OK);
    cr_assert_eq(mp_gguf_write_data(w, zeros, up_bytes, &err), MP_OK);
    if (with_down)
        cr_assert_eq(mp_gguf_write_data(w, zeros, sizeof zeros, &err), MP_OK);
    cr_assert_eq(mp_gguf_writer_finish(w, &err), MP_OK, "%s", err.msg);
}

Test(inspect, inconsistent_expert_tensors_fail)
{
    char path[] = "/tmp/mp_inspect_moe_XXXXXX";
    int fd = mkstemp(path);
    cr_assert(fd >= 0);
    close(fd);
    const int64_t three[3] = {32, 2, 3}, four[3] = {32, 2, 4}, flat[2] = {32, 8};
    struct { const int64_t *ne; uint32_t dims; bool down; const char *want; } cases[] = {
        {three, 3, true, "3 experts, but the layer's other expert tensors have 4"},
        {four, 3, false, "no blk.0.ffn_down_exps.weight"},
        {flat, 2, true, "expected 3 dimensions"},
        {four, 3, true, NULL},
    };
    for (int k = 0; k < 4; k++) {
        write_moe(path, cases[k].ne, cases[k].dims, cases[k].down);
        const char *args[] = {"inspect", path, NULL};
        run_result r = run_moeplan(args);
        if (!cases[k].want) {
            cr_assert_eq(r.status, 0, "%s", r.err);
            cr_assert_not_null(strstr(r.out, "expert_bytes: 3072\n"), "%s", r.out);
        } else {
            cr_assert_eq(r.status, 1, "case %d", k);
            cr_assert_eq(count_lines(r.err), 1);
            cr_assert_not_null(strstr(r.err, cases[k].want), "case %d: %s", k, r.err);
            cr_assert_str_eq(r.out, "");
        }
        free_result(&r);
    }
    unlink(path);
}

/* A file that stores each expert as its own tensor (blk.N.ffn_gate.E.weight) gets the same table
 * as the merged layout, its layers marked; a gap in the experts' numbers, or one expert's tensor
 * beside a merged one, is one error line. */
static void write_split(const char *path, int n_expert, int skip_expert, bool merged_down_too)
{
    mp_gguf_writer *w;
    mp_error err;
    static const char *const kinds[3] = {"gate", "up", "down"};
    int64_t ne[2] = {32, 2};
    static float zeros[32 * 2 * 4];
    cr_assert_eq(mp_gguf_writer_open(path, &w, &err), MP_OK, "%s", err.msg);
    int n = 0;
    for (int e = 0; e < n_expert; e++)
        for (int k = 0; k < 3; k++) {
            if (e == skip_expert)
                continue;
            char name[64];
            snprintf(name, sizeof name, "blk.0.ffn_%s.%d.weight", kinds[k], e);
            cr_assert_eq(mp_gguf_add_tensor_info(w, name, 2, ne, MP_TYPE_F32, &err), MP_OK, "%s", err.msg);
            n++;
        }
    const int64_t ne3[3] = {32, 2, 4};
    if (merged_down_too)
        cr_assert_eq(mp_gguf_add_tensor_info(w, "blk.0.ffn_down_exps.weight", 3, ne3, MP_TYPE_F32, &err), MP_OK);
    for (int i = 0; i < n; i++)
        cr_assert_eq(mp_gguf_write_data(w, zeros, 32 * 2 * 4, &err), MP_OK);
    if (merged_down_too)
        cr_assert_eq(mp_gguf_write_data(w, zeros, sizeof zeros, &err), MP_OK);
    cr_assert_eq(mp_gguf_writer_finish(w, &err), MP_OK, "%s", err.msg);
}

Test(inspect, experts_stored_one_tensor_each)
{
    char path[] = "/tmp/mp_inspect_split_XXXXXX";
    int fd = mkstemp(path);
    cr_assert(fd >= 0);
    close(fd);
    struct { int skip; bool merged; const char *want; } cases[] = {
        {-1, false, NULL},
        {2, false, "an expert past a missing one"},
        {-1, true, "one expert's tensor beside the layer's merged tensor of that kind"},
    };
    for (int k = 0; k < 3; k++) {
        write_split(path, 4, cases[k].skip, cases[k].merged);
        const char *args[] = {"inspect", path, NULL};
        run_result r = run_moeplan(args);
        if (!cases[k].want) { /* 4 experts x 3 kinds x 256 bytes, as the merged file of write_moe */
            cr_assert_eq(r.status, 0, "%s", r.err);
            cr_assert_not_null(strstr(r.out, "expert_bytes: 3072\n"), "%s", r.out);
            cr_assert_not_null(strstr(r.out, "      0*      4          256          256          256"), "%s", r.out);
        } else {
            cr_assert_eq(r.status, 1, "case %d: %s", k, r.out);
            cr_assert_eq(count_lines(r.err), 1, "%s", r.err);
            cr_assert_not_null(strstr(r.err, cases[k].want), "case %d: %s", k, r.err);
            cr_assert_str_eq(r.out, "");
        }
        free_result(&r);
    }
    unlink(path);
}

/* A model split in two files: inspect from the first lists both files' tensors and their bytes */
static void write_shard(const char *path, uint16_t no, const char *tensor)
{
    mp_gguf_writer *w;
    mp_error err;
    const uint16_t count = 2;
    cr_assert_eq(mp_gguf_writer_open(path, &w, &err), MP_OK, "%s", err.msg);
    cr_assert_eq(mp_gguf_add_val(w, "split.no", MP_GGUF_UINT16, &no, &err), MP_OK, "%s", err.msg);
    cr_assert_eq(mp_gguf_add_val(w, "split.count", MP_GGUF_UINT16, &count, &err), MP_OK, "%s", err.msg);
    cr_assert_eq(mp_gguf_add_i32(w, "split.tensors.count", 2, &err), MP_OK, "%s", err.msg);
    const int64_t ne[1] = {32};
    cr_assert_eq(mp_gguf_add_tensor_info(w, tensor, 1, ne, MP_TYPE_F32, &err), MP_OK, "%s", err.msg);
    static const float ones[32] = {1};
    cr_assert_eq(mp_gguf_write_data(w, ones, sizeof ones, &err), MP_OK, "%s", err.msg);
    cr_assert_eq(mp_gguf_writer_finish(w, &err), MP_OK, "%s", err.msg);
}

Test(inspect, a_model_split_in_files)
{
    char dir[] = "/tmp/mp_inspect_shards_XXXXXX", a[96], b[96];
    cr_assert_not_null(mkdtemp(dir));
    snprintf(a, sizeof a, "%s/m-00001-of-00002.gguf", dir);
    snprintf(b, sizeof b, "%s/m-00002-of-00002.gguf", dir);
    write_shard(a, 0, "first.weight");
    write_shard(b, 1, "second.weight");
    const char *args[] = {"inspect", a, "--tensors", NULL};
    run_result r = run_moeplan(args);
    cr_assert_eq(r.status, 0, "%s", r.err);
    cr_assert_not_null(strstr(r.out, "n_tensors: 2\nfiles: 2 (a model split in files"), "%s", r.out);
    cr_assert_not_null(strstr(r.out, "first.weight"), "%s", r.out);
    cr_assert_not_null(strstr(r.out, "second.weight"), "%s", r.out);
    free_result(&r);
    const char *args2[] = {"inspect", b, NULL};
    r = run_moeplan(args2);
    cr_assert_eq(r.status, 1);
    cr_assert_eq(count_lines(r.err), 1, "%s", r.err);
    cr_assert_not_null(strstr(r.err, "shard 2 of a model split in 2 files: open the first"), "%s", r.err);
    free_result(&r);
    unlink(a);
    unlink(b);
    rmdir(dir);
}
