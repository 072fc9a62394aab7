/* base/sha256.c — SHA-256 through libcrypto's EVP interface (see sha256.h). */
#include "base/sha256.h"

#include <errno.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/input_file.h"

void mp_sha256_init(mp_sha256 *s)
{
    s->ctx = EVP_MD_CTX_new();
    s->failed = !s->ctx || EVP_DigestInit_ex(s->ctx, EVP_sha256(), NULL) != 1;
}

void mp_sha256_update(mp_sha256 *s, const void *data, size_t n)
{
    if (!s->failed && n && EVP_DigestUpdate(s->ctx, data, n) != 1)
        s->failed = true;
}

bool mp_sha256_final(mp_sha256 *s, uint8_t digest[32])
{
    unsigned len = 0;
    const bool ok = !s->failed && EVP_DigestFinal_ex(s->ctx, digest, &len) == 1 && len == 32;
    EVP_MD_CTX_free(s->ctx);
    s->ctx = NULL;
    s->failed = true; /* a second final has nothing to finish */
    return ok;
}

void mp_sha256_hex(const uint8_t digest[32], char hex[65])
{
    for (int i = 0; i < 32; i++)
        snprintf(hex + 2 * i, 3, "%02x", digest[i]);
}

mp_status mp_sha256_file(const char *path, const char *what, char hex[65], uint64_t *size_bytes,
                         mp_error *err)
{
    return mp_sha256_file_progress(path, what, hex, size_bytes, NULL, err);
}

mp_status mp_sha256_file_progress(const char *path, const char *what, char hex[65],
                                  uint64_t *size_bytes, mp_progress *progress, mp_error *err)
{
    int fd;
    struct stat sb;
    mp_status st = mp_input_open(path, what, MP_INPUT_NO_CAP, &fd, &sb, err);
    if (st)
        return st;
    mp_progress_set_total(progress, (int64_t)sb.st_size);
    enum { CHUNK = 1 << 20 };
    uint8_t *buf = malloc(CHUNK);
    if (!buf) {
        close(fd);
        return mp_fail(err, MP_ERR_NOMEM, "%s %s: out of memory", what, path);
    }
    mp_sha256 s;
    mp_sha256_init(&s);
    uint64_t total = 0;
    for (;;) {
        const ssize_t n = read(fd, buf, CHUNK);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            st = mp_fail(err, MP_ERR_IO, "%s %s: offset %llu: read error while hashing: %s", what, path,
                         (unsigned long long)total, strerror(errno));
            break;
        }
        if (n == 0)
            break;
        mp_sha256_update(&s, buf, (size_t)n);
        total += (uint64_t)n;
        mp_progress_set(progress, (int64_t)total);
    }
    close(fd);
    free(buf);
    uint8_t d[32];
    const bool ok = mp_sha256_final(&s, d); /* releases the context on every path */
    if (st)
        return st;
    if (!ok)
        return mp_fail(err, MP_ERR_NOMEM, "%s %s: out of memory for the hash", what, path);
    mp_sha256_hex(d, hex);
    if (size_bytes)
        *size_bytes = total;
    return MP_OK;
}
