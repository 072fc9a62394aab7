/* base/machine.c — the machine's facts (machine.h). */
#include "base/machine.h"

#include <stdbool.h>
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

/* "32768K", "320M" or a byte count, as sysfs writes cache sizes; 0 when unreadable */
static size_t sysfs_size(const char *path)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return 0;
    char buf[64] = "";
    const bool ok = fgets(buf, sizeof buf, f) != NULL;
    fclose(f);
    char *end = NULL;
    const unsigned long long v = ok ? strtoull(buf, &end, 10) : 0;
    if (!ok || end == buf)
        return 0;
    const size_t unit = *end == 'K' ? (size_t)1 << 10 : *end == 'M' ? (size_t)1 << 20 : *end == 'G' ? (size_t)1 << 30 : 1;
    return (size_t)v * unit;
}

size_t mp_cpu_llc_bytes(void)
{
    size_t best = 0;
#ifdef _SC_LEVEL3_CACHE_SIZE
    const long l3 = sysconf(_SC_LEVEL3_CACHE_SIZE), l2 = sysconf(_SC_LEVEL2_CACHE_SIZE);
    best = l3 > 0 ? (size_t)l3 : l2 > 0 ? (size_t)l2 : 0;
#endif
    for (int i = 0; i < 8; i++) { /* the sysfs caches of cpu0: the largest (a VM may hide them) */
        char path[96];
        snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu0/cache/index%d/size", i);
        const size_t b = sysfs_size(path);
        best = b > best ? b : best;
    }
    return best;
}
