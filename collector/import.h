/* collector/import.h — importers of foreign routing traces into the moeplan trace schema.
 *
 * Formats (docs/trace-format.md, "Imports"): onnxruntime QMoE routing logs, Strata
 * --dump-routing binaries, and routing CSV files (seq,pos,layer,e0..[,w0..]; without w columns
 * every choice is stored with weight 1/top_k).
 *
 * Every importer parses the input twice: a first pass validates everything and learns the node
 * table (and the expert count when not given); the second pass writes the trace. A malformed
 * input is therefore refused before anything is written, with one line naming the file, the line
 * (text formats) or byte offset (binary) and what was expected. The trace is written to a
 * temporary name beside the output and renamed only once complete.
 */
#ifndef MP_COLLECTOR_IMPORT_H
#define MP_COLLECTOR_IMPORT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "collector/trace.h"
#include "base/error.h"
#include "base/progress.h"

typedef enum mp_import_format {
    MP_IMPORT_AUTO = 0,
    MP_IMPORT_ORT_LOG = 1, /* onnxruntime QMoE routing log */
    MP_IMPORT_STRATA = 2,  /* Strata --dump-routing binary */
    MP_IMPORT_CSV = 3,     /* seq,pos,layer,e0..,w0.. */
} mp_import_format;

typedef struct mp_import_options {
    mp_import_format format;  /* AUTO: detect from the content */
    int64_t n_experts;        /* 0: infer as (largest id seen + 1) and say so in config_json */
    mp_trace_weight_format weight_format; /* default f32: imports keep the weights they read */
    bool force;               /* replace an existing output */
    mp_progress *progress;    /* NULL: none. Counts the first pass in input bytes (total: the
                               * file's size; records found as the second count), then the
                               * second in records written (mp_progress_next "import: write") */
} mp_import_options;

typedef struct mp_import_result {
    mp_import_format format;
    int64_t n_requests, n_steps, n_routing, n_nodes, n_experts;
    bool n_experts_inferred;
    bool weights_uniform;     /* the input had no router weights: each choice got 1/top_k */
} mp_import_result;

/* "onnxruntime-log", "strata", "csv" (NULL for AUTO / unknown). */
const char *mp_import_format_name(mp_import_format f);
/* Parse a format name (the CLI's FORMAT, "auto" included); -1 if unknown. */
int mp_import_format_parse(const char *name);
/* Guess the format of a file's first bytes: CSV header "seq,pos,layer" (fields quoted or not,
 * after a UTF-8 byte order mark or not), a log line with "moe_routing", else Strata binary. */
mp_import_format mp_import_detect(const char *data, size_t n);

/* Import in_path into a new trace at out_path (refused if it exists unless force, or if it is
 * the input). On failure no output file is left behind. */
mp_status mp_import_file(const char *in_path, const char *out_path, const mp_import_options *opt,
                         mp_import_result *res, mp_error *err);

/* Parse and validate a buffer without writing anything (the first pass only): what the fuzz
 * targets drive. name is used in messages. */
mp_status mp_import_check_buffer(mp_import_format format, const char *name, const char *data,
                                 size_t n, int64_t n_experts, mp_error *err);

#endif
