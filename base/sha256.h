/* base/sha256.h — SHA-256 of model files, traces, profiles and prompt tokens, through OpenSSL's
 * libcrypto (EVP; SHA extensions where the CPU has them: a 20 GB model hashes in seconds, not
 * minutes). Streaming: init, update any number of times, final. */
#ifndef MP_COLLECTOR_SHA256_H
#define MP_COLLECTOR_SHA256_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/error.h"
#include "base/progress.h"

typedef struct mp_sha256 {
    void *ctx;   /* EVP_MD_CTX; NULL after a failure (out of memory) or after final */
    bool failed; /* a step failed: final reports it */
} mp_sha256;

void mp_sha256_init(mp_sha256 *s);
void mp_sha256_update(mp_sha256 *s, const void *data, size_t n);
/* The digest, and the context released; false when a step failed (libcrypto out of memory): the
 * digest is then not valid. */
bool mp_sha256_final(mp_sha256 *s, uint8_t digest[32]);
/* digest as 64 lowercase hex digits + NUL */
void mp_sha256_hex(const uint8_t digest[32], char hex[65]);
/* The hex digest of a whole file, opened as an input (base/input_file.h: a FIFO or directory
 * is refused); what names it in errors ("model", "trace"); *size_bytes (may be NULL) gets the
 * bytes hashed. */
mp_status mp_sha256_file(const char *path, const char *what, char hex[65], uint64_t *size_bytes,
                         mp_error *err);
/* The same, counting the bytes hashed into progress (base/progress.h; NULL: none), whose
 * total becomes the file's size: a model of tens of GB read from disk takes minutes. */
mp_status mp_sha256_file_progress(const char *path, const char *what, char hex[65],
                                  uint64_t *size_bytes, mp_progress *progress, mp_error *err);

#endif
