/* runtime/cmd_mkmodel.c — `moeplan mkmodel`: not implemented yet (skeleton). */
#include <stdio.h>

#include "cli/commands.h"

int mp_cmd_mkmodel(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    fprintf(stderr, "moeplan mkmodel: not implemented yet\n");
    return 1;
}
