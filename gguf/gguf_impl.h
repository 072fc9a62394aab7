/* gguf/gguf_impl.h — private to gguf/gguf*.c: the reader's handle and shared helpers.
 *
 * Invariant (established by the parse in gguf.c, relied on by gguf_meta.c): every offset stored
 * here addresses bytes inside base[0, size) that were bounds-checked at open, so readers of the
 * handle may dereference them without further checks.
 */
#ifndef MP_GGUF_GGUF_IMPL_H
#define MP_GGUF_GGUF_IMPL_H

#include <stdint.h>
#include <string.h>

#include "gguf/gguf.h"

typedef struct gguf_kv {
    mp_str key;
    uint64_t key_offset;    /* file offset of the key's length field (for messages) */
    mp_gguf_vtype type;
    uint64_t value_offset;  /* scalar: the value; string: its u64 length; array: element 0 */
    mp_gguf_vtype elem_type; /* arrays only */
    uint64_t n;             /* arrays only: element count */
    uint64_t *str_offsets;  /* string arrays only: (n) offset of each element's u64 length */
} gguf_kv;

/* Open-addressing hash index from a name to a record index; slots hold index + 1, 0 = empty.
 * Capacity is a power of two >= 2 × entries, so probes stay short. */
typedef struct name_index {
    int64_t *slots; /* (cap) */
    uint64_t mask;  /* cap - 1 */
} name_index;

struct mp_gguf {
    char *path;              /* file name used in messages (owned) */
    const uint8_t *base;     /* (size) the image */
    uint64_t size;
    void *map;               /* non-NULL when base is our mapping */
    uint32_t version;
    uint32_t alignment;
    uint64_t data_offset;    /* start of the data section (header end rounded up to alignment) */
    int64_t n_kv;
    gguf_kv *kvs;            /* (n_kv) */
    name_index kv_index;
    int64_t n_tensors;
    mp_gguf_tensor *tensors; /* (n_tensors): a split model's are every shard's (gguf.c, join_shards) */
    name_index tensor_index;
    /* A model split in several files (llama.cpp's gguf-split: split.count > 1 in this, the first):
     * the other shards, open while this handle is; their tensors are in `tensors` above, their
     * data in their own mappings. */
    struct mp_gguf **shards; /* (n_shards) */
    int64_t n_shards;
};

static inline size_t gguf_scalar_size(mp_gguf_vtype t)
{
    switch (t) {
    case MP_GGUF_UINT8: case MP_GGUF_INT8: case MP_GGUF_BOOL: return 1;
    case MP_GGUF_UINT16: case MP_GGUF_INT16: return 2;
    case MP_GGUF_UINT32: case MP_GGUF_INT32: case MP_GGUF_FLOAT32: return 4;
    case MP_GGUF_UINT64: case MP_GGUF_INT64: case MP_GGUF_FLOAT64: return 8;
    case MP_GGUF_STRING: case MP_GGUF_ARRAY: return 0;
    }
    return 0;
}

static inline uint64_t gguf_rd64(const uint8_t *p)
{
    uint64_t v;
    memcpy(&v, p, 8);
    return v;
}

static inline uint32_t gguf_rd32(const uint8_t *p)
{
    uint32_t v;
    memcpy(&v, p, 4);
    return v;
}

#endif
