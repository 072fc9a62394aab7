/* runtime/atomic_file.c — see atomic_file.h. */
#include "runtime/atomic_file.h"

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

mp_status mp_write_file_atomic(const char *path, const void *data, size_t size, const char *what,
                              mp_error *err)
{
    char tmp[4096];
    int n = snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid());
    if (n < 0 || (size_t)n >= sizeof tmp)
        return mp_fail(err, MP_ERR_ARG, "%s %s: path too long", what, path);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0)
        return mp_fail(err, MP_ERR_IO, "%s %s: cannot create %s: %s", what, path, tmp, strerror(errno));
    const uint8_t *p = data;
    size_t done = 0;
    while (done < size) {
        ssize_t w = write(fd, p + done, size - done);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0) {
            int e = w < 0 ? errno : EIO;
            close(fd);
            unlink(tmp);
            return mp_fail(err, MP_ERR_IO, "%s %s: offset %zu: write failed: %s", what, tmp, done,
                           strerror(e));
        }
        done += (size_t)w;
    }
    if (fsync(fd) != 0 || close(fd) != 0) {
        int e = errno;
        unlink(tmp);
        return mp_fail(err, MP_ERR_IO, "%s %s: fsync/close failed: %s", what, tmp, strerror(e));
    }
    if (rename(tmp, path) != 0) {
        int e = errno;
        unlink(tmp);
        return mp_fail(err, MP_ERR_IO, "%s %s: rename from %s failed: %s", what, path, tmp, strerror(e));
    }
    return MP_OK;
}

