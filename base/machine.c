/* base/machine.c — the machine's facts (machine.h). */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* sched_getaffinity, CPU_ISSET */
#endif
#include "base/machine.h"

#include <sched.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

void mp_cpu_model_name(char *out, size_t cap)
{
    snprintf(out, cap, "unknown");
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f)
        return;
    char line[512];
    while (fgets(line, sizeof line, f)) {
        if (strncmp(line, "model name", 10) != 0)
            continue;
        const char *v = strchr(line, ':');
        if (!v)
            continue;
        v++;
        while (*v == ' ' || *v == '\t')
            v++;
        snprintf(out, cap, "%s", v);
        out[strcspn(out, "\n")] = 0;
        break;
    }
    fclose(f);
}

bool mp_read_first_line(const char *path, char *buf, size_t cap)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return false;
    const bool ok = fgets(buf, (int)cap, f) != NULL;
    fclose(f);
    if (ok)
        buf[strcspn(buf, "\n")] = 0;
    return ok && buf[0];
}

bool mp_cpu_times(const char *stat_path, unsigned long long *steal, unsigned long long *total)
{
    FILE *f = fopen(stat_path ? stat_path : "/proc/stat", "r");
    if (!f)
        return false;
    char line[512];
    bool ok = false;
    while (!ok && fgets(line, sizeof line, f)) {
        unsigned long long v[8];
        /* user nice system idle iowait irq softirq steal: the aggregate line (kernels since 2.6.11) */
        if (strncmp(line, "cpu ", 4) || sscanf(line + 4, "%llu %llu %llu %llu %llu %llu %llu %llu", &v[0], &v[1],
                                              &v[2], &v[3], &v[4], &v[5], &v[6], &v[7]) != 8)
            continue;
        *total = 0;
        for (int i = 0; i < 8; i++)
            *total += v[i];
        *steal = v[7];
        ok = true;
    }
    fclose(f);
    return ok;
}

/* "32768K", "320M" or a byte count, as sysfs writes cache sizes; 0 when unreadable */
static size_t sysfs_size(const char *path)
{
    char buf[64];
    if (!mp_read_first_line(path, buf, sizeof buf))
        return 0;
    char *end = NULL;
    const unsigned long long v = strtoull(buf, &end, 10);
    if (end == buf)
        return 0;
    const size_t unit = *end == 'K' ? (size_t)1 << 10 : *end == 'M' ? (size_t)1 << 20 : *end == 'G' ? (size_t)1 << 30 : 1;
    return (size_t)v * unit;
}

/* A CPU's deepest data cache under cpu_dir: its level, size and a key naming its instance (the
 * cache's id where sysfs gives one, else the CPUs sharing it); false when sysfs lists none */
static bool deepest_cache(const char *cpu_dir, int cpu, int *level, size_t *bytes, char *key, size_t key_cap)
{
    bool found = false;
    *level = 0;
    for (int i = 0; i < 16; i++) {
        char path[512], text[256];
        snprintf(path, sizeof path, "%s/cpu%d/cache/index%d/type", cpu_dir, cpu, i);
        if (!mp_read_first_line(path, text, sizeof text))
            continue;
        if (strcmp(text, "Unified") != 0 && strcmp(text, "Data") != 0)
            continue; /* an instruction cache holds no weights */
        snprintf(path, sizeof path, "%s/cpu%d/cache/index%d/level", cpu_dir, cpu, i);
        const int lv = mp_read_first_line(path, text, sizeof text) ? atoi(text) : 0;
        snprintf(path, sizeof path, "%s/cpu%d/cache/index%d/size", cpu_dir, cpu, i);
        const size_t b = sysfs_size(path);
        if (lv <= *level || b == 0)
            continue;
        char id[200];
        snprintf(path, sizeof path, "%s/cpu%d/cache/index%d/id", cpu_dir, cpu, i);
        if (!mp_read_first_line(path, id, sizeof id)) {
            snprintf(path, sizeof path, "%s/cpu%d/cache/index%d/shared_cpu_list", cpu_dir, cpu, i);
            if (!mp_read_first_line(path, id, sizeof id))
                snprintf(id, sizeof id, "cpu%d", cpu); /* nothing says it is shared: its own */
        }
        *level = lv;
        *bytes = b;
        snprintf(key, key_cap, "L%d:%s", lv, id);
        found = true;
    }
    return found;
}

size_t mp_cpu_llc_bytes_of(const char *cpu_dir, const int *cpus, int n_cpus)
{
    enum { KEY_CAP = 264 };
    char(*keys)[KEY_CAP] = n_cpus > 0 ? calloc((size_t)n_cpus, KEY_CAP) : NULL;
    int *levels = n_cpus > 0 ? calloc((size_t)n_cpus, sizeof *levels) : NULL;
    size_t *sizes = n_cpus > 0 ? calloc((size_t)n_cpus, sizeof *sizes) : NULL;
    int top = 0, n = 0;
    for (int c = 0; keys && levels && sizes && c < n_cpus; c++) {
        int lv;
        size_t b;
        char key[KEY_CAP];
        if (!deepest_cache(cpu_dir, cpus[c], &lv, &b, key, sizeof key))
            continue;
        bool seen = false;
        for (int j = 0; j < n && !seen; j++)
            seen = !strcmp(keys[j], key); /* the key names the level too */
        if (seen)
            continue;
        snprintf(keys[n], KEY_CAP, "%s", key);
        levels[n] = lv;
        sizes[n++] = b;
        top = lv > top ? lv : top;
    }
    size_t total = 0; /* the last level's distinct instances: a CPU whose deepest is shallower adds none */
    for (int j = 0; j < n; j++)
        total += levels[j] == top ? sizes[j] : 0;
    free(keys);
    free(levels);
    free(sizes);
    return total;
}

/* What the process's CPUs read through, from sysfs and the C library (mp_cpu_llc_bytes) */
static size_t llc_bytes_now(void)
{
    cpu_set_t set;
    int cpus[CPU_SETSIZE], n = 0;
    if (sched_getaffinity(0, sizeof set, &set) == 0)
        for (int c = 0; c < CPU_SETSIZE; c++)
            if (CPU_ISSET(c, &set))
                cpus[n++] = c;
    const size_t total = mp_cpu_llc_bytes_of("/sys/devices/system/cpu", cpus, n);
    size_t one = 0; /* what the C library says: one instance, which a VM's sysfs may not list */
#ifdef _SC_LEVEL3_CACHE_SIZE
    const long l3 = sysconf(_SC_LEVEL3_CACHE_SIZE), l2 = sysconf(_SC_LEVEL2_CACHE_SIZE);
    one = l3 > 0 ? (size_t)l3 : l2 > 0 ? (size_t)l2 : 0;
#endif
    return total > one ? total : one;
}

size_t mp_cpu_llc_bytes(void)
{
    /* read once: each call would scan every allowed CPU's sysfs caches (thousands of files on a
     * large host) for the same answer; a racing first call computes the same value */
    static size_t cached = SIZE_MAX;
    size_t v = __atomic_load_n(&cached, __ATOMIC_RELAXED);
    if (v == SIZE_MAX) {
        v = llc_bytes_now();
        __atomic_store_n(&cached, v, __ATOMIC_RELAXED);
    }
    return v;
}
