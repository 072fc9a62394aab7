/* cli/hang_dump.h — MP_HANG_DUMP_S: the main thread's stack on stderr after N seconds (hang_dump.c). */
#ifndef MP_CLI_HANG_DUMP_H
#define MP_CLI_HANG_DUMP_H

#include <stdbool.h>

/* Arms the dump to fire after `seconds` (MP_HANG_DUMP_S, 1..86400, from the knobs main read;
 * call before any other thread starts). false, with nothing armed, when the signal handler or the
 * watcher thread cannot be had. */
bool mp_hang_dump_arm(unsigned seconds);

#endif
