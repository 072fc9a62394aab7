/* simulator/commands.h — the simulator's commands: simulate, calibrate, plan. Each returns the process exit status (0 ok, 1 failure, 2 usage
 * error: docs/errors.md) and never calls exit(); cli/main.c dispatches to them. Commands that run
 * the model (or print the knobs) take the knobs main read at start (base/knobs.h). */
#ifndef MP_SIMULATOR_COMMANDS_H
#define MP_SIMULATOR_COMMANDS_H

#include "base/knobs.h"

int mp_cmd_simulate(int argc, char **argv); /* cmd_simulate.c */
int mp_cmd_calibrate(int argc, char **argv, const mp_knobs *knobs); /* cmd_calibrate.c */
int mp_cmd_plan(int argc, char **argv, const mp_knobs *knobs);      /* cmd_plan.c */

#endif
