/* runtime/cmd_inspect.c — `moeplan inspect`: not implemented yet (skeleton). */
#include <stdio.h>

#include "cli/commands.h"

int mp_cmd_inspect(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    fprintf(stderr, "moeplan inspect: not implemented yet\n");
    return 1;
}
