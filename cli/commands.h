/* cli/commands.h — every subcommand's entry point. Each is defined in the module that owns it
 * and returns the process exit status (0 ok, 1 failure, 2 usage error); none calls exit().
 * Commands that run the model (or print the knobs) take the knobs main read at start
 * (runtime/knobs.h); the others never see them. */
#ifndef MP_CLI_COMMANDS_H
#define MP_CLI_COMMANDS_H

#include "runtime/hooks.h"
#include "runtime/knobs.h"

int mp_cmd_run(int argc, char **argv);     /* runtime/cmd_run.c (no route replay, default knobs) */
/* `run` with --route-replay served by replay (the CLI passes collector/route_replay.h's). */
int mp_cmd_run_with(int argc, char **argv, const mp_route_replay_api *replay, const mp_knobs *knobs);
int mp_cmd_bench(int argc, char **argv);   /* runtime/cmd_bench.c (no route replay, default knobs) */
/* `bench` with --route-replay served by replay, as mp_cmd_run_with. */
int mp_cmd_bench_with(int argc, char **argv, const mp_route_replay_api *replay, const mp_knobs *knobs);
int mp_cmd_config(int argc, char **argv, const mp_knobs *knobs); /* runtime/cmd_config.c */
int mp_cmd_inspect(int argc, char **argv); /* runtime/cmd_inspect.c */
int mp_cmd_mkmodel(int argc, char **argv); /* runtime/cmd_mkmodel.c */
int mp_cmd_profile(int argc, char **argv); /* runtime/cmd_profile.c */
int mp_cmd_import(int argc, char **argv);  /* collector/cmd_import.c */
int mp_cmd_trace(int argc, char **argv);   /* collector/cmd_trace.c */
int mp_cmd_collect(int argc, char **argv, const mp_knobs *knobs); /* collector/cmd_collect.c */

int mp_cmd_analyze(int argc, char **argv); /* analyzer/cmd_analyze.c */
int mp_cmd_simulate(int argc, char **argv); /* simulator/cmd_simulate.c */
int mp_cmd_calibrate(int argc, char **argv, const mp_knobs *knobs); /* simulator/cmd_calibrate.c */
int mp_cmd_plan(int argc, char **argv, const mp_knobs *knobs);      /* simulator/cmd_plan.c */

#endif
