/* base/input_file.h — opening an input: every command reads its files through here.
 *
 * A FIFO, a device or a directory given where a file is expected is refused before anything
 * blocks on it: the open is O_NONBLOCK (an open of a FIFO with no writer would otherwise wait
 * forever), then fstat decides, then O_NONBLOCK is cleared for ordinary reads. A file larger than
 * the caller's cap is refused from fstat's size, before a byte is read, and a file that grows
 * past the cap while it is read is refused too. Every error is one line: "WHAT PATH: reason".
 */
#ifndef MP_BASE_INPUT_FILE_H
#define MP_BASE_INPUT_FILE_H

#include <stddef.h>
#include <stdint.h>
#include <sys/stat.h>

#include "base/error.h"

#define MP_INPUT_NO_CAP UINT64_MAX

/* Open path read-only (O_CLOEXEC). what names the kind of file in errors ("profile", "costs",
 * "prompts"; NULL: the path alone). On success *fd_out is open (the caller closes it) and
 * *st_out (may be NULL) holds its fstat. */
mp_status mp_input_open(const char *path, const char *what, uint64_t max_bytes, int *fd_out,
                        struct stat *st_out, mp_error *err);
/* The same checks for a reader that opens the path itself (SQLite); nothing stays open. */
mp_status mp_input_check(const char *path, const char *what, uint64_t max_bytes,
                         struct stat *st_out, mp_error *err);
/* The whole file in a malloc'd buffer with a NUL after its *size_out bytes. */
mp_status mp_input_read_all(const char *path, const char *what, uint64_t max_bytes,
                            char **data_out, size_t *size_out, mp_error *err);
/* Read exactly n bytes at offset (pread, EINTR retried); a short file is MP_ERR_FORMAT naming
 * the offset where it ends. */
mp_status mp_input_pread(int fd, const char *path, const char *what, void *buf, size_t n,
                         uint64_t offset, mp_error *err);
/* "a FIFO", "a directory", ...: what a non-regular file is, for messages. */
const char *mp_file_kind(mode_t mode);

#endif
