/* tests/unit/amx_emul.h — the AMX tile instructions for the TEST-ONLY emulated build of
 * kernels/cpu/quant_amx.c (compiled with -DMP_AMX_EMULATED by tests/meson.build).
 *
 * A scalar model of the eight tile registers (one set per thread) and of the instructions the
 * kernels use: ldtilecfg, tileloadd, tilestored, tilezero, tilerelease, tdpbssd and tdpbsud, as
 * Intel's reference describes them: C[m][n] += sum over k of A[m][4k + i] * B[k][4n + i] (i < 4),
 * A's bytes signed (both forms), B's signed (ssd) or unsigned (sud). Beyond computing, it stops
 * the test on what the hardware would refuse or silently get wrong: a palette other than 1, more
 * than 16 rows or 64 bytes a row, a product whose shapes do not match (C's rows = A's rows, C's
 * bytes a row = B's, A's bytes a row = 4 x B's rows), an instruction before ldtilecfg or after
 * tilerelease. Obviously right is what matters here, not speed. Never part of the production
 * library.
 */
#ifndef MP_TESTS_AMX_EMUL_H
#define MP_TESTS_AMX_EMUL_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct mp_emu_tiles {
    int configured;
    uint8_t rows[8];
    uint16_t colsb[8];
    uint8_t data[8][16][64];
} mp_emu_tiles;

static _Thread_local mp_emu_tiles mp_emu_t;

static inline void mp_emu_fail(const char *what)
{
    fprintf(stderr, "amx_emul: %s\n", what);
    abort();
}

static inline void mp_emu_tile_loadconfig(const void *config)
{
    const uint8_t *c = config;
    if (c[0] != 1)
        mp_emu_fail("ldtilecfg: palette is not 1");
    memset(&mp_emu_t, 0, sizeof mp_emu_t);
    for (int t = 0; t < 8; t++) {
        uint16_t colsb;
        memcpy(&colsb, c + 16 + 2 * t, 2);
        const uint8_t rows = c[48 + t];
        if (rows > 16 || colsb > 64)
            mp_emu_fail("ldtilecfg: a tile of more than 16 rows or 64 bytes a row");
        if ((rows == 0) != (colsb == 0))
            mp_emu_fail("ldtilecfg: a tile with rows but no bytes, or bytes but no rows");
        mp_emu_t.rows[t] = rows;
        mp_emu_t.colsb[t] = colsb;
    }
    mp_emu_t.configured = 1;
}

static inline void mp_emu_check(int t)
{
    if (!mp_emu_t.configured)
        mp_emu_fail("a tile instruction before ldtilecfg or after tilerelease");
    if (t < 0 || t > 7 || mp_emu_t.rows[t] == 0)
        mp_emu_fail("an unconfigured tile");
}

static inline void mp_emu_tile_loadd(int t, const void *base, long stride)
{
    mp_emu_check(t);
    memset(mp_emu_t.data[t], 0, sizeof mp_emu_t.data[t]);
    for (int r = 0; r < mp_emu_t.rows[t]; r++)
        memcpy(mp_emu_t.data[t][r], (const uint8_t *)base + r * stride, mp_emu_t.colsb[t]);
}

static inline void mp_emu_tile_stored(int t, void *base, long stride)
{
    mp_emu_check(t);
    for (int r = 0; r < mp_emu_t.rows[t]; r++)
        memcpy((uint8_t *)base + r * stride, mp_emu_t.data[t][r], mp_emu_t.colsb[t]);
}

static inline void mp_emu_tile_zero(int t)
{
    mp_emu_check(t);
    memset(mp_emu_t.data[t], 0, sizeof mp_emu_t.data[t]);
}

static inline void mp_emu_tile_dp(int c, int a, int b, int b_signed)
{
    mp_emu_check(c);
    mp_emu_check(a);
    mp_emu_check(b);
    if (mp_emu_t.rows[c] != mp_emu_t.rows[a] || mp_emu_t.colsb[c] != mp_emu_t.colsb[b] ||
        mp_emu_t.colsb[a] != 4 * mp_emu_t.rows[b] || mp_emu_t.colsb[c] % 4 || mp_emu_t.colsb[a] % 4)
        mp_emu_fail("tdp: the tiles' shapes do not make a product");
    for (int m = 0; m < mp_emu_t.rows[c]; m++)
        for (int n = 0; n < mp_emu_t.colsb[c] / 4; n++) {
            int32_t acc;
            memcpy(&acc, &mp_emu_t.data[c][m][4 * n], 4);
            for (int k = 0; k < mp_emu_t.rows[b]; k++)
                for (int i = 0; i < 4; i++) {
                    const int av = (int8_t)mp_emu_t.data[a][m][4 * k + i];
                    const uint8_t braw = mp_emu_t.data[b][k][4 * n + i];
                    const int bv = b_signed ? (int)(int8_t)braw : (int)braw;
                    acc += av * bv;
                }
            memcpy(&mp_emu_t.data[c][m][4 * n], &acc, 4);
        }
}

static inline void mp_emu_tile_release(void)
{
    memset(&mp_emu_t, 0, sizeof mp_emu_t);
}

#undef _tile_loadconfig
#undef _tile_loadd
#undef _tile_stored
#undef _tile_zero
#undef _tile_release
#undef _tile_dpbssd
#undef _tile_dpbsud
#define _tile_loadconfig(cfg) mp_emu_tile_loadconfig(cfg)
#define _tile_loadd(t, base, stride) mp_emu_tile_loadd((t), (base), (stride))
#define _tile_stored(t, base, stride) mp_emu_tile_stored((t), (base), (stride))
#define _tile_zero(t) mp_emu_tile_zero(t)
#define _tile_release() mp_emu_tile_release()
#define _tile_dpbssd(c, a, b) mp_emu_tile_dp((c), (a), (b), 1)
#define _tile_dpbsud(c, a, b) mp_emu_tile_dp((c), (a), (b), 0)

#endif
