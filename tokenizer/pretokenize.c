/* tokenizer/pretokenize.c — the pre-tokenizer regexes, compiled with PCRE2 (UTF + UCP, JIT when
 * the library has it).
 *
 * The patterns are the published pre-tokenization rules of the two vocabulary families:
 *  - "gpt-2": English contractions, optional space + letters, optional space + digits, optional
 *    space + other symbols, whitespace not followed by a non-space, remaining whitespace;
 *  - "qwen2": case-insensitive contractions, one optional non-letter/non-digit (not a newline)
 *    before letters, single digits, symbols with trailing newlines, newline runs with leading
 *    whitespace, then the same whitespace rules;
 *  - "gpt-4o": OpenAI's o200k_base (GPT-4o and gpt-oss; llama.cpp's GPT4O pre type): words cut at
 *    case changes (upper/title-case letters then lower-case ones, or an upper-case run alone;
 *    modifier and other letters and combining marks count as either case), each with one optional
 *    non-letter/non-digit (not a newline) in front and a case-insensitive contraction behind, digits
 *    in runs of at most three, symbols with trailing newlines or slashes, then the qwen2 whitespace
 *    rules.
 * Invariant: the pieces handed to the callback tile the input exactly.
 */
#include "tokenizer/pretokenize.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <stdlib.h>
#include <string.h>

typedef struct pretok_def {
    const char *name;
    const char *pattern;
} pretok_def;

static const pretok_def k_defs[] = {
    {"gpt-2", "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+"},
    /* OLMoE's vocabulary (GPT-NeoX lineage) pre-tokenizes with the GPT-2 rules. */
    {"olmo", "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+"},
    {"qwen2", "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}"
              "| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"},
    {"gpt-4o", "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]+"
               "(?i:'s|'t|'re|'ve|'m|'ll|'d)?"
               "|[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]+[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]*"
               "(?i:'s|'t|'re|'ve|'m|'ll|'d)?"
               "|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"},
};

struct mp_pretok {
    const char *name; /* points into k_defs */
    pcre2_code *code;
};

const char *mp_pretok_names(void) { return "gpt-2, olmo, qwen2, gpt-4o"; }

mp_status mp_pretok_new(const char *pre, mp_pretok **out, mp_error *err)
{
    *out = NULL;
    const pretok_def *def = NULL;
    for (size_t i = 0; i < sizeof k_defs / sizeof k_defs[0]; i++)
        if (pre && strcmp(pre, k_defs[i].name) == 0)
            def = &k_defs[i];
    if (!def)
        return mp_fail(err, MP_ERR_UNSUPPORTED,
                       "tokenizer pre-tokenizer '%s': unsupported, expected one of: %s",
                       pre ? pre : "(null)", mp_pretok_names());
    int ecode;
    PCRE2_SIZE eoff;
    pcre2_code *code = pcre2_compile((PCRE2_SPTR)def->pattern, PCRE2_ZERO_TERMINATED,
                                     PCRE2_UTF | PCRE2_UCP, &ecode, &eoff, NULL);
    if (!code) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(ecode, msg, sizeof msg);
        return mp_fail(err, MP_ERR_INTERNAL, "pre-tokenizer '%s': regex offset %zu: %s", pre,
                       (size_t)eoff, (const char *)msg);
    }
    /* JIT is an optimisation only: without it (or where the library lacks it) the interpreter
     * gives the same matches. */
    (void)pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);
    mp_pretok *p = calloc(1, sizeof *p);
    if (!p) {
        pcre2_code_free(code);
        return mp_fail(err, MP_ERR_NOMEM, "pre-tokenizer '%s': out of memory", pre);
    }
    p->name = def->name;
    p->code = code;
    *out = p;
    return MP_OK;
}

void mp_pretok_free(mp_pretok *p)
{
    if (!p)
        return;
    pcre2_code_free(p->code);
    free(p);
}

const char *mp_pretok_name(const mp_pretok *p) { return p->name; }

mp_status mp_pretok_split(const mp_pretok *p, const char *text, size_t len, mp_pretok_fn fn,
                          void *ctx, mp_error *err)
{
    if (len == 0)
        return MP_OK;
    pcre2_match_data *md = pcre2_match_data_create_from_pattern(p->code, NULL);
    if (!md)
        return mp_fail(err, MP_ERR_NOMEM, "pre-tokenizer '%s': out of memory", p->name);
    mp_status st = MP_OK;
    size_t pos = 0; /* everything before pos has been handed out */
    while (pos < len) {
        int rc = pcre2_match(p->code, (PCRE2_SPTR)text, len, pos, PCRE2_NO_UTF_CHECK, md, NULL);
        if (rc == PCRE2_ERROR_NOMATCH) {
            st = fn(text + pos, len - pos, ctx, err); /* trailing gap */
            break;
        }
        if (rc < 0) {
            PCRE2_UCHAR msg[256];
            pcre2_get_error_message(rc, msg, sizeof msg);
            st = mp_fail(err, MP_ERR_LIMIT, "pre-tokenizer '%s': text offset %zu: regex: %s",
                         p->name, pos, (const char *)msg);
            break;
        }
        PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
        size_t start = ov[0], end = ov[1];
        if (start > pos && (st = fn(text + pos, start - pos, ctx, err)) != MP_OK)
            break;
        if (end == start) {
            /* An empty match cannot come from the supported patterns; should one appear, emit the
             * next character as its own piece so that the loop always advances. */
            size_t next = start + 1;
            while (next < len && ((unsigned char)text[next] & 0xC0) == 0x80)
                next++;
            if ((st = fn(text + start, next - start, ctx, err)) != MP_OK)
                break;
            pos = next;
            continue;
        }
        if ((st = fn(text + start, end - start, ctx, err)) != MP_OK)
            break;
        pos = end;
    }
    pcre2_match_data_free(md);
    return st;
}
