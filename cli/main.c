/* cli/main.c — the `moeplan` binary: reads the knobs (base/knobs.h) from the environment once,
 * refusing a value that is not allowed, sets the kernels' switches from them, and dispatches
 * subcommands to the modules that own them. */
#include <signal.h>
#include <stdio.h>
#include <string.h>

#include "base/args.h"
#include "analyzer/commands.h"
#include "collector/commands.h"
#include "gguf/commands.h"
#include "mkmodel/commands.h"
#include "runtime/commands.h"
#include "simulator/commands.h"
#include "cli/hang_dump.h"
#include "kernels/quant.h"
#include "base/build_info.h"
#include "collector/route_replay.h"
#include "base/knobs.h"
#include "runtime/knobs_apply.h"

/* `run` and `bench` live in the runtime, which never links the trace reader: the CLI, above
 * both, hands them route replay as a function table (docs/placement.md). */
static int cmd_run(int argc, char **argv, const mp_knobs *knobs)
{
    return mp_cmd_run_with(argc, argv, &mp_route_replay_ops, knobs);
}

static int cmd_bench(int argc, char **argv, const mp_knobs *knobs)
{
    return mp_cmd_bench_with(argc, argv, &mp_route_replay_ops, knobs);
}

/* One of fn (commands the knobs do not reach) and with_knobs (those they do) is set. */
typedef struct command {
    const char *name;
    int (*fn)(int argc, char **argv);
    int (*with_knobs)(int argc, char **argv, const mp_knobs *knobs);
    const char *summary;
} command;

static const command commands[] = {
    {"run", NULL, cmd_run, "generate text from a GGUF MoE model"},
    {"bench", NULL, cmd_bench, "measure prefill and decode tok/s (pp/tg tests, repetitions, md/json)"},
    {"inspect", mp_cmd_inspect, NULL, "print a GGUF model's metadata, tensors and bytes per expert"},
    {"mkmodel", mp_cmd_mkmodel, NULL, "write a synthetic GGUF MoE model (presets, quant mixes, skew)"},
    {"collect", NULL, mp_cmd_collect, "run prompts through a model and record routing + timing into a trace"},
    {"import", mp_cmd_import, NULL, "convert onnxruntime / Strata / CSV routing traces into a trace"},
    {"trace", mp_cmd_trace, NULL, "materialize a trace's routing as an indexed table for fast sqlite3 queries"},
    {"analyze", mp_cmd_analyze, NULL, "validate traces; expert popularity, coverage, locality, drift"},
    {"calibrate", NULL, mp_cmd_calibrate, "measure this machine's costs (CPU/GPU experts, copies, sync) into costs.json"},
    {"simulate", mp_cmd_simulate, NULL, "replay a trace under budgets and placement policies; emit profiles"},
    {"plan", NULL, mp_cmd_plan, "make a profile for one budget and check it: predicted against measured decode"},
    {"profile", mp_cmd_profile, NULL, "inspect or verify an STRP placement profile"},
    {"config", NULL, mp_cmd_config, "print every MP_* knob: value, default, where it came from, what it does"},
};
static const int n_commands = (int)(sizeof commands / sizeof commands[0]);

static void usage(FILE *f)
{
    fprintf(f, "moeplan %s — profile MoE routing and plan expert placement\n\n"
               "usage: moeplan COMMAND [options]   (moeplan help COMMAND, or COMMAND --help, for each)\n"
               "       moeplan --version\n\ncommands:\n",
            MP_VERSION);
    for (int i = 0; i < n_commands; i++)
        fprintf(f, "  %-10s %s\n", commands[i].name, commands[i].summary);
    fprintf(f, "  %-10s %s\n", "version", "print the version, the git commit and the build options");
    fprintf(f, "\noptions:\n"
               "  -h, --help     show this help\n"
               "  -V, --version  print the version, the git commit and the build options\n");
}

/* "moeplan VERSION", then one "KEY VALUE" line each for the commit and the build options, so that
 * a script can take one with awk '$1 == "commit" { print $2 }'. */
static void print_version(void)
{
    printf("moeplan %s\ncommit %s\nbuild %s\n", MP_VERSION, mp_build_commit(), mp_build_options());
}

/* The command called name, or NULL. */
static const command *find_command(const char *name)
{
    for (int i = 0; i < n_commands; i++)
        if (!strcmp(name, commands[i].name))
            return &commands[i];
    return NULL;
}

/* "unknown command 'X'" with the nearest command's name when X looks like a typo of it. */
static int unknown_command(const char *name)
{
    mp_cli_opt names[sizeof commands / sizeof commands[0] + 2] = {{0}};
    for (int i = 0; i < n_commands; i++)
        names[i] = (mp_cli_opt){commands[i].name, 0, false, 1, NULL};
    names[n_commands] = (mp_cli_opt){"version", 0, false, 1, NULL};
    const char *near = mp_cli_suggest(names, name);
    if (near)
        fprintf(stderr, "moeplan: error: unknown command '%s'; did you mean %s? (see moeplan --help)\n",
                name, near);
    else
        fprintf(stderr, "moeplan: error: unknown command '%s' (see moeplan --help)\n", name);
    return MP_EXIT_USAGE;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        usage(stderr);
        return MP_EXIT_USAGE;
    }
    const char *name = argv[1];
    /* `moeplan help CMD` is `moeplan CMD --help` */
    char help_flag[] = "--help";
    char *help_argv[4] = {argv[0], NULL, help_flag, NULL};
    if (!strcmp(name, "help") && argc > 2) {
        if (argc > 3) {
            fprintf(stderr, "moeplan: error: help takes one COMMAND, got '%s' and '%s' (see moeplan --help)\n",
                    argv[2], argv[3]);
            return MP_EXIT_USAGE;
        }
        name = help_argv[1] = argv[2];
        const bool global = !strcmp(name, "help") || !strcmp(name, "--help") || !strcmp(name, "-h");
        if (!global && strcmp(name, "version") && !find_command(name))
            return unknown_command(name);
        argc = 3;
        argv = help_argv;
    }
    if (!strcmp(name, "--help") || !strcmp(name, "-h") || !strcmp(name, "help")) {
        usage(stdout);
        return MP_EXIT_OK;
    }
    if (!strcmp(name, "version") || !strcmp(name, "--version") || !strcmp(name, "-V")) {
        print_version();
        return MP_EXIT_OK;
    }
    /* Under a file-size limit (ulimit -f) a write past it raises SIGXFSZ, whose default action
     * kills the process silently, leaving temporaries behind; ignored, the write fails with EFBIG
     * and the writer reports it in one line and cleans up (base/atomic_file.h). */
    signal(SIGXFSZ, SIG_IGN);
    mp_knobs knobs;
    mp_error err;
    if (mp_knobs_start(&knobs, &err)) {
        fprintf(stderr, "moeplan: %s\n", err.msg);
        return MP_EXIT_USAGE;
    }
    if (knobs.hang_dump_s && !mp_hang_dump_arm((unsigned)knobs.hang_dump_s))
        fprintf(stderr, "moeplan: MP_HANG_DUMP_S: could not arm the stack dump\n");
    const char *isa_note = mp_kernels_isa_warning(); /* an MP_ISA the CPU lacks is said, once */
    if (isa_note)
        fprintf(stderr, "moeplan: warning: %s\n", isa_note);
    const command *cmd = find_command(name);
    if (!cmd)
        return unknown_command(name);
    return cmd->fn ? cmd->fn(argc - 1, argv + 1) : cmd->with_knobs(argc - 1, argv + 1, &knobs);
}
