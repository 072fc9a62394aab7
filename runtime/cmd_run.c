/* runtime/cmd_run.c — `moeplan run`: not implemented yet (skeleton). */
#include <stdio.h>

#include "cli/commands.h"

int mp_cmd_run(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    fprintf(stderr, "moeplan run: not implemented yet\n");
    return 1;
}
