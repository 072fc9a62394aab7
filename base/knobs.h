/* base/knobs.h — the MP_* environment variables ("knobs") that change how moeplan runs: one
 * table (knobs.c) gives each its name, type, allowed values, default and a line of doc.
 *
 * A program reads them once when it starts (mp_knobs_read_env) and hands the result down as a
 * const mp_knobs: to the session (mp_session_params.knobs), and from it to the CPU MoE block, the
 * thread pool and the GPU executor (which sets the CUDA kernels' launch switch, MP_CUDA_PDL, from
 * them); the CPU kernels' ISA cap is set from it once by mp_knobs_apply_kernels. No other code
 * reads the environment.
 *
 * Types: a switch is "0" or "1"; a number is one plain decimal integer in [lo, hi], or one of at
 * most two values a knob also allows outside that range; a choice is one word of a list; a list is
 * NAME:N pairs separated by commas ("Q4_K:8,Q6_K:12"), each NAME at most once (letters, digits and
 * '_', case ignored), each N a whole number in [lo, hi], the whole shorter than MP_KNOB_TEXT_MAX
 * (what a NAME may be is the reader's: runtime/knobs_apply.c checks MP_AMX_ROWS' against the
 * kernels). Unset or empty: the default (a list's: no pairs). Anything else is refused, in one line naming the variable, the value and
 * what was expected, so that a typo never passes for an A/B run.
 *
 * Invariant: every field of mp_knobs holds an allowed value of its knob (the readers refuse the
 * rest), so code below may use them without checking.
 */
#ifndef MP_BASE_KNOBS_H
#define MP_BASE_KNOBS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <cjson/cJSON.h>

#include "base/error.h"

/* MP_ISA: the level the CPU kernels are capped at (kernels/quant.h); BEST: no cap */
enum { MP_KNOB_ISA_BEST, MP_KNOB_ISA_SCALAR, MP_KNOB_ISA_AVX2, MP_KNOB_ISA_AVX512, MP_KNOB_ISA_AMX };
/* MP_GPU_HOST_EXPERTS: where the GPU executor keeps the cold experts (gpu/gpu_host.c) */
enum { MP_GPU_HOST_PINNED, MP_GPU_HOST_COPY, MP_GPU_HOST_MAPPING };

/* MP_GPU_GEMM_MIN_ROWS's floor: the GPU executor sizes its GEMM scratch for steps of at least this
 * many rows (runtime/placement.h's MP_GPU_GEMM_MIN_ROWS is this value) */
#define MP_KNOB_GEMM_MIN_ROWS 32
/* MP_POOL_SPIN_US's default: also the spin of pools made before the knobs are applied (tests) */
#define MP_KNOB_POOL_SPIN_US 2000
/* MP_MOE_UNIT_KB's default: 16-row units, whatever their bytes. On the H200 host (16 threads, one
 * 2 MB expert a call) units of at least 64 KiB took 32-33 us a call against 42-43, and eight
 * experts a call within 3 % (bench/results/2026-12-04-h200-cpu-units/); a whole decode with them is
 * not measured yet, and the one matrix run with 64 as the default (olmoe, one process a row) had 3
 * of 12 rows 10-14 % slow, their CPU experts at 73-79 GB/s against the grid's 106, so 0 stays until
 * whole decodes are compared side by side */
#define MP_KNOB_MOE_UNIT_KB 0
/* MP_MOE_UNIT_MAX_KB's default: a pipelined unit reads at most this many KiB (above the 16-row
 * floor). With 8 units a thread a one-route Mixtral call (114 MB experts, 16 threads) cut units of
 * 516 KB, and its threads waited 4-5 % of their time for the expert's hidden rows and 2-3 % in the
 * tail; units of about 129 KB took a median 0.955x the time over eight rounds on two H100 hosts
 * (inside a round's spread), while the 30B preset's units (41-110 KB at 8 a thread) are under the
 * cap and stay (bench/NOTES-cpu-decode.md, 2026-12-07) */
#define MP_KNOB_MOE_UNIT_MAX_KB 128
/* MP_PREFETCH_BYTES's default: kernels/quant.h's MP_PREFETCH_BYTES_DEFAULT (kernels import nothing of
 * the project; runtime/knobs_apply.c asserts that the two agree), and its cap, MP_PREFETCH_BYTES_MAX */
#define MP_KNOB_PREFETCH_BYTES 2048
#define MP_KNOB_PREFETCH_BYTES_MAX 65536

#define MP_KNOBS_MAX 32 /* room in mp_knobs.source; the table has mp_knob_count() <= this entries */
/* The room for any knob's value as text (a list's with its terminating zero); a buffer of this size
 * holds mp_knob_value_text's every answer */
#define MP_KNOB_TEXT_MAX 96

/* Where a knob's value came from: its default, the environment, a command's flag, or a calibration
 * (a tuned knob calibrate chose on this host, or a run took from the cost file: mp_knob_def.costs) */
typedef enum mp_knob_source {
    MP_KNOB_DEFAULT = 0,
    MP_KNOB_ENV = 1,
    MP_KNOB_FLAG = 2,
    MP_KNOB_CALIBRATED = 3
} mp_knob_source;

/* mp_knob_def.costs: what a knob is to calibrate */
enum {
    MP_KNOB_COSTS_NONE = 0,  /* calibrate's measurements do not depend on it */
    MP_KNOB_COSTS_TIMED = 1, /* they do: a run whose value differs from the cost file's is told */
    MP_KNOB_COSTS_TUNED = 2  /* and calibrate measures and chooses its value where the environment
                              * leaves it unset; a run given that cost file takes the chosen value
                              * where the environment leaves it unset (mp_knobs_take_calibrated) */
};

typedef struct mp_knobs {
    /* CPU kernels and the CPU executor */
    int isa;                 /* MP_ISA: MP_KNOB_ISA_* */
    int64_t prefetch_bytes;  /* MP_PREFETCH_BYTES: 0..MP_KNOB_PREFETCH_BYTES_MAX */
    bool pool_pin;           /* MP_POOL_PIN */
    int64_t pool_spin_us;    /* MP_POOL_SPIN_US: 0..1000000 */
    int64_t moe_pipe_units;  /* MP_MOE_PIPE_UNITS: 1..64 */
    int64_t moe_unit_kb;     /* MP_MOE_UNIT_KB: 0..16384 */
    int64_t moe_unit_max_kb; /* MP_MOE_UNIT_MAX_KB: 0..16384 */
    char amx_rows[MP_KNOB_TEXT_MAX]; /* MP_AMX_ROWS: TYPE:ROWS pairs (a list), "" for the kernels' table */
    bool moe_cpu_profile;    /* MP_MOE_CPU_PROFILE */
    /* the GPU executor */
    bool gpu_graphs;         /* MP_GPU_GRAPHS */
    bool gpu_step_stamps;    /* MP_GPU_STEP_STAMPS */
    int64_t gpu_gemm_min_rows; /* MP_GPU_GEMM_MIN_ROWS: >= MP_KNOB_GEMM_MIN_ROWS */
    int gpu_host_experts;    /* MP_GPU_HOST_EXPERTS: MP_GPU_HOST_* */
    bool gpu_part_by_unit;   /* MP_GPU_PART_BY_UNIT */
    bool gpu_init_trace;     /* MP_GPU_INIT_TRACE */
    int64_t gpu_tier_hold;   /* MP_GPU_TIER_HOLD: 0..1000 steps */
    /* the CUDA kernels (kernels/cuda/cuda_ops.h) */
    bool cuda_pdl;           /* MP_CUDA_PDL */
    /* every command (cli/hang_dump.c) */
    int64_t hang_dump_s;     /* MP_HANG_DUMP_S: 0 off, else 1..86400 */

    uint8_t source[MP_KNOBS_MAX]; /* mp_knob_source of each table entry, in table order */
} mp_knobs;

typedef enum mp_knob_type { MP_KNOB_SWITCH, MP_KNOB_NUMBER, MP_KNOB_CHOICE, MP_KNOB_LIST } mp_knob_type;

typedef struct mp_knob_choice {
    const char *word;
    int value;
} mp_knob_choice;

/* One entry of the table. The field at `offset` of mp_knobs is a bool (switch), an int64_t
 * (number), an int (choice: the value of the chosen word) or char[MP_KNOB_TEXT_MAX] (list: its
 * text as given; default: empty). */
typedef struct mp_knob_def {
    const char *name;
    mp_knob_type type;
    size_t offset;
    int64_t lo, hi;             /* number: the range; list: each pair's number's */
    int n_also;                 /* number: values allowed outside [lo, hi] (0..2) */
    int64_t also[2];
    const mp_knob_choice *choices; /* choice: (n_choices) words */
    int n_choices;
    int64_t dflt;               /* switch 0/1, the number, or the choice's value (list: 0, no pairs) */
    uint8_t costs;              /* MP_KNOB_COSTS_*: TIMED or TUNED, it changes what calibrate times (a
                                 * run whose value differs from the cost file's $.device.knobs is told:
                                 * mp_decide_other_knobs) */
    const char *doc;            /* one line */
    const char *pair_name;      /* list: what a pair's NAME is, for the docs ("TYPE") */
} mp_knob_def;

int mp_knob_count(void);
const mp_knob_def *mp_knob_at(int i); /* 0 <= i < mp_knob_count() */
const mp_knob_def *mp_knob_find(const char *name); /* NULL: no such knob */
int mp_knob_index(const char *name);               /* its table entry, -1: no such knob */

/* Every knob at its default, every source MP_KNOB_DEFAULT. */
void mp_knobs_defaults(mp_knobs *k);
/* k, or (k NULL: a caller that was given no knobs) *storage filled with the defaults. */
const mp_knobs *mp_knobs_or_defaults(const mp_knobs *k, mp_knobs *storage);

/* Set one knob from its text (as the environment would give it) and record where it came from.
 * Unset (NULL) or empty: the default, source MP_KNOB_DEFAULT. MP_ERR_ARG with one line naming
 * name=text and what the knob expects when the text is not an allowed value; k is unchanged then. */
mp_status mp_knobs_set(mp_knobs *k, const char *name, const char *text, mp_knob_source source, mp_error *err);

/* Fill k from lookup(ctx, name) for every knob of the table (a NULL answer: unset). Stops at the
 * first value that is not allowed (MP_ERR_ARG, mp_knobs_set's line), or at a retired knob that is
 * set (MP_ERR_ARG: "NAME=VALUE: no longer a knob: what runs instead (docs/config.md, ...)"). */
typedef const char *(*mp_knob_lookup)(void *ctx, const char *name);
mp_status mp_knobs_read(mp_knobs *k, mp_knob_lookup lookup, void *ctx, mp_error *err);
/* mp_knobs_read from the process environment: for a program's main, once, at start. */
mp_status mp_knobs_read_env(mp_knobs *k, mp_error *err);

/* The i-th pair (from 0) of a list knob's text: its NAME into name (cap bytes), its N into *n; false
 * past the last pair (or where text is not a list, which an allowed value never is). */
bool mp_knob_list_at(const char *text, int i, char *name, size_t cap, int64_t *n);
/* The value of table entry i in k: the switch (0/1), the number, the choice's value, or a list's
 * count of pairs. */
int64_t mp_knob_value(const mp_knobs *k, int i);
/* The value of table entry i in k as the environment spells it ("1", "64", "pinned",
 * "Q4_K:8,Q6_K:12"), and the default likewise (a list's: ""); "0|1", "1..64", "0 or 1..86400",
 * "pinned|copy|mapping", "TYPE:1..2147483647,..." for what the entry allows. Each returns buf
 * (MP_KNOB_TEXT_MAX holds any value). */
const char *mp_knob_value_text(const mp_knobs *k, int i, char *buf, size_t cap);
const char *mp_knob_default_text(int i, char *buf, size_t cap);
const char *mp_knob_allowed_text(int i, char *buf, size_t cap);
const char *mp_knob_source_name(mp_knob_source s); /* "default", "env", "flag", "calibrated" */

/* Take a cost file's value of one knob ($.device.knobs: name, text as the environment spells it)
 * where it is a tuned knob (MP_KNOB_COSTS_TUNED) that k has at its default: set, source
 * MP_KNOB_CALIBRATED, *taken true. Kept (MP_OK, *taken false, k unchanged): another knob, a name that
 * is none, one set by the environment or a flag. A value the tuned knob does not allow (none, or one
 * this build refuses): mp_knobs_set's error, *taken false, k unchanged. */
mp_status mp_knobs_take_calibrated(mp_knobs *k, const char *name, const char *text, bool *taken, mp_error *err);

/* The cap MP_ISA sets for kernels/quant.h's mp_kernels_set_isa_cap: NULL (best) or the level. */
const char *mp_knobs_isa_cap(const mp_knobs *k);

/* k as JSON members of obj: "knobs": {NAME: value, ...} with every knob (switches and numbers as JSON numbers,
 * choices and lists as strings), and "knobs_set": {NAME: "env"|"flag"} for those not at their default's
 * source. For the trace's run config and bench's JSON rows. false when out of memory. */
bool mp_knobs_add_json(const mp_knobs *k, cJSON *obj);

#endif
