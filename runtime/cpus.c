/* runtime/cpus.c — how many CPUs the machine has, and how many this process may use (cpus.h). */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* sched_getaffinity, CPU_COUNT */
#endif
#include "runtime/cpus.h"

#include <sched.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/machine.h"

#define MAX_CPUS 1024

int mp_cpu_count(void)
{
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n < 1 ? 1 : (n > MAX_CPUS ? MAX_CPUS : (int)n);
}

/* A number at *s as strtod reads one (leading blanks allowed; the callers refuse inf and nan),
 * advancing *s past it; false when there is none. */
static bool read_number(const char **s, double *out)
{
    char *end;
    const double v = strtod(*s, &end);
    if (end == *s)
        return false;
    *s = end;
    *out = v;
    return true;
}

/* cgroup v2's cpu.max in dir: "max PERIOD" (no quota) or "QUOTA PERIOD", in microseconds */
static double quota_v2(const char *dir)
{
    char path[4200], line[128];
    if (snprintf(path, sizeof path, "%s/cpu.max", dir) >= (int)sizeof path ||
        !mp_read_first_line(path, line, sizeof line))
        return 0;
    const char *s = line;
    double quota, period;
    if (!read_number(&s, &quota) || !read_number(&s, &period) || !(quota > 0 && quota < 1e18) ||
        !(period > 0 && period < 1e18))
        return 0; /* "max ...", or not what the kernel writes (nan, inf) */
    return quota / period;
}

/* cgroup v1's cpu.cfs_quota_us (-1: no quota) over cpu.cfs_period_us in dir */
static double quota_v1(const char *dir)
{
    char path[4200], line[64];
    double v[2];
    static const char *const names[2] = {"cpu.cfs_quota_us", "cpu.cfs_period_us"};
    for (int i = 0; i < 2; i++) {
        const char *s = line;
        if (snprintf(path, sizeof path, "%s/%s", dir, names[i]) >= (int)sizeof path ||
            !mp_read_first_line(path, line, sizeof line) || !read_number(&s, &v[i]) || !(v[i] > 0 && v[i] < 1e18))
            return 0; /* a quota of -1: none; nan or inf: not what the kernel writes */
    }
    return v[0] / v[1];
}

/* The least quota of the cgroup at path (under mount) and of its ancestors up to the mount's root:
 * a limit set on a parent (a systemd slice, a pod) holds for every cgroup below it, and inside a
 * container whose cgroup is the mount's root the path names the host's cgroup, which only the
 * root's files describe. */
static double least_quota(const char *mount, const char *path, double (*quota_of)(const char *))
{
    char p[4096], dir[4200];
    if (snprintf(p, sizeof p, "%s", path) >= (int)sizeof p)
        return 0;
    double least = 0;
    for (;;) {
        size_t len = strlen(p);
        while (len > 1 && p[len - 1] == '/') /* "/a/b/" -> "/a/b" */
            p[--len] = '\0';
        const bool at_root = len == 0 || (len == 1 && p[0] == '/');
        if (snprintf(dir, sizeof dir, "%s%s", mount, at_root ? "" : p) < (int)sizeof dir) {
            const double q = quota_of(dir);
            if (q > 0 && (least == 0 || q < least))
                least = q;
        }
        if (at_root)
            return least;
        char *slash = strrchr(p, '/');
        if (!slash)
            return least;
        slash[slash == p] = '\0'; /* "/a" -> "/", "/a/b" -> "/a" */
    }
}

/* Whether the comma-separated controller list [s, s + n) names the cpu controller */
static bool names_cpu(const char *s, size_t n)
{
    for (size_t i = 0; i < n;) {
        size_t j = i;
        while (j < n && s[j] != ',')
            j++;
        if (j - i == 3 && memcmp(s + i, "cpu", 3) == 0)
            return true;
        i = j + 1;
    }
    return false;
}

double mp_cgroup_cpu_quota(const char *self_cgroup, const char *root)
{
    double least = 0;
    for (const char *line = self_cgroup; line && *line;) {
        const char *eol = strchr(line, '\n');
        const size_t n = eol ? (size_t)(eol - line) : strlen(line);
        /* "ID:CONTROLLERS:PATH" */
        const char *c1 = memchr(line, ':', n);
        const char *c2 = c1 ? memchr(c1 + 1, ':', n - (size_t)(c1 + 1 - line)) : NULL;
        if (c2 && c2 + 1 < line + n && c2[1] == '/') {
            char path[4096], mount[4200];
            const size_t plen = (size_t)(line + n - (c2 + 1));
            if (plen < sizeof path) {
                memcpy(path, c2 + 1, plen);
                path[plen] = '\0';
                double q = 0;
                if (c2 == c1 + 1 && c1 - line == 1 && line[0] == '0') { /* v2: "0::PATH" */
                    q = least_quota(root, path, quota_v2);
                } else if (names_cpu(c1 + 1, (size_t)(c2 - c1 - 1))) {
                    static const char *const mounts[] = {"cpu,cpuacct", "cpuacct,cpu", "cpu"};
                    for (size_t i = 0; i < sizeof mounts / sizeof *mounts && q == 0; i++)
                        if (snprintf(mount, sizeof mount, "%s/%s", root, mounts[i]) < (int)sizeof mount)
                            q = least_quota(mount, path, quota_v1);
                }
                if (q > 0 && (least == 0 || q < least))
                    least = q;
            }
        }
        line = eol ? eol + 1 : NULL;
    }
    return least;
}

/* The least CPU number in a sysfs CPU list ("0,16", "0-1", "8"); -1 when it holds none */
static int least_of_list(const char *s)
{
    int least = -1;
    while (*s) {
        if (*s < '0' || *s > '9') {
            s++;
            continue;
        }
        char *end;
        const long v = strtol(s, &end, 10);
        if (v < MAX_CPUS * 64L && (least < 0 || v < least))
            least = (int)v;
        s = end;
    }
    return least;
}

/* The core of cpu: the least CPU of its core's list under sysfs (core_cpus_list, or
 * thread_siblings_list on kernels before 5.7), which every hardware thread of the core shares; the
 * CPU itself when neither can be read (a VM that lists no topology: each CPU its own core). */
static int core_of(const char *sysfs, int cpu)
{
    static const char *const names[] = {"core_cpus_list", "thread_siblings_list"};
    for (size_t i = 0; i < sizeof names / sizeof *names; i++) {
        char path[4200], line[4096];
        if (snprintf(path, sizeof path, "%s/cpu%d/topology/%s", sysfs, cpu, names[i]) < (int)sizeof path &&
            mp_read_first_line(path, line, sizeof line)) {
            const int c = least_of_list(line);
            if (c >= 0)
                return c;
        }
    }
    return cpu;
}

int mp_cpu_cores_of(const char *sysfs, const int *cpus, int n, int *order)
{
    if (n <= 0)
        return 0;
    int *core = malloc((size_t)n * sizeof *core);
    bool *first = malloc((size_t)n * sizeof *first);
    if (!core || !first) { /* each CPU its own core, in the order given */
        free(core);
        free(first);
        memmove(order, cpus, (size_t)n * sizeof *order);
        return n;
    }
    int cores = 0;
    for (int i = 0; i < n; i++) {
        core[i] = core_of(sysfs, cpus[i]);
        first[i] = true;
        for (int j = 0; j < i && first[i]; j++)
            first[i] = core[j] != core[i];
        cores += first[i];
    }
    int k = 0;
    for (int pass = 0; pass < 2; pass++)
        for (int i = 0; i < n; i++)
            if (first[i] == (pass == 0))
                order[k++] = cpus[i];
    free(core);
    free(first);
    return cores;
}

int mp_cpu_allowed(int *order, int cap, int *cores)
{
    *cores = 0;
#ifdef __linux__
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) != 0)
        return 0;
    int cpus[MAX_CPUS], n = 0;
    for (int c = 0; c < CPU_SETSIZE && n < MAX_CPUS; c++)
        if (CPU_ISSET(c, &set))
            cpus[n++] = c;
    int all[MAX_CPUS];
    *cores = mp_cpu_cores_of("/sys/devices/system/cpu", cpus, n, all);
    if (n > cap)
        n = cap;
    if (*cores > n)
        *cores = n;
    memcpy(order, all, (size_t)n * sizeof *order);
    return n;
#else
    (void)order, (void)cap;
    return 0;
#endif
}

int mp_cpu_threads_default(void)
{
    const int usable = mp_cpu_usable();
    int order[MAX_CPUS], cores = 0;
    if (mp_cpu_allowed(order, MAX_CPUS, &cores) <= 0 || cores < 1)
        return usable;
    return cores < usable ? cores : usable;
}

int mp_cpu_usable(void)
{
    int n = mp_cpu_count();
#ifdef __linux__
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0) {
        const int allowed = CPU_COUNT(&set);
        if (allowed > 0 && allowed < n)
            n = allowed;
    }
    char buf[8192];
    FILE *f = fopen("/proc/self/cgroup", "r");
    if (f) {
        const size_t got = fread(buf, 1, sizeof buf - 1, f);
        fclose(f);
        buf[got] = '\0';
        const double quota = mp_cgroup_cpu_quota(buf, "/sys/fs/cgroup");
        if (quota > 0 && quota < n) /* rounded down: a thread beyond the quota gets the cgroup throttled */
            n = quota < 1 ? 1 : (int)quota;
    }
#endif
    return n;
}
