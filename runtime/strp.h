/* runtime/strp.h — STRP v1 placement profiles: reader, writer and the JSON manifest beside them.
 *
 * Format (schemas/strp.md), little-endian:
 *   "STRP", u32 version (= 1), u32 n_layers, u32 n_experts, u32 slots, u32 n_ranked;
 *   n_ranked × (u16 layer, u16 expert), most valuable first;
 *   optionally an n_layers × n_experts table (row-major by layer) whose entry width is implied by
 *   what is left of the file: 0 (no table), 4 bytes (int32 slot or f32 frequency) or 8 bytes (u64
 *   routing count). Any other remainder is rejected.
 *
 * Invariants of every mp_strp this module hands out (the reader checks them, the writer refuses to
 * write a profile that breaks them):
 *  - 1 <= n_layers <= 65536 and 1 <= n_experts <= 65536 (pairs store u16 indices);
 *  - slots <= n_ranked <= n_layers * n_experts;
 *  - every ranked pair is in range and no pair appears twice;
 *  - a 4-byte table is valid as int32 slots (each -1 or in [0, slots)) or as f32 frequencies (each
 *    0 or a finite normal value > 0); when both hold (an all-zero table) the kind is
 *    MP_STRP_TABLE_4BYTE_AMBIGUOUS and both views are filled;
 *  - the entries of a u64 count table sum to at most 2^64 - 1 (sums of them never wrap).
 * The reader never returns a partial profile: on any error *out is left empty.
 */
#ifndef MP_RUNTIME_STRP_H
#define MP_RUNTIME_STRP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "runtime/error.h"

#define MP_STRP_VERSION 1u
#define MP_STRP_HEADER_BYTES 24u
#define MP_STRP_PAIR_BYTES 4u
#define MP_STRP_MAX_DIM 65536u
/* Files larger than this are refused before they are read. The largest profile a model we know
 * needs is a few MB (Qwen3-235B: 94 × 128 experts with a u64 table, 96 KiB + pairs); 1 GiB also
 * bounds what a wrong file given as a profile can make a reader allocate. */
#define MP_STRP_MAX_FILE_BYTES ((uint64_t)1 << 30)

typedef enum mp_strp_table {
    MP_STRP_TABLE_NONE = 0,
    MP_STRP_TABLE_I32_SLOT = 1,           /* slot index the expert occupies, -1 if not resident */
    MP_STRP_TABLE_F32_FREQ = 2,           /* routing frequency (any non-negative scale) */
    MP_STRP_TABLE_4BYTE_AMBIGUOUS = 3,    /* valid as both of the above (all zeros) */
    MP_STRP_TABLE_U64_COUNT = 4,          /* routing counts */
} mp_strp_table;

typedef struct mp_strp_pair {
    uint16_t layer;
    uint16_t expert;
} mp_strp_pair;

typedef struct mp_strp {
    uint32_t n_layers;
    uint32_t n_experts;
    uint32_t slots;        /* experts to keep resident for the budget the profile was made for */
    uint32_t n_ranked;     /* slots <= n_ranked <= n_layers * n_experts */
    mp_strp_pair *ranked;  /* (n_ranked) most valuable first, unique, in range */
    mp_strp_table table;
    /* The table views, each (n_layers, n_experts) row-major, or NULL when the kind lacks them:
     * counts for U64_COUNT; slot_of for I32_SLOT and AMBIGUOUS; freq for F32_FREQ and AMBIGUOUS. */
    uint64_t *counts;
    int32_t *slot_of;
    float *freq;
} mp_strp;

/* The geometry a profile must match (the model it is applied to). */
typedef struct mp_strp_geometry {
    uint32_t n_layers;
    uint32_t n_experts;
} mp_strp_geometry;

/* Parse an image. name is used in error messages. expect may be NULL (no geometry check).
 * On success *out owns its arrays (mp_strp_free); on failure *out is zeroed. */
mp_status mp_strp_read_buffer(const void *buf, size_t size, const char *name,
                              const mp_strp_geometry *expect, mp_strp *out, mp_error *err);
mp_status mp_strp_read_file(const char *path, const mp_strp_geometry *expect, mp_strp *out,
                            mp_error *err);
void mp_strp_free(mp_strp *p);

/* Check the invariants above on an in-memory profile (the writer calls it first). For the 4-byte
 * kinds the writer emits slot_of (I32_SLOT) or freq (F32_FREQ); AMBIGUOUS cannot be written. */
mp_status mp_strp_validate(const mp_strp *p, const char *name, mp_error *err);

/* Serialize to a malloc'd image (*out_size bytes). */
mp_status mp_strp_encode(const mp_strp *p, uint8_t **out, size_t *out_size, mp_error *err);

/* Write path via "path.tmp.<pid>" + fsync + rename: readers see the old file or the new one. */
mp_status mp_strp_write_file(const char *path, const mp_strp *p, mp_error *err);

const char *mp_strp_table_name(mp_strp_table t);

/* The placement a runtime applies: the first n ranked pairs are resident, where n is the
 * profile's slots (n_slots == MP_STRP_PROFILE_SLOTS) or as many as a budget allows (n_slots),
 * at most n_ranked. resident (n_layers, n_experts) is cleared and filled; returns n. */
#define MP_STRP_PROFILE_SLOTS UINT64_MAX
uint32_t mp_strp_placement(const mp_strp *p, uint64_t n_slots, uint8_t *resident);

/* Manifest: the metadata STRP has no room for, as JSON beside the profile (PROFILE.json).
 * String fields may be NULL and numbers NaN (or budget 0) for "not known": they are written as
 * JSON null so that a later step can fill them. */
#define MP_STRP_MAX_PARAMS 16
typedef struct mp_strp_param {
    const char *name;
    double value;
} mp_strp_param;

typedef struct mp_strp_manifest {
    const char *model_sha256;  /* hex */
    const char *model_path;
    uint64_t budget_bytes;     /* GPU bytes for experts the profile was planned for */
    const char *policy;        /* e.g. "static-topn", "plan" */
    mp_strp_param params[MP_STRP_MAX_PARAMS];
    int n_params;
    const char *costs_sha256;  /* hex of the cost file used */
    const char *trace_sha256;  /* hex of the trace used */
    double predicted_tok_s;
    double heldout_coverage;   /* share of held-out routes the resident experts serve, in [0, 1] */
    double train_frac;
} mp_strp_manifest;

void mp_strp_manifest_init(mp_strp_manifest *m);

/* Write the manifest for profile p (its geometry, slots, n_ranked and table kind are recorded
 * too) to path, through a temporary file and rename. */
mp_status mp_strp_manifest_write(const char *path, const mp_strp_manifest *m, const mp_strp *p,
                                 mp_error *err);

#endif
