/* base/input_file.c — see input_file.h. */
#include "base/input_file.h"

#include <errno.h>
#include <stdbool.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define WHAT_FMT "%s%s%s"
#define WHAT_ARGS(what, path) (what) ? (what) : "", (what) ? " " : "", (path)

const char *mp_file_kind(mode_t mode)
{
    if (S_ISDIR(mode))
        return "a directory";
    if (S_ISFIFO(mode))
        return "a FIFO";
    if (S_ISCHR(mode))
        return "a character device";
    if (S_ISBLK(mode))
        return "a block device";
    if (S_ISSOCK(mode))
        return "a socket";
    if (S_ISLNK(mode))
        return "a symbolic link";
    return "not a regular file";
}

mp_status mp_input_open(const char *path, const char *what, uint64_t max_bytes, int *fd_out,
                        struct stat *st_out, mp_error *err)
{
    *fd_out = -1;
    if (!path || !*path)
        return mp_fail(err, MP_ERR_ARG, "%s: empty path, expected a file name",
                       what ? what : "input");
    int fd;
    do
        fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
    while (fd < 0 && errno == EINTR);
    if (fd < 0)
        return mp_fail(err, MP_ERR_IO, WHAT_FMT ": cannot open: %s", WHAT_ARGS(what, path),
                       strerror(errno));
    struct stat sb;
    if (fstat(fd, &sb) != 0) {
        const int e = errno;
        close(fd);
        return mp_fail(err, MP_ERR_IO, WHAT_FMT ": cannot stat: %s", WHAT_ARGS(what, path),
                       strerror(e));
    }
    if (!S_ISREG(sb.st_mode)) {
        close(fd);
        return mp_fail(err, MP_ERR_IO, WHAT_FMT ": %s, expected a regular file",
                       WHAT_ARGS(what, path), mp_file_kind(sb.st_mode));
    }
    if (max_bytes != MP_INPUT_NO_CAP && (uint64_t)sb.st_size > max_bytes) {
        close(fd);
        return mp_fail(err, MP_ERR_LIMIT, WHAT_FMT ": %llu bytes, more than the %llu accepted",
                       WHAT_ARGS(what, path), (unsigned long long)sb.st_size,
                       (unsigned long long)max_bytes);
    }
    const int fl = fcntl(fd, F_GETFL);
    if (fl < 0 || fcntl(fd, F_SETFL, fl & ~O_NONBLOCK) != 0) {
        const int e = errno;
        close(fd);
        return mp_fail(err, MP_ERR_IO, WHAT_FMT ": cannot clear O_NONBLOCK: %s",
                       WHAT_ARGS(what, path), strerror(e));
    }
    if (st_out)
        *st_out = sb;
    *fd_out = fd;
    return MP_OK;
}

mp_status mp_input_check(const char *path, const char *what, uint64_t max_bytes,
                         struct stat *st_out, mp_error *err)
{
    int fd;
    mp_status st = mp_input_open(path, what, max_bytes, &fd, st_out, err);
    if (st == MP_OK)
        close(fd);
    return st;
}

mp_status mp_input_pread(int fd, const char *path, const char *what, void *buf, size_t n,
                         uint64_t offset, mp_error *err)
{
    size_t done = 0;
    while (done < n) {
        const ssize_t r = pread(fd, (char *)buf + done, n - done, (off_t)(offset + done));
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0)
            return mp_fail(err, MP_ERR_IO, WHAT_FMT ": offset %llu: read error: %s",
                           WHAT_ARGS(what, path), (unsigned long long)(offset + done),
                           strerror(errno));
        if (r == 0)
            return mp_fail(err, MP_ERR_FORMAT, WHAT_FMT ": offset %llu: the file ends, expected "
                           "%zu more bytes", WHAT_ARGS(what, path),
                           (unsigned long long)(offset + done), n - done);
        done += (size_t)r;
    }
    return MP_OK;
}

mp_status mp_input_read_all(const char *path, const char *what, uint64_t max_bytes,
                            char **data_out, size_t *size_out, mp_error *err)
{
    *data_out = NULL;
    *size_out = 0;
    int fd;
    struct stat sb;
    mp_status st = mp_input_open(path, what, max_bytes, &fd, &sb, err);
    if (st)
        return st;
    /* fstat's size is a hint: the file may change while it is read, and the cap holds anyway */
    size_t cap = (size_t)sb.st_size + 1, n = 0;
    if (cap < 4096)
        cap = 4096;
    char *buf = malloc(cap);
    for (;;) {
        if (!buf) {
            st = mp_fail(err, MP_ERR_NOMEM, WHAT_FMT ": out of memory for %zu bytes",
                         WHAT_ARGS(what, path), cap);
            break;
        }
        char probe;
        const bool full = n + 1 == cap; /* then one byte probes for the end before growing */
        const ssize_t r = full ? read(fd, &probe, 1) : read(fd, buf + n, cap - 1 - n);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0) {
            st = mp_fail(err, MP_ERR_IO, WHAT_FMT ": offset %zu: read error: %s",
                         WHAT_ARGS(what, path), n, strerror(errno));
            break;
        }
        if (r == 0)
            break;
        if (full) {
            if (max_bytes != MP_INPUT_NO_CAP && n + 1 > max_bytes) {
                n++;
                break;
            }
            char *nb = cap > SIZE_MAX / 2 ? NULL : realloc(buf, cap * 2);
            if (!nb)
                free(buf);
            buf = nb;
            cap *= 2;
            if (buf)
                buf[n] = probe;
        }
        n += (size_t)r;
    }
    close(fd);
    if (!st && max_bytes != MP_INPUT_NO_CAP && n > max_bytes)
        st = mp_fail(err, MP_ERR_LIMIT, WHAT_FMT ": grew past the %llu bytes accepted while it "
                     "was read", WHAT_ARGS(what, path), (unsigned long long)max_bytes);
    if (st) {
        free(buf);
        return st;
    }
    buf[n] = '\0';
    *data_out = buf;
    *size_out = n;
    return MP_OK;
}
