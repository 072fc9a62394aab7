/* tokenizer/bytelevel.h — the byte-level alphabet of GPT-2-style BPE vocabularies, and UTF-8 checks.
 *
 * Byte-level BPE stores every token as a string over a 256-character alphabet: each byte value
 * maps to one Unicode code point (printable Latin-1 bytes to themselves, the others to U+0100 and
 * up, in byte order), so that any byte sequence has a printable, whitespace-free spelling. The
 * mapping is a bijection between the 256 bytes and 256 code points below U+0144.
 */
#ifndef MP_TOKENIZER_BYTELEVEL_H
#define MP_TOKENIZER_BYTELEVEL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Code point that spells byte b (always < 0x144). */
uint32_t mp_bytelevel_cp(uint8_t b);
/* Byte spelled by code point cp, or -1 when cp is not in the byte-level alphabet. */
int mp_bytelevel_byte(uint32_t cp);
/* Write the byte-level spelling of len bytes to out (UTF-8, at most 2 bytes per input byte: out
 * must hold 2 * len bytes). Returns the number of bytes written (no NUL). */
size_t mp_bytelevel_encode(const uint8_t *in, size_t len, char *out);

/* Offset of the first byte that does not start a valid UTF-8 sequence (overlong forms, surrogates
 * and code points above U+10FFFF are invalid), or len when all of s is valid. */
size_t mp_utf8_invalid_at(const uint8_t *s, size_t len);
/* Decode the code point at s[0..len) of VALID UTF-8; *n gets its byte length (1..4). */
uint32_t mp_utf8_next(const uint8_t *s, size_t len, size_t *n);

#endif
