/* collector/commands.h — the collector's commands: collect, import, trace. Each returns the process exit status (0 ok, 1 failure, 2 usage
 * error: docs/errors.md) and never calls exit(); cli/main.c dispatches to them. Commands that run
 * the model (or print the knobs) take the knobs main read at start (base/knobs.h). */
#ifndef MP_COLLECTOR_COMMANDS_H
#define MP_COLLECTOR_COMMANDS_H

#include "base/knobs.h"

int mp_cmd_import(int argc, char **argv);  /* cmd_import.c */
int mp_cmd_collect(int argc, char **argv, const mp_knobs *knobs); /* cmd_collect.c */
int mp_cmd_trace(int argc, char **argv);    /* cmd_trace.c */

#endif
