/* analyzer/commands.h — the analyzer's command: analyze. Each returns the process exit status (0 ok, 1 failure, 2 usage
 * error: docs/errors.md) and never calls exit(); cli/main.c dispatches to them. Commands that run
 * the model (or print the knobs) take the knobs main read at start (base/knobs.h). */
#ifndef MP_ANALYZER_COMMANDS_H
#define MP_ANALYZER_COMMANDS_H

int mp_cmd_analyze(int argc, char **argv); /* cmd_analyze.c */

#endif
