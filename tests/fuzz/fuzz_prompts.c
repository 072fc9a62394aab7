/* tests/fuzz/fuzz_prompts.c — libFuzzer target: prompt file parsing (JSON array / JSON Lines) on
 * arbitrary bytes: an error or a prompt set, never a crash or a leak. */
#include <stddef.h>
#include <stdint.h>

#include "collector/prompts.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    mp_prompt_set s;
    mp_error err;
    if (mp_prompts_parse("fuzz-input", (const char *)data, size, &s, &err) == MP_OK)
        mp_prompts_free(&s);
    return 0;
}
