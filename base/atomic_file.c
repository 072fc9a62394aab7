/* base/atomic_file.c — see atomic_file.h.
 *
 * Invariants: between open and commit/abort, o->tmp names a file this process created with
 * O_EXCL (never a file someone else owns); after commit or abort every field is released and
 * o->tmp is gone (renamed or unlinked). */
#include "base/atomic_file.h"

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "base/fault.h"
#include "base/input_file.h"

/* The directory part of path (".") and its last component, in caller buffers. */
static void split_path(const char *path, char *dir, size_t dir_cap, char *base, size_t base_cap)
{
    char a[4096], b[4096];
    snprintf(a, sizeof a, "%s", path);
    snprintf(b, sizeof b, "%s", path);
    snprintf(dir, dir_cap, "%s", dirname(a));
    snprintf(base, base_cap, "%s", basename(b));
}

mp_status mp_output_check_space(const char *path, const char *what, uint64_t bytes, mp_error *err)
{
    char dir[4096], base[4096];
    split_path(path, dir, sizeof dir, base, sizeof base);
    struct statvfs fs;
    if (statvfs(dir, &fs) != 0)
        return MP_OK;
    const uint64_t avail = (uint64_t)fs.f_bavail * fs.f_frsize;
    if (avail >= bytes)
        return MP_OK;
    return mp_fail(err, MP_ERR_IO, "%s %s: needs %llu bytes (%.3g GB), the file system of %s has %llu free (%.3g GB): "
                   "free space there or write elsewhere", what, path, (unsigned long long)bytes, (double)bytes / 1e9,
                   dir, (unsigned long long)avail, (double)avail / 1e9);
}

bool mp_same_file(const char *a, const char *b)
{
    if (!a || !b)
        return false;
    struct stat sa, sb;
    const bool ea = stat(a, &sa) == 0, eb = stat(b, &sb) == 0;
    if (ea && eb)
        return sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
    if (ea || eb)
        return false;
    char da[4096], na[4096], db[4096], nb[4096];
    split_path(a, da, sizeof da, na, sizeof na);
    split_path(b, db, sizeof db, nb, sizeof nb);
    if (strcmp(na, nb) || stat(da, &sa) != 0 || stat(db, &sb) != 0)
        return false;
    return sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
}

mp_status mp_output_check(const char *path, const char *what, bool force,
                          const mp_file_ref *others, int n_others, mp_error *err)
{
    if (!path || !*path)
        return mp_fail(err, MP_ERR_ARG, "%s: empty path, expected a file name", what);
    for (int i = 0; i < n_others; i++)
        if (others[i].path && mp_same_file(path, others[i].path))
            return mp_fail(err, MP_ERR_ARG, "%s %s: the same file as %s %s, expected an output "
                           "that replaces no input and no other output", what, path,
                           others[i].role, others[i].path);
    struct stat sb;
    if (stat(path, &sb) == 0) {
        if (!S_ISREG(sb.st_mode))
            return mp_fail(err, MP_ERR_IO, "%s %s: exists and is %s, expected a regular file or "
                           "a new name", what, path, mp_file_kind(sb.st_mode));
        if (!force)
            return mp_fail(err, MP_ERR_IO, "%s %s: file exists (use --force to replace it)",
                           what, path);
    } else if (errno != ENOENT) {
        return mp_fail(err, MP_ERR_IO, "%s %s: %s", what, path, strerror(errno));
    }
    char dir[4096], base[4096];
    split_path(path, dir, sizeof dir, base, sizeof base);
    if (stat(dir, &sb) != 0)
        return mp_fail(err, MP_ERR_IO, "%s %s: directory %s: %s", what, path, dir,
                       strerror(errno));
    if (!S_ISDIR(sb.st_mode))
        return mp_fail(err, MP_ERR_IO, "%s %s: %s is %s, expected a directory", what, path, dir,
                       mp_file_kind(sb.st_mode));
    if (access(dir, W_OK | X_OK) != 0)
        return mp_fail(err, MP_ERR_IO, "%s %s: directory %s is not writable: %s", what, path,
                       dir, strerror(errno));
    return MP_OK;
}

static void clear(mp_outfile *o)
{
    free(o->path);
    free(o->tmp);
    memset(o, 0, sizeof *o);
    o->fd = -1;
}

static const char *size_note(int e)
{
    return e == EFBIG ? " (the file-size limit, ulimit -f)" : "";
}

mp_status mp_outfile_open(mp_outfile *o, const char *path, const char *what, unsigned flags,
                          mp_error *err)
{
    memset(o, 0, sizeof *o);
    o->fd = -1;
    o->what = what;
    o->flags = flags;
    const size_t cap = strlen(path) + 48;
    o->path = strdup(path);
    o->tmp = malloc(cap);
    if (!o->path || !o->tmp) {
        clear(o);
        return mp_fail(err, MP_ERR_NOMEM, "%s %s: out of memory", what, path);
    }
    int fd = -1, e = 0;
    for (int attempt = 0; attempt < 100 && fd < 0; attempt++) {
        if (flags & MP_OUT_DIRECT)
            snprintf(o->tmp, cap, "%s", path);
        else if (attempt == 0)
            snprintf(o->tmp, cap, "%s.tmp.%ld", path, (long)getpid());
        else /* a stale temporary of a killed process that had our pid */
            snprintf(o->tmp, cap, "%s.tmp.%ld.%d", path, (long)getpid(), attempt);
        if (mp_fault_point()) {
            e = EIO;
            break;
        }
        fd = open(o->tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
        e = errno;
        if (fd < 0 && (e != EEXIST || (flags & MP_OUT_DIRECT)))
            break;
    }
    if (fd < 0) {
        mp_fail(err, MP_ERR_IO, "%s %s: cannot create %s: %s", what, path, o->tmp, strerror(e));
        clear(o);
        return MP_ERR_IO;
    }
    if (flags & MP_OUT_NO_FD)
        close(fd);
    else
        o->fd = fd;
    return MP_OK;
}

/* write(2) until done; returns 0 or the errno of the failure. */
static int write_all(mp_outfile *o, const void *data, size_t n)
{
    const char *p = data;
    while (n > 0) {
        if (mp_fault_point())
            return EIO;
        const ssize_t w = write(o->fd, p, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return w < 0 ? errno : EIO;
        p += w;
        n -= (size_t)w;
        o->offset += (uint64_t)w;
    }
    return 0;
}

mp_status mp_outfile_write(mp_outfile *o, const void *data, size_t n, mp_error *err)
{
    const int e = write_all(o, data, n);
    if (!e)
        return MP_OK;
    mp_fail(err, MP_ERR_IO, "%s %s: offset %llu: write failed: %s%s", o->what, o->path,
            (unsigned long long)o->offset, strerror(e), size_note(e));
    mp_outfile_abort(o);
    return MP_ERR_IO;
}

static ssize_t stream_write(void *cookie, const char *buf, size_t n)
{
    mp_outfile *o = cookie;
    if (o->write_errno)
        return 0;
    const int e = write_all(o, buf, n);
    if (e) {
        o->write_errno = e;
        return 0; /* fopencookie: 0 is an error */
    }
    return (ssize_t)n;
}

FILE *mp_outfile_stream(mp_outfile *o, mp_error *err)
{
    if (o->stream)
        return o->stream;
    cookie_io_functions_t io = {.write = stream_write};
    o->stream = mp_fault_point() ? NULL : fopencookie(o, "w", io);
    if (!o->stream) {
        mp_fail(err, MP_ERR_NOMEM, "%s %s: out of memory for a stream", o->what, o->path);
        mp_outfile_abort(o);
        return NULL;
    }
    return o->stream;
}

static void sync_dir(const char *path)
{
    char dir[4096], base[4096];
    split_path(path, dir, sizeof dir, base, sizeof base);
    const int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd >= 0) {
        fsync(fd); /* best effort: the rename is done; some file systems refuse a directory fsync */
        close(fd);
    }
}

mp_status mp_outfile_commit(mp_outfile *o, mp_error *err)
{
    int e = 0;
    const char *step = "write failed";
    if (o->stream) {
        const int rc = fclose(o->stream);
        o->stream = NULL;
        e = o->write_errno ? o->write_errno : rc != 0 ? (errno ? errno : EIO) : 0;
    }
    if (!e && (o->flags & MP_OUT_NO_FD))
        o->fd = open(o->tmp, O_RDONLY | O_CLOEXEC);
    if (!e && o->fd < 0)
        e = errno ? errno : EIO, step = "cannot reopen to sync";
    if (!e && (mp_fault_point() ? (errno = EIO, 1) : fsync(o->fd) != 0))
        e = errno, step = "fsync failed";
    if (o->fd >= 0) {
        if (close(o->fd) != 0 && !e)
            e = errno, step = "close failed";
        o->fd = -1;
    }
    if (!e && !(o->flags & MP_OUT_DIRECT) &&
        (mp_fault_point() ? (errno = EIO, 1) : rename(o->tmp, o->path) != 0))
        e = errno, step = "cannot rename the temporary into place";
    if (e) {
        mp_fail(err, MP_ERR_IO, "%s %s: offset %llu: %s: %s%s", o->what, o->path,
                (unsigned long long)o->offset, step, strerror(e), size_note(e));
        mp_outfile_abort(o);
        return MP_ERR_IO;
    }
    sync_dir(o->path);
    clear(o);
    return MP_OK;
}

void mp_outfile_abort(mp_outfile *o)
{
    if (!o->tmp) {
        clear(o);
        return;
    }
    if (o->stream) {
        o->write_errno = o->write_errno ? o->write_errno : ECANCELED; /* nothing more is written */
        fclose(o->stream);
    }
    if (o->fd >= 0)
        close(o->fd);
    unlink(o->tmp);
    if (o->flags & MP_OUT_NO_FD) {
        static const char *const sidecar[] = {"-wal", "-shm", "-journal"};
        char p[4200];
        for (int i = 0; i < 3; i++) {
            snprintf(p, sizeof p, "%s%s", o->tmp, sidecar[i]);
            unlink(p);
        }
    }
    clear(o);
}

mp_status mp_write_file_atomic(const char *path, const void *data, size_t size, const char *what,
                               mp_error *err)
{
    mp_outfile o;
    mp_status st = mp_outfile_open(&o, path, what, 0, err);
    if (!st)
        st = mp_outfile_write(&o, data, size, err);
    if (!st)
        st = mp_outfile_commit(&o, err);
    return st;
}
