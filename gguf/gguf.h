/* gguf/gguf.h — GGUF v3 reader (over mmap) and writer.
 *
 * Reader invariants, checked at open (fail closed, one-line errors naming file and byte offset):
 *  - magic "GGUF", version 3 (2 is accepted: same layout with 64-bit counts);
 *  - every count, length and size fits the file and does not overflow;
 *  - metadata values of every type (arrays included, nested arrays rejected) lie inside the file;
 *    keys are 1..65535 bytes and unique; bools are 0 or 1;
 *  - general.alignment, if present, is a u32 power of two (default 32);
 *  - tensor names are 1..64 bytes and unique; n_dims in 1..4; every dimension >= 1; the type is supported
 *    (kernels/quant.h) and ne[0] is a multiple of its block size; each tensor's data lies inside
 *    the file, at an offset that is a multiple of the alignment, and tensors do not overlap.
 * Strings point into the mapping and are NOT NUL-terminated: use mp_str's len.
 * The mapping lives until mp_gguf_close; tensor data pointers are valid until then.
 */
#ifndef MP_GGUF_GGUF_H
#define MP_GGUF_GGUF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/error.h"

typedef enum mp_gguf_vtype {
    MP_GGUF_UINT8 = 0,
    MP_GGUF_INT8 = 1,
    MP_GGUF_UINT16 = 2,
    MP_GGUF_INT16 = 3,
    MP_GGUF_UINT32 = 4,
    MP_GGUF_INT32 = 5,
    MP_GGUF_FLOAT32 = 6,
    MP_GGUF_BOOL = 7,
    MP_GGUF_STRING = 8,
    MP_GGUF_ARRAY = 9,
    MP_GGUF_UINT64 = 10,
    MP_GGUF_INT64 = 11,
    MP_GGUF_FLOAT64 = 12,
} mp_gguf_vtype;

typedef struct mp_str {
    const char *ptr; /* not NUL-terminated */
    uint64_t len;
} mp_str;

bool mp_str_eq(mp_str s, const char *cstr);

#define MP_GGUF_MAX_DIMS 4

typedef struct mp_gguf_tensor {
    mp_str name;
    uint32_t n_dims;
    int64_t ne[MP_GGUF_MAX_DIMS]; /* ne[0] is the contiguous (row) dimension; unused dims are 1 */
    int type;                     /* mp_type */
    uint64_t file_offset;         /* absolute byte offset of the data in the file */
    uint64_t nbytes;              /* exact data size */
    const void *data;             /* into the mapping */
} mp_gguf_tensor;

typedef struct mp_gguf mp_gguf; /* opaque */

/* A model split in several files (llama.cpp's gguf-split, PREFIX-00001-of-0000N.gguf ...): open the
 * first; its metadata are the model's, and the handle's tensors are every file's (each file checked
 * as one alone, then the set: shard numbers, count, split.tensors.count, no name twice). Opening
 * another shard is an error that names the first. */
mp_status mp_gguf_open(const char *path, mp_gguf **out, mp_error *err);
/* Parse an in-memory image (the fuzz target and tests use this); buf must outlive the handle. */
mp_status mp_gguf_open_buffer(const void *buf, size_t size, const char *name, mp_gguf **out,
                              mp_error *err);
void mp_gguf_close(mp_gguf *g);

const char *mp_gguf_path(const mp_gguf *g);
uint32_t mp_gguf_version(const mp_gguf *g);
uint64_t mp_gguf_file_size(const mp_gguf *g); /* all its files' bytes */
int64_t mp_gguf_n_files(const mp_gguf *g);     /* 1, or a split model's count */
uint32_t mp_gguf_alignment(const mp_gguf *g);
uint64_t mp_gguf_data_offset(const mp_gguf *g); /* absolute start of the data section */
const char *mp_gguf_vtype_name(mp_gguf_vtype t); /* "u32", "string", "array", ...; "?" if unknown */

/* Metadata. Keys are looked up by exact name. */
int64_t mp_gguf_n_kv(const mp_gguf *g);
mp_str mp_gguf_kv_key(const mp_gguf *g, int64_t i);
mp_gguf_vtype mp_gguf_kv_type(const mp_gguf *g, int64_t i);
int64_t mp_gguf_find_key(const mp_gguf *g, const char *key); /* -1 if absent */
/* Element type and length of kv i if it is an array (false otherwise). */
bool mp_gguf_kv_arr_info(const mp_gguf *g, int64_t i, mp_gguf_vtype *elem_type, uint64_t *n);

/* Typed getters by key. Integers convert between widths only when the value fits; a missing key or
 * a wrong type is an MP_ERR_FORMAT error naming the key and the file. */
mp_status mp_gguf_get_u32(const mp_gguf *g, const char *key, uint32_t *out, mp_error *err);
mp_status mp_gguf_get_u64(const mp_gguf *g, const char *key, uint64_t *out, mp_error *err);
mp_status mp_gguf_get_i64(const mp_gguf *g, const char *key, int64_t *out, mp_error *err);
mp_status mp_gguf_get_f32(const mp_gguf *g, const char *key, float *out, mp_error *err);
/* Any numeric scalar (integers and floats) as a double. */
mp_status mp_gguf_get_f64(const mp_gguf *g, const char *key, double *out, mp_error *err);
mp_status mp_gguf_get_bool(const mp_gguf *g, const char *key, bool *out, mp_error *err);
mp_status mp_gguf_get_str(const mp_gguf *g, const char *key, mp_str *out, mp_error *err);
/* Arrays: element type and length; elements by index. */
mp_status mp_gguf_get_arr(const mp_gguf *g, const char *key, mp_gguf_vtype *elem_type,
                          uint64_t *n, mp_error *err);
mp_status mp_gguf_get_arr_str(const mp_gguf *g, const char *key, uint64_t i, mp_str *out,
                              mp_error *err);
/* Numeric array element i converted to double / int64 (integers and floats / integers only). */
mp_status mp_gguf_get_arr_f64(const mp_gguf *g, const char *key, uint64_t i, double *out,
                              mp_error *err);
mp_status mp_gguf_get_arr_i64(const mp_gguf *g, const char *key, uint64_t i, int64_t *out,
                              mp_error *err);
/* Raw view of a numeric array's data (little-endian, element-type sized); NULL for strings.
 * The pointer may be unaligned for the element type: read elements with memcpy. */
const void *mp_gguf_arr_data(const mp_gguf *g, const char *key);

/* Render the value of kv i as text for `moeplan inspect` (arrays abbreviated after max_elems).
 * One line: strings are quoted with control bytes escaped; output longer than cap ends in "...". */
void mp_gguf_kv_format(const mp_gguf *g, int64_t i, char *buf, size_t cap, int max_elems);
/* The shortest %g text of v that reads back to the same value (as a float when is_f32). */
void mp_gguf_format_double(double v, bool is_f32, char *buf, size_t cap);

/* Tensors. */
int64_t mp_gguf_n_tensors(const mp_gguf *g);
const mp_gguf_tensor *mp_gguf_tensor_at(const mp_gguf *g, int64_t i);
const mp_gguf_tensor *mp_gguf_find_tensor(const mp_gguf *g, const char *name); /* NULL if absent */

/* ---- writer ----
 * Usage: open, add every kv and every tensor info (shapes and types), then write each tensor's
 * data in the order the infos were added, then finish. Data is streamed: nothing but the
 * metadata is held in memory. Output goes to PATH.tmp.<pid> and is renamed to PATH by finish;
 * mp_gguf_writer_abort (or any failure) removes the temporary file. */
typedef struct mp_gguf_writer mp_gguf_writer;

mp_status mp_gguf_writer_open(const char *path, mp_gguf_writer **out, mp_error *err);
mp_status mp_gguf_writer_set_alignment(mp_gguf_writer *w, uint32_t alignment, mp_error *err);
mp_status mp_gguf_add_u32(mp_gguf_writer *w, const char *key, uint32_t v, mp_error *err);
mp_status mp_gguf_add_i32(mp_gguf_writer *w, const char *key, int32_t v, mp_error *err);
mp_status mp_gguf_add_u64(mp_gguf_writer *w, const char *key, uint64_t v, mp_error *err);
mp_status mp_gguf_add_f32(mp_gguf_writer *w, const char *key, float v, mp_error *err);
mp_status mp_gguf_add_bool(mp_gguf_writer *w, const char *key, bool v, mp_error *err);
/* Any scalar type (not string or array): value points to one element of that type. */
mp_status mp_gguf_add_val(mp_gguf_writer *w, const char *key, mp_gguf_vtype type, const void *value,
                          mp_error *err);
mp_status mp_gguf_add_str(mp_gguf_writer *w, const char *key, const char *v, mp_error *err);
mp_status mp_gguf_add_arr_str(mp_gguf_writer *w, const char *key, const char *const *v, uint64_t n,
                              mp_error *err);
/* Numeric arrays: elem_type is one of the scalar vtypes; data holds n elements of that type. */
mp_status mp_gguf_add_arr(mp_gguf_writer *w, const char *key, mp_gguf_vtype elem_type,
                          const void *data, uint64_t n, mp_error *err);
mp_status mp_gguf_add_tensor_info(mp_gguf_writer *w, const char *name, uint32_t n_dims,
                                  const int64_t *ne, int type, mp_error *err);
/* Write the next tensor's data; nbytes must equal its size. May be called in several chunks
 * per tensor (the writer tracks how much of the current tensor is done). */
mp_status mp_gguf_write_data(mp_gguf_writer *w, const void *data, size_t nbytes, mp_error *err);
mp_status mp_gguf_writer_finish(mp_gguf_writer *w, mp_error *err); /* frees w */
void mp_gguf_writer_abort(mp_gguf_writer *w);                        /* frees w */

#endif
