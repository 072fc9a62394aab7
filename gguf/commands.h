/* gguf/commands.h — the GGUF module's command: inspect. Each returns the process exit status (0 ok, 1 failure, 2 usage
 * error: docs/errors.md) and never calls exit(); cli/main.c dispatches to them. Commands that run
 * the model (or print the knobs) take the knobs main read at start (base/knobs.h). */
#ifndef MP_GGUF_COMMANDS_H
#define MP_GGUF_COMMANDS_H

int mp_cmd_inspect(int argc, char **argv); /* cmd_inspect.c */

#endif
