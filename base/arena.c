/* base/arena.c — see arena.h. */
#include "base/arena.h"

#include <stdio.h>
#include <sys/mman.h>

void *mp_huge_arena(size_t bytes, size_t *map_bytes)
{
    const size_t huge = (size_t)2 << 20;
    *map_bytes = (bytes + huge - 1) & ~(huge - 1);
    void *arena = mmap(NULL, *map_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
#ifdef MADV_HUGEPAGE
    if (arena != MAP_FAILED)
        madvise(arena, *map_bytes, MADV_HUGEPAGE);
#endif
    return arena;
}

long long mp_host_mem_available(void)
{
    FILE *f = fopen("/proc/meminfo", "r");
    if (!f)
        return -1;
    char line[128];
    long long kb = -1;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "MemAvailable: %lld kB", &kb) == 1)
            break;
    fclose(f);
    return kb < 0 ? -1 : kb * 1024;
}
