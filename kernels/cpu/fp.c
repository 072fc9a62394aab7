/* kernels/cpu/fp.c — per-type facts (block sizes, names) of the GGUF tensor types moeplan knows.
 *
 * MINIMAL VERSION written by the gguf helper so that the GGUF reader links; the kernels helper
 * owns this file and its full version (half/bfloat conversions, static size checks) replaces it.
 * Invariant: block_bytes/block_elems agree with the block structs of kernels/quant.h (the GGUF
 * spec's layouts); Q8_K is known but is not a weight type.
 */
#include <stddef.h>
#include <stdint.h>
#include <strings.h>

#include "kernels/quant.h"

typedef struct type_fact {
    int type;
    const char *name;
    int64_t block_elems;
    size_t block_bytes;
    int weight; /* 1: may appear as a weight tensor in a GGUF we load */
} type_fact;

static const type_fact type_facts[] = {
    {MP_TYPE_F32, "F32", 1, 4, 1},
    {MP_TYPE_F16, "F16", 1, 2, 1},
    {MP_TYPE_Q4_0, "Q4_0", MP_QK4_0, sizeof(mp_block_q4_0), 1},
    {MP_TYPE_Q8_0, "Q8_0", MP_QK8_0, sizeof(mp_block_q8_0), 1},
    {MP_TYPE_Q4_K, "Q4_K", MP_QK_K, sizeof(mp_block_q4_K), 1},
    {MP_TYPE_Q6_K, "Q6_K", MP_QK_K, sizeof(mp_block_q6_K), 1},
    {MP_TYPE_Q8_K, "Q8_K", MP_QK_K, sizeof(mp_block_q8_K), 0},
    {MP_TYPE_BF16, "BF16", 1, 2, 1},
};

_Static_assert(sizeof(mp_block_q4_0) == 18, "Q4_0 block is 18 bytes");
_Static_assert(sizeof(mp_block_q8_0) == 34, "Q8_0 block is 34 bytes");
_Static_assert(sizeof(mp_block_q4_K) == 144, "Q4_K block is 144 bytes");
_Static_assert(sizeof(mp_block_q6_K) == 210, "Q6_K block is 210 bytes");
_Static_assert(sizeof(mp_block_q8_K) == 292, "Q8_K block is 292 bytes");

static const type_fact *fact(int type)
{
    for (size_t i = 0; i < sizeof type_facts / sizeof type_facts[0]; i++)
        if (type_facts[i].type == type)
            return &type_facts[i];
    return NULL;
}

int mp_type_supported(int type)
{
    const type_fact *f = fact(type);
    return f && f->weight;
}

int64_t mp_type_block_elems(int type)
{
    const type_fact *f = fact(type);
    return f ? f->block_elems : 0;
}

size_t mp_type_block_bytes(int type)
{
    const type_fact *f = fact(type);
    return f ? f->block_bytes : 0;
}

const char *mp_type_name(int type)
{
    const type_fact *f = fact(type);
    return f ? f->name : NULL;
}

int mp_type_from_name(const char *name)
{
    for (size_t i = 0; i < sizeof type_facts / sizeof type_facts[0]; i++)
        if (!strcasecmp(type_facts[i].name, name))
            return type_facts[i].type;
    return -1;
}

size_t mp_type_row_bytes(int type, int64_t n)
{
    const type_fact *f = fact(type);
    if (!f || n < 0 || n % f->block_elems != 0)
        return 0;
    uint64_t blocks = (uint64_t)(n / f->block_elems);
    if (blocks > SIZE_MAX / f->block_bytes)
        return 0;
    return (size_t)blocks * f->block_bytes;
}
