/* cli/hang_dump.h — MP_HANG_DUMP_S: the main thread's stack on stderr after N seconds (hang_dump.c). */
#ifndef MP_CLI_HANG_DUMP_H
#define MP_CLI_HANG_DUMP_H

/* Arms the dump when MP_HANG_DUMP_S is set (before any other thread starts); else nothing. */
void mp_hang_dump_arm(void);

#endif
