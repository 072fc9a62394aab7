/* runtime/atomic_file.h — write a whole file so that readers see the old file or the new one,
 * never a prefix: bytes go to "PATH.tmp.<pid>", are fsync'd, then renamed over PATH. On failure
 * the temporary file is removed and PATH is untouched. */
#ifndef MP_RUNTIME_ATOMIC_FILE_H
#define MP_RUNTIME_ATOMIC_FILE_H

#include <stddef.h>

#include "runtime/error.h"

/* what names the kind of file in errors ("profile", "report", ...). */
mp_status mp_write_file_atomic(const char *path, const void *data, size_t size, const char *what, mp_error *err);

#endif
