/* base/args.h — the one command-line parser of every subcommand, on glibc's getopt_long.
 *
 * Conventions it enforces (docs/user-guide.md, "Command line conventions"):
 *   --opt value and --opt=value are the same; -x value, -xvalue and bundled short flags work;
 *   a long name must be given in full (no abbreviations: a later option cannot break a script);
 *   "--" ends the options; arguments that are not options come back in command-line order.
 *   An unknown option, a missing value and a value given to a flag that takes none are each
 *   one message (in c->err), with "did you mean --X?" from the command's own long names.
 * A few single-dash words of llama.cpp (-ngl) are accepted where the table lists them (word).
 *
 * The parser keeps getopt's global state (optind) for one parse at a time; mp_cli_init resets
 * it, so a process may parse many command lines one after another (the unit tests do).
 */
#ifndef MP_CLI_ARGS_H
#define MP_CLI_ARGS_H

#include <stdbool.h>
#include <getopt.h>

#include "base/error.h"

/* Exit statuses, the same in every command (docs/errors.md). */
#define MP_EXIT_OK 0
#define MP_EXIT_FAILURE 1 /* a bad input file, or a failure while working */
#define MP_EXIT_USAGE 2   /* the command line itself is wrong (or an MP_* knob's value) */

typedef struct mp_cli_opt {
    const char *name; /* long name without "--"; NULL ends the table */
    int short_name;   /* 'm' for -m; 0: none */
    bool value;       /* takes a value */
    int id;           /* what mp_cli_next returns for it (> 0); aliases share their option's id */
    const char *word; /* a single-dash word that also means it ("-ngl"), or NULL */
} mp_cli_opt;

enum {
    MP_CLI_END = 0,         /* no more arguments */
    MP_CLI_ERROR = -1,      /* c->err says what is wrong (a usage error) */
    MP_CLI_POSITIONAL = -2, /* *value is an argument that is not an option */
};

#define MP_CLI_MAX_OPTS 96

typedef struct mp_cli {
    const char *cmd; /* "run": messages name "moeplan run" */
    const mp_cli_opt *opts;
    int argc;
    char **argv;
    bool options_ended;         /* after "--" (or getopt's end): the rest are positional */
    bool in_cluster;            /* the last option was a letter of a cluster (-rt4) with more to come */
    const char *flag;           /* the option just returned, as "--name" (canonical spelling) */
    const char *given;          /* ... and as it was spelled on the command line ("-c", "--ctx") */
    char flag_buf[64];
    char given_buf[80];
    struct option longopts[MP_CLI_MAX_OPTS + 1];
    char shortopts[3 * MP_CLI_MAX_OPTS + 4];
    mp_error err;
} mp_cli;

/* The placement flags (runtime/placement.h) of run, bench and collect, all with one id: the
 * command hands c->flag and the value to mp_placement_opts_set. */
#define MP_CLI_PLACEMENT_OPTS(id)                                                               \
    {"placement", 0, true, id, NULL}, {"placement-file", 0, true, id, NULL},                   \
    {"profile", 0, true, id, NULL}, {"gpu-budget", 0, true, id, NULL},                         \
    {"executor", 0, true, id, NULL}, {"costs", 0, true, id, NULL},                             \
    {"n-cpu-moe", 0, true, id, NULL}, {"cpu-moe", 0, false, id, NULL},                       \
    {"adaptive", 0, true, id, NULL}, {"adaptive-slots", 0, true, id, NULL},                    \
    {"adaptive-inflight", 0, true, id, NULL}

/* llama.cpp's GPU-layers flag, accepted and ignored with a note (mp_cli_note_ngl). */
#define MP_CLI_NGL_OPTS(id)                                                                     \
    {"n-gpu-layers", 0, true, id, "-ngl"}, {"gpu-layers", 0, true, id, NULL}

/* The help line of -ngl, for the commands that take it. */
#define MP_CLI_NGL_HELP                                                                         \
    "      -ngl, --gpu-layers, --n-gpu-layers N  accepted for llama.cpp's command lines and\n"   \
    "                       ignored: the GPU executor always keeps every layer's weights on\n"  \
    "                       the GPU (which experts stay on the CPU: --placement)\n"

/* argv[0] is the command's name; parsing starts at argv[1]. */
void mp_cli_init(mp_cli *c, const char *cmd, const mp_cli_opt *opts, int argc, char **argv);

/* The next option's id with *value its value (NULL for a flag), MP_CLI_POSITIONAL with *value the
 * argument, MP_CLI_END, or MP_CLI_ERROR with c->err filled. */
int mp_cli_next(mp_cli *c, const char **value);

/* "moeplan CMD: error: MSG (see moeplan CMD --help)" on stderr; returns MP_EXIT_USAGE. */
int mp_cli_usage_error(const char *cmd, const char *msg);

/* The long name of opts nearest to name (edit distance, or the one name starts), NULL if none
 * is near enough to be a likely typo. Exposed for tests. */
const char *mp_cli_suggest(const mp_cli_opt *opts, const char *name);

/* The note `-ngl N` gets where it is accepted: GPU layers are always all of them here. */
void mp_cli_note_ngl(const char *cmd, const char *value);

#endif
