/*
 * vit/atomic_file.h - files written whole or not at all.
 *
 * Everything the library writes (checkpoints included) and everything the
 * tools write goes through the same steps as this pair: the data goes to a
 * temporary file beside the target, is flushed and fsync'd, and only then
 * renamed over the target, so a reader, a crash or a full disk leaves
 * either the old file or the whole new one, never half of one.  Two writers
 * in one folder, even of one path, never share a temporary.
 *
 *     FILE *f; char *tmp;
 *     int rc = vit_atomic_open("out/seeds.csv", &f, &tmp);
 *     if (rc) return rc;
 *     if (fprintf(f, "seed,acc\n") < 0) rc = VIT_EIO;
 *     rc = vit_atomic_close(f, tmp, "out/seeds.csv", rc);
 *
 * Errors follow vit/core.h (VIT_E* codes, message in vit_last_error()).
 * Thread safety: different paths may be written from different threads.
 */
#ifndef VIT_ATOMIC_FILE_H
#define VIT_ATOMIC_FILE_H

#include <stdio.h>

#include "vit/core.h"

VIT_BEGIN_DECLS

/* Opens a new temporary file beside path ("PATH.tmp.XXXXXX", a name no
 * other writer gets, on the same file system) for writing in binary mode:
 * *f, and its malloc'd name *tmp, both owned by the caller until
 * vit_atomic_close.  path itself is not touched.  Returns VIT_OK; VIT_EIO
 * (the folder is missing or not writable: the message names path and the
 * system's reason), VIT_ENOMEM or VIT_EINVAL (an argument is NULL), with
 * nothing left behind and *f = NULL, *tmp = NULL. */
int vit_atomic_open(const char *path, FILE **f, char **tmp);

/* Finishes what vit_atomic_open began; always closes f and frees tmp.
 * With rc == VIT_OK: flushes, fsyncs, gives the file the mode of the file
 * it replaces (0644 when path is new), closes it, renames it over path (a
 * reader sees the old file or the whole new one) and fsyncs the folder.
 * With rc != VIT_OK (the caller's writing failed), a write error on f the
 * caller did not check, or when any of those steps fails, the temporary is
 * removed and path keeps its old contents.  Returns rc when it was not
 * VIT_OK (the caller's message stays), else VIT_OK or VIT_EIO naming path,
 * the step and the system's reason; VIT_EINVAL when an argument is NULL.
 * Only when the folder's fsync fails (a file system that cannot sync a
 * folder is not a failure) has path already been replaced: VIT_EIO says
 * that the new file may not last a power cut. */
int vit_atomic_close(FILE *f, char *tmp, const char *path, int rc);

VIT_END_DECLS

#endif
