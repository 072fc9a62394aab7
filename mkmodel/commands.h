/* mkmodel/commands.h — the synthetic-model factory's command: mkmodel. Each returns the process exit status (0 ok, 1 failure, 2 usage
 * error: docs/errors.md) and never calls exit(); cli/main.c dispatches to them. Commands that run
 * the model (or print the knobs) take the knobs main read at start (base/knobs.h). */
#ifndef MP_MKMODEL_COMMANDS_H
#define MP_MKMODEL_COMMANDS_H

int mp_cmd_mkmodel(int argc, char **argv); /* cmd_mkmodel.c */

#endif
