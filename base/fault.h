/* base/fault.h — fault injection, as SQLite's test_malloc and I/O error injection: the writers
 * of traces, reports, GGUF files and profiles pass every allocation and every write through a
 * fault point, and a test arms the Nth point from now to fail, then sweeps N.
 *
 * Unarmed (the default, and always outside tests), a point is one load and a compare: nothing
 * fails. Armed with nth = N, the Nth point reached fails, and with persist every point after it
 * too (a full disk stays full). A failed allocation returns NULL; a failed write, sync or rename
 * sets errno to EIO (EFBIG where the writer names a size limit would not matter: the message
 * carries strerror). Not thread-safe by design: tests arm it around single-threaded writers.
 */
#ifndef MP_BASE_FAULT_H
#define MP_BASE_FAULT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Fail the nth point from now (1: the next one); 0 disarms. */
void mp_fault_arm(int64_t nth, bool persist);
/* Points reached since the last arm, and how many of them failed. */
int64_t mp_fault_points(void);
int64_t mp_fault_failures(void);
/* true if this point fails (it then counts as a failure). */
bool mp_fault_point(void);

/* malloc/calloc/realloc/strdup behind a fault point. */
void *mp_fault_malloc(size_t n);
void *mp_fault_calloc(size_t n, size_t size);
void *mp_fault_realloc(void *p, size_t n);
char *mp_fault_strdup(const char *s);

#endif
