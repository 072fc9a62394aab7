/* runtime/commands.h — the runtime's commands: run, bench, profile, config. Each returns the process exit status (0 ok, 1 failure, 2 usage
 * error: docs/errors.md) and never calls exit(); cli/main.c dispatches to them. Commands that run
 * the model (or print the knobs) take the knobs main read at start (base/knobs.h). */
#ifndef MP_RUNTIME_COMMANDS_H
#define MP_RUNTIME_COMMANDS_H

#include "runtime/hooks.h"
#include "base/knobs.h"

int mp_cmd_run(int argc, char **argv);     /* cmd_run.c (no route replay, default knobs) */
/* `run` with --route-replay served by replay (the CLI passes collector/route_replay.h's). */
int mp_cmd_run_with(int argc, char **argv, const mp_route_replay_api *replay, const mp_knobs *knobs);
int mp_cmd_bench(int argc, char **argv);   /* cmd_bench.c (no route replay, default knobs) */
/* `bench` with --route-replay served by replay, as mp_cmd_run_with. */
int mp_cmd_bench_with(int argc, char **argv, const mp_route_replay_api *replay, const mp_knobs *knobs);
int mp_cmd_config(int argc, char **argv, const mp_knobs *knobs); /* cmd_config.c */
int mp_cmd_profile(int argc, char **argv); /* cmd_profile.c */

#endif
