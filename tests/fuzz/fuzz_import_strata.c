/* tests/fuzz/fuzz_import_strata.c — libFuzzer target: the strata importer's parser and record
 * validation (the first pass of moeplan import) on arbitrary bytes. It must return an error or
 * MP_OK, never crash, leak or read out of bounds. The first input byte, when present, also picks an
 * --experts limit (0: infer) so that the range checks are exercised. */
#include <stddef.h>
#include <stdint.h>

#include "collector/import.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    int64_t n_experts = size > 0 && (data[0] & 0x80) ? (data[0] & 0x7f) : 0;
    mp_error err;
    mp_import_check_buffer(MP_IMPORT_STRATA, "fuzz-input", (const char *)data, size, n_experts, &err);
    return 0;
}
