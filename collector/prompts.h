/* collector/prompts.h — prompt files for `moeplan collect`.
 *
 * Accepted forms (docs/trace-format.md, "Prompt files"):
 *  - a JSON array whose elements are strings or objects;
 *  - JSON Lines: one string or object per non-blank line (a one-record file is valid).
 * An object is {"prompt": "...", "id": "..." or integer, "max_tokens": integer >= 1}; only
 * "prompt" is required and no other key is allowed (a misspelt key is an error, not ignored).
 * Every prompt is non-empty; ids are unique. Errors name the file, the line (JSON Lines) or
 * line:column (array) or the element index, and what was expected.
 */
#ifndef MP_COLLECTOR_PROMPTS_H
#define MP_COLLECTOR_PROMPTS_H

#include <stddef.h>
#include <stdint.h>

#include "base/error.h"

typedef struct mp_prompt {
    char *text;          /* non-empty, NUL-terminated */
    char *id;            /* the file's id as text, or "<index>" when none was given */
    int64_t max_tokens;  /* -1: the command's default */
} mp_prompt;

typedef struct mp_prompt_set {
    mp_prompt *items;    /* (n) in file order */
    int64_t n;
} mp_prompt_set;

#define MP_PROMPTS_MAX_FILE_BYTES ((size_t)256 << 20)

mp_status mp_prompts_load(const char *path, mp_prompt_set *out, mp_error *err);
/* Parse a buffer (name is used in messages). */
mp_status mp_prompts_parse(const char *name, const char *data, size_t n, mp_prompt_set *out,
                           mp_error *err);
void mp_prompts_free(mp_prompt_set *s);

#endif
