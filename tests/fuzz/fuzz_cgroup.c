/* tests/fuzz/fuzz_cgroup.c — libFuzzer target for the reader of /proc/self/cgroup and the cgroup
 * quota files it leads to (runtime/cpus.c, mp_cgroup_cpu_quota), the one input of the default
 * thread count that a container's runtime writes.
 *
 * The input is the /proc/self/cgroup text; the cgroup files are a small tree made once under
 * /tmp (a v2 cpu.max at the root and under /a, a v1 cpu,cpuacct quota under /x), so that lines
 * naming those paths reach the file readers. Property checked on every input (abort on
 * violation): the quota is 0 (none) or a finite positive number of CPUs no larger than the
 * tree's largest (8). */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "runtime/cpus.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char root[64];

static void put(const char *rel, const char *text)
{
    char path[256];
    snprintf(path, sizeof path, "%s/%s", root, rel);
    FILE *f = fopen(path, "w");
    if (!f)
        abort();
    fputs(text, f);
    fclose(f);
}

static void remove_tree(void)
{
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
    if (system(cmd) != 0)
        fprintf(stderr, "fuzz_cgroup: could not remove %s\n", root);
}

static void make_tree(void)
{
    snprintf(root, sizeof root, "/tmp/mp_fuzz_cgroup_XXXXXX");
    char sub[128];
    if (!mkdtemp(root))
        abort();
    atexit(remove_tree);
    static const char *const dirs[] = {"a", "a/b", "cpu,cpuacct", "cpu,cpuacct/x"};
    for (size_t i = 0; i < sizeof dirs / sizeof *dirs; i++) {
        snprintf(sub, sizeof sub, "%s/%s", root, dirs[i]);
        if (mkdir(sub, 0700) != 0)
            abort();
    }
    put("cpu.max", "800000 100000\n");
    put("a/cpu.max", "150000 100000\n");
    put("a/b/cpu.max", "max 100000\n");
    put("cpu,cpuacct/x/cpu.cfs_quota_us", "250000\n");
    put("cpu,cpuacct/x/cpu.cfs_period_us", "100000\n");
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!root[0])
        make_tree();
    char *text = malloc(size + 1);
    if (!text)
        return 0;
    memcpy(text, data, size);
    text[size] = '\0'; /* read as the C string fread gives: cut at the first NUL */
    const double q = mp_cgroup_cpu_quota(text, root);
    free(text);
    if (!(q == 0 || (isfinite(q) && q > 0 && q <= 8.0)))
        abort();
    return 0;
}
