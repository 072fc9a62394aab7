/* base/atomic_file.h — writing an output: every command writes its files through here.
 *
 * The rules, in one place:
 *  - before any work, mp_output_check refuses an output that is the same file as an input (by
 *    st_dev and st_ino, not by name) or as another output, one that exists without --force, one
 *    that exists and is not a regular file, and one whose directory is missing or not writable;
 *  - the bytes go to a temporary beside the output ("PATH.tmp.<pid>", created O_EXCL), are
 *    fsync'd, and only then renamed over PATH (and the directory fsync'd): a reader sees the old
 *    file or the new one, never a prefix, and the old file survives every failure;
 *  - on any failure the temporary is removed (with SQLite's -wal/-shm/-journal beside it);
 *  - a write that fails says where and why in one line; under a file-size limit that is EFBIG,
 *    which needs SIGXFSZ ignored (its default action kills the process without a word): the
 *    moeplan binary ignores it at start-up (cli/main.c), before any command runs.
 * Every write, sync, rename and creation passes a fault point (base/fault.h).
 */
#ifndef MP_BASE_ATOMIC_FILE_H
#define MP_BASE_ATOMIC_FILE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "base/error.h"

/* A file a command reads or writes, with the name it goes by in messages ("trace", "--json"). */
typedef struct mp_file_ref {
    const char *path; /* NULL entries are skipped */
    const char *role;
} mp_file_ref;

/* Refuse, in one line naming `what path`, an output that would replace one of others (inputs,
 * and the outputs checked before it), exists without force, exists as anything but a regular
 * file, or lies in a directory that is missing or not writable. Files that do not exist yet are
 * compared by their directory's identity and their name. */
mp_status mp_output_check(const char *path, const char *what, bool force,
                          const mp_file_ref *others, int n_others, mp_error *err);
/* MP_ERR_IO, in one line naming `what path` and both counts, when the file system of path's
 * directory has fewer than `bytes` free for an unprivileged writer: a large output then fails before
 * it is written, not after; MP_OK when it has them, or when the directory cannot be asked (the
 * write then says what went wrong). */
mp_status mp_output_check_space(const char *path, const char *what, uint64_t bytes, mp_error *err);
/* Whether a and b name the same file (existing: st_dev/st_ino; else directory identity + name). */
bool mp_same_file(const char *a, const char *b);

/* A file being written. Invariant: tmp exists (and is ours) between open and commit/abort. */
typedef struct mp_outfile {
    char *path;          /* the final name */
    char *tmp;           /* what is written: the temporary, or path itself with MP_OUT_DIRECT */
    const char *what;    /* kind, for messages */
    int fd;              /* open on tmp, or -1 */
    FILE *stream;        /* from mp_outfile_stream, or NULL */
    uint64_t offset;     /* bytes written so far */
    int write_errno;     /* first failed write through the stream, 0 if none */
    unsigned flags;
} mp_outfile;

enum {
    MP_OUT_DIRECT = 1u, /* write path itself (a new name inside a fresh temporary directory) */
    MP_OUT_NO_FD = 2u,  /* create the temporary and close it: another library opens o->tmp
                         * (SQLite); abort also removes o->tmp's -wal, -shm and -journal */
};

mp_status mp_outfile_open(mp_outfile *o, const char *path, const char *what, unsigned flags,
                          mp_error *err);
/* Write all n bytes (EINTR retried); on failure the file is aborted. */
mp_status mp_outfile_write(mp_outfile *o, const void *data, size_t n, mp_error *err);
/* A stdio stream whose writes go through mp_outfile_write's checks; errors surface at commit.
 * Owned by o (commit and abort close it). */
FILE *mp_outfile_stream(mp_outfile *o, mp_error *err);
/* Flush, fsync, close, rename into place (not with MP_OUT_DIRECT), fsync the directory. On
 * failure the temporary is removed and PATH is untouched. o is empty afterwards either way. */
mp_status mp_outfile_commit(mp_outfile *o, mp_error *err);
/* Remove the temporary (or the direct file); o is empty afterwards. Empty o: a no-op. */
void mp_outfile_abort(mp_outfile *o);

/* The whole of data as path, through open/write/commit. what names the kind in errors. */
mp_status mp_write_file_atomic(const char *path, const void *data, size_t size, const char *what,
                               mp_error *err);

#endif
