/* base/numparse.h — strict parsing of numeric command-line values, shared by every command.
 * A value is accepted only if the whole string is one decimal number in range: no leading blank,
 * no '+', no trailing characters, no overflow. */
#ifndef MP_BASE_NUMPARSE_H
#define MP_BASE_NUMPARSE_H

#include <stdbool.h>
#include <stdint.h>

bool mp_parse_i64(const char *s, int64_t lo, int64_t hi, int64_t *out);
bool mp_parse_u64(const char *s, uint64_t *out); /* also rejects '-' */

#endif
