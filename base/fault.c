/* base/fault.c — see fault.h. */
#include "base/fault.h"

#include <stdlib.h>
#include <string.h>

static int64_t fault_nth;     /* 0: unarmed */
static bool fault_persist;
static int64_t fault_reached; /* points since arm */
static int64_t fault_failed;

void mp_fault_arm(int64_t nth, bool persist)
{
    fault_nth = nth > 0 ? nth : 0;
    fault_persist = persist;
    fault_reached = 0;
    fault_failed = 0;
}

int64_t mp_fault_points(void) { return fault_reached; }
int64_t mp_fault_failures(void) { return fault_failed; }

bool mp_fault_point(void)
{
    if (!fault_nth)
        return false;
    fault_reached++;
    const bool fail = fault_reached == fault_nth || (fault_persist && fault_reached > fault_nth);
    fault_failed += fail;
    return fail;
}

void *mp_fault_malloc(size_t n) { return mp_fault_point() ? NULL : malloc(n); }
void *mp_fault_calloc(size_t n, size_t size) { return mp_fault_point() ? NULL : calloc(n, size); }
void *mp_fault_realloc(void *p, size_t n) { return mp_fault_point() ? NULL : realloc(p, n); }
char *mp_fault_strdup(const char *s) { return mp_fault_point() ? NULL : strdup(s); }
