/* tokenizer/bytelevel.c — byte <-> code point alphabet of byte-level BPE; strict UTF-8 checks.
 *
 * The alphabet (a public property of GPT-2-style vocabularies): bytes 0x21..0x7E, 0xA1..0xAC and
 * 0xAE..0xFF spell themselves; the remaining 68 bytes, in increasing order, spell U+0100, U+0101,
 * ... so that no token contains a control character or a space.
 */
#include "tokenizer/bytelevel.h"

static bool spells_itself(unsigned b)
{
    return (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
}

uint32_t mp_bytelevel_cp(uint8_t b)
{
    if (spells_itself(b))
        return b;
    /* Rank of b among the bytes that do not spell themselves: 0x00..0x20 (33 of them), 0x7F..0xA0
     * (34), 0xAD (1). */
    if (b <= 0x20)
        return 0x100u + b;
    if (b <= 0xA0)
        return 0x100u + 33u + (b - 0x7Fu);
    return 0x100u + 67u; /* 0xAD */
}

int mp_bytelevel_byte(uint32_t cp)
{
    if (cp < 0x100)
        return spells_itself(cp) ? (int)cp : -1;
    if (cp < 0x100 + 33)
        return (int)(cp - 0x100);
    if (cp < 0x100 + 67)
        return (int)(cp - 0x100 - 33 + 0x7F);
    if (cp == 0x100 + 67)
        return 0xAD;
    return -1;
}

size_t mp_bytelevel_encode(const uint8_t *in, size_t len, char *out)
{
    size_t o = 0;
    for (size_t i = 0; i < len; i++) {
        uint32_t cp = mp_bytelevel_cp(in[i]);
        if (cp < 0x80) {
            out[o++] = (char)cp;
        } else { /* every code point of the alphabet is below U+0800: two bytes */
            out[o++] = (char)(0xC0 | (cp >> 6));
            out[o++] = (char)(0x80 | (cp & 0x3F));
        }
    }
    return o;
}

static bool is_cont(uint8_t c) { return (c & 0xC0) == 0x80; }

size_t mp_utf8_invalid_at(const uint8_t *s, size_t len)
{
    size_t i = 0;
    while (i < len) {
        uint8_t c = s[i];
        size_t need;
        uint8_t lo = 0x80, hi = 0xBF; /* allowed range of the second byte */
        if (c < 0x80) {
            i++;
            continue;
        } else if (c >= 0xC2 && c <= 0xDF) {
            need = 1;
        } else if (c >= 0xE0 && c <= 0xEF) {
            need = 2;
            if (c == 0xE0)
                lo = 0xA0; /* overlong */
            if (c == 0xED)
                hi = 0x9F; /* surrogates */
        } else if (c >= 0xF0 && c <= 0xF4) {
            need = 3;
            if (c == 0xF0)
                lo = 0x90; /* overlong */
            if (c == 0xF4)
                hi = 0x8F; /* above U+10FFFF */
        } else {
            return i;
        }
        if (len - i <= need) /* truncated sequence */
            return i;
        if (s[i + 1] < lo || s[i + 1] > hi)
            return i;
        for (size_t k = 2; k <= need; k++)
            if (!is_cont(s[i + k]))
                return i;
        i += need + 1;
    }
    return len;
}

uint32_t mp_utf8_next(const uint8_t *s, size_t len, size_t *n)
{
    uint8_t c = s[0];
    if (c < 0x80 || len < 2) {
        *n = 1;
        return c;
    }
    if (c < 0xE0 || len < 3) {
        *n = 2;
        return ((uint32_t)(c & 0x1F) << 6) | (s[1] & 0x3F);
    }
    if (c < 0xF0 || len < 4) { /* len checks only keep a misuse on invalid input in bounds */
        *n = 3;
        return ((uint32_t)(c & 0x0F) << 12) | ((uint32_t)(s[1] & 0x3F) << 6) | (s[2] & 0x3F);
    }
    *n = 4;
    return ((uint32_t)(c & 0x07) << 18) | ((uint32_t)(s[1] & 0x3F) << 12) |
           ((uint32_t)(s[2] & 0x3F) << 6) | (s[3] & 0x3F);
}
