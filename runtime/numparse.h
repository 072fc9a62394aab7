/* runtime/numparse.h — strict parsing of numeric command-line values, shared by every command.
 * A value is accepted only if the whole string is one decimal number in range: no leading blank,
 * no '+', no trailing characters, no overflow. */
#ifndef MP_RUNTIME_NUMPARSE_H
#define MP_RUNTIME_NUMPARSE_H

#include <stdbool.h>
#include <stdint.h>

bool mp_parse_i64(const char *s, int64_t lo, int64_t hi, int64_t *out);
bool mp_parse_u64(const char *s, uint64_t *out); /* also rejects '-' */

/* An environment switch that is on by default (A/B runs: MP_GPU_GRAPHS, MP_GPU_QKV_FORK,
 * MP_MOE_CPU_PIPELINE): true when `name` is "0"; unset, empty and "1" read as on; any other value
 * reads as on and is said on stderr in one line with what runs instead (`on_desc`), because a
 * typo must not pass for an A/B. */
bool mp_env_off(const char *name, const char *on_desc);
/* The same for a switch that is off by default (MP_POOL_PIN): true when `name` is "1". */
bool mp_env_on(const char *name, const char *off_desc);
/* A whole number from the environment (A/B knobs: MP_MOE_PIPE_UNITS): dflt when `name` is unset
 * or empty; a value that is not one number in [lo, hi] gives dflt and one line on stderr naming
 * the value, the range and dflt. */
int64_t mp_env_i64(const char *name, int64_t lo, int64_t hi, int64_t dflt);

#endif
