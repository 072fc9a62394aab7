/* base/numparse.h — strict parsing of numeric command-line values, shared by every command.
 * A value is accepted only if the whole string is one decimal number in range: no leading blank,
 * no '+', no trailing characters, no overflow. */
#ifndef MP_BASE_NUMPARSE_H
#define MP_BASE_NUMPARSE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

bool mp_parse_i64(const char *s, int64_t lo, int64_t hi, int64_t *out);
bool mp_parse_u64(const char *s, uint64_t *out); /* also rejects '-' */

/* The same, saying what they take in expect (cap bytes: "an integer 1..1024", "a number 0..1",
 * "an unsigned 64-bit integer") for the caller's "expected ..." when they return false. */
bool mp_parse_i64_said(const char *s, int64_t lo, int64_t hi, int64_t *out, char *expect, size_t cap);
bool mp_parse_u64_said(const char *s, uint64_t *out, char *expect, size_t cap);
/* A finite decimal number lo..hi. */
bool mp_parse_f64_said(const char *s, double lo, double hi, double *out, char *expect, size_t cap);

#endif
