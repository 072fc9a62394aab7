/* runtime/strp.h — STRP v1 placement profiles: reader, writer and the JSON manifest beside them.
 *
 * Format (schemas/strp.md), little-endian:
 *   "STRP", u32 version (= 1), u32 n_layers, u32 n_experts, u32 slots, u32 n_ranked;
 *   n_ranked × (u16 layer, u16 expert), most valuable first;
 *   optionally an n_layers × n_experts table (row-major by layer) whose entry width is implied by
 *   what is left of the file: 0 (no table), 4 bytes (int32 slot or f32 frequency) or 8 bytes (u64
 *   routing count). Any other remainder is rejected.
 *
 * What a profile means (schemas/strp.md, "Slots, pairs and the ranking"):
 *  - the resident set is the first min(slots, n_ranked) pairs (mp_strp_resident);
 *  - the whole ranking is the pairs, then the tail: the experts a routing table (u64 counts or f32
 *    frequencies) ranks after them. The tail is not stored; it is derived from the table
 *    (mp_strp_rank_tail), so that a file can list only its resident set, with slots = n_ranked, and
 *    still load in readers that refuse n_ranked > slots (Strata's read_expert_profile, the llama.cpp
 *    fork's llama_read_expert_profile) while a runtime with more room can take the next experts.
 *
 * Invariants of every mp_strp this module hands out (the reader checks them, the writer refuses to
 * write a profile that breaks them):
 *  - 1 <= n_layers <= 65536 and 1 <= n_experts <= 65536 (pairs store u16 indices);
 *  - slots <= n_layers * n_experts and n_ranked <= n_layers * n_experts (slots may be below, equal
 *    to or above n_ranked: every convention is read);
 *  - every ranked pair is in range and no pair appears twice;
 *  - a 4-byte table is valid as int32 slots (each -1 or in [0, slots)) or as f32 frequencies (each
 *    0 or a finite normal value > 0); when both hold (an all-zero table) the kind is
 *    MP_STRP_TABLE_4BYTE_AMBIGUOUS and both views are filled;
 *  - the entries of a u64 count table sum to at most 2^64 - 1 (sums of them never wrap);
 *  - a profile the reader returns has its tail derived (tail and ranked are disjoint).
 * The reader never returns a partial profile: on any error *out is left empty.
 */
#ifndef MP_RUNTIME_STRP_H
#define MP_RUNTIME_STRP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/error.h"

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
    uint32_t slots;        /* the VRAM slots the profile wants: its resident set is the first
                            * min(slots, n_ranked) pairs; <= n_layers * n_experts */
    uint32_t n_ranked;     /* pairs the file lists; <= n_layers * n_experts */
    mp_strp_pair *ranked;  /* (n_ranked) most valuable first, unique, in range */
    mp_strp_table table;
    /* The table views, each (n_layers, n_experts) row-major, or NULL when the kind lacks them:
     * counts for U64_COUNT; slot_of for I32_SLOT and AMBIGUOUS; freq for F32_FREQ and AMBIGUOUS. */
    uint64_t *counts;
    int32_t *slot_of;
    float *freq;
    /* The ranking after the pairs, derived from counts or freq by mp_strp_rank_tail (the reader
     * calls it). Not part of the file: the encoder ignores it. */
    uint32_t n_tail;
    mp_strp_pair *tail;    /* (n_tail) most valuable first, none of them among the pairs */
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

/* Check the invariants above on an in-memory profile (the encoder calls it first; the tail is not
 * checked: the encoder does not write it). For the 4-byte kinds the encoder emits slot_of
 * (I32_SLOT) or freq (F32_FREQ); AMBIGUOUS cannot be written. */
mp_status mp_strp_validate(const mp_strp *p, const char *name, mp_error *err);

/* Serialize to a malloc'd image (*out_size bytes). Any valid profile, whatever its convention: what
 * the reader accepts re-encodes to the same bytes. */
mp_status mp_strp_encode(const mp_strp *p, uint8_t **out, size_t *out_size, mp_error *err);

/* Write path via "path.tmp.<pid>" + fsync + rename: readers see the old file or the new one. Refuses
 * (MP_ERR_ARG) a profile with n_ranked > slots: the Strata and llama.cpp-fork readers refuse such a
 * file, so moeplan never writes one; the ranking past the resident set goes in the table. */
mp_status mp_strp_write_file(const char *path, const mp_strp *p, mp_error *err);

/* Derive p->tail from the routing table (replacing any tail p had): every expert the pairs do not
 * list, in a layer whose row of the table is not all zero (layers without a MoE block have no
 * routing), most routed first, ties by layer then expert. No tail without counts or freq.
 * MP_ERR_NOMEM is the only failure (p keeps no tail then). */
mp_status mp_strp_rank_tail(mp_strp *p, mp_error *err);

/* The resident set's size: the first min(slots, n_ranked) pairs. */
static inline uint32_t mp_strp_resident(const mp_strp *p)
{
    return p->slots < p->n_ranked ? p->slots : p->n_ranked;
}

/* The whole ranking: its length (n_ranked + n_tail) and its i-th expert (i < that length). */
static inline uint32_t mp_strp_ranking_len(const mp_strp *p) { return p->n_ranked + p->n_tail; }
static inline mp_strp_pair mp_strp_ranked_at(const mp_strp *p, uint32_t i)
{
    return i < p->n_ranked ? p->ranked[i] : p->tail[i - p->n_ranked];
}

const char *mp_strp_table_name(mp_strp_table t);

/* The placement a runtime applies: the first n experts of the whole ranking are resident, where n
 * is the resident set's size (n_slots == MP_STRP_PROFILE_SLOTS) or as many as a budget allows
 * (n_slots), at most the ranking's length: past the pairs it continues with the tail. resident
 * (n_layers, n_experts) is cleared and filled; returns n. */
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

/* Write the manifest for profile p (its geometry, slots, n_ranked, table kind, resident set and
 * whole ranking's length are recorded too) to path, through a temporary file and rename. */
mp_status mp_strp_manifest_write(const char *path, const mp_strp_manifest *m, const mp_strp *p,
                                 mp_error *err);

#endif
