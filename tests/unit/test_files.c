/* tests/unit/test_files.c — the input and output rules of base/input_file.h and
 * base/atomic_file.h: FIFOs, devices and directories refused before a blocking open, size caps,
 * outputs that alias an input (hard links, other spellings), --force, missing directories, and
 * the atomic writer under injected faults and a file-size limit: the old file byte-identical and
 * no temporary left behind, whatever fails. */
#include <criterion/criterion.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/atomic_file.h"
#include "base/fault.h"
#include "base/input_file.h"

static char dir[256];

static void setup(void)
{
    snprintf(dir, sizeof dir, "/tmp/mp_test_files_XXXXXX");
    cr_assert_not_null(mkdtemp(dir));
}
static void teardown(void)
{
    mp_fault_arm(0, false);
    char cmd[512];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    cr_assert_eq(system(cmd), 0);
}
TestSuite(files, .init = setup, .fini = teardown, .timeout = 30);

static const char *at(const char *name)
{
    static char p[8][512];
    static int i;
    i = (i + 1) % 8;
    snprintf(p[i], sizeof p[i], "%s/%s", dir, name);
    return p[i];
}

static void put(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    cr_assert_not_null(f);
    fputs(text, f);
    cr_assert_eq(fclose(f), 0);
}

static int entries(void)
{
    DIR *d = opendir(dir);
    int n = 0;
    for (struct dirent *e; (e = readdir(d));)
        n += e->d_name[0] != '.';
    closedir(d);
    return n;
}

Test(files, fifo_refused_without_blocking)
{
    cr_assert_eq(mkfifo(at("fifo"), 0600), 0);
    mp_error err;
    int fd;
    cr_assert_eq(mp_input_open(at("fifo"), "profile", MP_INPUT_NO_CAP, &fd, NULL, &err), MP_ERR_IO);
    cr_assert(strstr(err.msg, "a FIFO, expected a regular file"), "%s", err.msg);
    cr_assert(strstr(err.msg, "profile "), "%s", err.msg);
    cr_assert_eq(fd, -1);
}

Test(files, devices_and_directories_refused)
{
    mp_error err;
    char *data;
    size_t n;
    cr_assert_eq(mp_input_read_all("/dev/zero", "prompts", MP_INPUT_NO_CAP, &data, &n, &err), MP_ERR_IO);
    cr_assert(strstr(err.msg, "prompts /dev/zero: a character device"), "%s", err.msg);
    cr_assert_eq(mp_input_check(dir, "trace", MP_INPUT_NO_CAP, NULL, &err), MP_ERR_IO);
    cr_assert(strstr(err.msg, "a directory, expected a regular file"), "%s", err.msg);
    cr_assert_eq(mp_input_check(at("missing"), "trace", MP_INPUT_NO_CAP, NULL, &err), MP_ERR_IO);
    cr_assert(strstr(err.msg, "No such file"), "%s", err.msg);
}

Test(files, size_cap_and_exact_read)
{
    put(at("f"), "0123456789");
    mp_error err;
    char *data;
    size_t n;
    cr_assert_eq(mp_input_read_all(at("f"), "costs", 9, &data, &n, &err), MP_ERR_LIMIT);
    cr_assert(strstr(err.msg, "10 bytes, more than the 9 accepted"), "%s", err.msg);
    cr_assert_eq(mp_input_read_all(at("f"), "costs", 10, &data, &n, &err), MP_OK, "%s", err.msg);
    cr_assert_eq(n, 10);
    cr_assert_str_eq(data, "0123456789");
    free(data);
    put(at("empty"), "");
    cr_assert_eq(mp_input_read_all(at("empty"), "costs", 10, &data, &n, &err), MP_OK);
    cr_assert_eq(n, 0);
    cr_assert_eq(data[0], 0);
    free(data);
}

Test(files, output_aliasing_an_input_refused_by_inode)
{
    put(at("trace.db"), "old");
    cr_assert_eq(link(at("trace.db"), at("hard.db")), 0);
    mp_error err;
    const mp_file_ref in[] = {{at("trace.db"), "trace"}};
    cr_assert_eq(mp_output_check(at("hard.db"), "--json", true, in, 1, &err), MP_ERR_ARG);
    cr_assert(strstr(err.msg, "the same file as trace"), "%s", err.msg);
    char other[600];
    snprintf(other, sizeof other, "%s/./trace.db", dir);
    cr_assert_eq(mp_output_check(other, "--json", true, in, 1, &err), MP_ERR_ARG);
    /* two outputs that do not exist yet, spelled differently */
    const mp_file_ref out[] = {{at("new.json"), "--json"}};
    snprintf(other, sizeof other, "%s//new.json", dir);
    cr_assert_eq(mp_output_check(other, "--svg", false, out, 1, &err), MP_ERR_ARG, "%s", err.msg);
    cr_assert_eq(mp_output_check(at("other.json"), "--svg", false, out, 1, &err), MP_OK, "%s", err.msg);
}

Test(files, output_exists_force_and_directories)
{
    put(at("out"), "old");
    mp_error err;
    cr_assert_eq(mp_output_check(at("out"), "--json", false, NULL, 0, &err), MP_ERR_IO);
    cr_assert(strstr(err.msg, "file exists (use --force to replace it)"), "%s", err.msg);
    cr_assert_eq(mp_output_check(at("out"), "--json", true, NULL, 0, &err), MP_OK);
    cr_assert_eq(mp_output_check(dir, "--json", true, NULL, 0, &err), MP_ERR_IO);
    cr_assert(strstr(err.msg, "a directory"), "%s", err.msg);
    cr_assert_eq(mp_output_check(at("nodir/out"), "--out", false, NULL, 0, &err), MP_ERR_IO);
    cr_assert(strstr(err.msg, "No such file or directory"), "%s", err.msg);
    cr_assert_eq(mp_output_check(at("out/x"), "--out", false, NULL, 0, &err), MP_ERR_IO);
    cr_assert(strstr(err.msg, "Not a directory"), "%s", err.msg);
}

Test(files, atomic_write_replaces_whole)
{
    put(at("p"), "old");
    mp_error err;
    cr_assert_eq(mp_write_file_atomic(at("p"), "new!", 4, "profile", &err), MP_OK, "%s", err.msg);
    FILE *f = fopen(at("p"), "r");
    char buf[16] = {0};
    fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    cr_assert_str_eq(buf, "new!");
    cr_assert_eq(entries(), 1);
}

static void check_old(const char *path)
{
    FILE *f = fopen(path, "r");
    cr_assert_not_null(f);
    char buf[64] = {0};
    fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    cr_assert_str_eq(buf, "old", "%s changed", path);
}

/* Every fault point of open, write, stream, sync and rename in turn: a clean one-line error, the
 * old file untouched, nothing else in the directory. */
Test(files, fault_sweep_keeps_old_file)
{
    put(at("p"), "old");
    char big[100000];
    memset(big, 'x', sizeof big);
    int64_t n_fail = 0;
    for (int64_t nth = 1; nth < 100; nth++) {
        mp_error err = {0};
        mp_fault_arm(nth, false);
        mp_outfile o;
        mp_status st = mp_outfile_open(&o, at("p"), "report", 0, &err);
        FILE *s = st ? NULL : mp_outfile_stream(&o, &err);
        if (s) {
            for (int i = 0; i < 3; i++)
                fwrite(big, 1, sizeof big, s);
            st = mp_outfile_commit(&o, &err);
        } else if (!st) {
            st = err.code;
        }
        const int64_t failures = mp_fault_failures();
        mp_fault_arm(0, false);
        if (!failures) { /* past the last point: the write went through */
            cr_assert_eq(st, MP_OK, "%s", err.msg);
            break;
        }
        n_fail++;
        cr_assert_neq(st, MP_OK, "fault %lld not reported", (long long)nth);
        cr_assert_null(strchr(err.msg, '\n'));
        cr_assert(strstr(err.msg, "report "), "%s", err.msg);
        check_old(at("p"));
        cr_assert_eq(entries(), 1, "a temporary was left after fault %lld", (long long)nth);
    }
    cr_assert_gt(n_fail, 4);
}

Test(files, file_size_limit_is_reported_not_fatal)
{
    put(at("p"), "old");
    signal(SIGXFSZ, SIG_IGN);
    struct rlimit rl = {.rlim_cur = 4096, .rlim_max = RLIM_INFINITY};
    cr_assert_eq(setrlimit(RLIMIT_FSIZE, &rl), 0);
    static char big[65536];
    mp_error err;
    cr_assert_eq(mp_write_file_atomic(at("p"), big, sizeof big, "profile", &err), MP_ERR_IO);
    rl.rlim_cur = RLIM_INFINITY;
    setrlimit(RLIMIT_FSIZE, &rl);
    cr_assert(strstr(err.msg, "File too large (the file-size limit, ulimit -f)"), "%s", err.msg);
    cr_assert(strstr(err.msg, "offset 4096"), "%s", err.msg);
    check_old(at("p"));
    cr_assert_eq(entries(), 1);
}

Test(files, abort_removes_sqlite_sidecars)
{
    mp_outfile o;
    mp_error err;
    cr_assert_eq(mp_outfile_open(&o, at("t.db"), "trace", MP_OUT_NO_FD, &err), MP_OK);
    char side[600];
    snprintf(side, sizeof side, "%s-wal", o.tmp);
    put(side, "wal");
    mp_outfile_abort(&o);
    cr_assert_eq(entries(), 0);
}
