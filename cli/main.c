/* cli/main.c — the `moeplan` binary: reads the knobs (runtime/knobs.h) from the environment once,
 * refusing a value that is not allowed, sets the kernels' switches from them, and dispatches
 * subcommands to the modules that own them. */
#include <signal.h>
#include <stdio.h>
#include <string.h>

#include "cli/commands.h"
#include "cli/hang_dump.h"
#include "kernels/quant.h"
#include "runtime/build_info.h"
#include "collector/route_replay.h"
#include "runtime/knobs.h"

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
               "usage: moeplan COMMAND [options]   (moeplan COMMAND --help for each)\n"
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

int main(int argc, char **argv)
{
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    const char *name = argv[1];
    if (!strcmp(name, "--help") || !strcmp(name, "-h") || !strcmp(name, "help")) {
        usage(stdout);
        return 0;
    }
    if (!strcmp(name, "version") || !strcmp(name, "--version") || !strcmp(name, "-V")) {
        print_version();
        return 0;
    }
    /* Under a file-size limit (ulimit -f) a write past it raises SIGXFSZ, whose default action
     * kills the process silently, leaving temporaries behind; ignored, the write fails with EFBIG
     * and the writer reports it in one line and cleans up (runtime/atomic_file.h). */
    signal(SIGXFSZ, SIG_IGN);
    mp_knobs knobs;
    mp_error err;
    if (mp_knobs_start(&knobs, &err)) {
        fprintf(stderr, "moeplan: %s\n", err.msg);
        return 2;
    }
    if (knobs.hang_dump_s && !mp_hang_dump_arm((unsigned)knobs.hang_dump_s))
        fprintf(stderr, "moeplan: MP_HANG_DUMP_S: could not arm the stack dump\n");
    const char *isa_note = mp_kernels_isa_warning(); /* an MP_ISA the CPU lacks is said, once */
    if (isa_note)
        fprintf(stderr, "moeplan: warning: %s\n", isa_note);
    for (int i = 0; i < n_commands; i++)
        if (!strcmp(name, commands[i].name))
            return commands[i].fn ? commands[i].fn(argc - 1, argv + 1)
                                  : commands[i].with_knobs(argc - 1, argv + 1, &knobs);
    fprintf(stderr, "moeplan: unknown command '%s' (try moeplan --help)\n", name);
    return 2;
}
