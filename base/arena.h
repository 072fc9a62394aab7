/* base/arena.h — anonymous memory for large read-mostly copies that the CPU streams (expert
 * weights): one mapping, its size rounded up to 2 MiB and advised to transparent huge pages, so
 * that the streaming reads take fewer TLB misses. Freed with munmap(arena, *map_bytes). */
#ifndef MP_BASE_ARENA_H
#define MP_BASE_ARENA_H

#include <stddef.h>

/* An anonymous private mapping of at least bytes (*map_bytes: its size), or MAP_FAILED. */
void *mp_huge_arena(size_t bytes, size_t *map_bytes);

/* The host memory the kernel estimates it can give without swapping (/proc/meminfo's MemAvailable),
 * in bytes, or -1 when that cannot be read. An anonymous mapping succeeds beyond it (overcommit)
 * and fails later, when its pages are touched: a copy that is only worth its speed asks first. */
long long mp_host_mem_available(void);

#endif
