/* Internal: files written whole or not at all (the PNG writer and the
 * safetensors export; checkpoints have their own writer, whose temporary
 * names vit_ckpt_remove_temporaries knows). */
#ifndef VIT_SRC_ATOMIC_FILE_H
#define VIT_SRC_ATOMIC_FILE_H

#include <stdio.h>

/* Opens a new temporary file beside path ("PATH.XXXXXX", so on the same
 * file system) for writing: *f, and its malloc'd name *tmp.  VIT_OK, or
 * VIT_EIO / VIT_ENOMEM naming path, with nothing left behind. */
int vit_atomic_open(const char *path, FILE **f, char **tmp);

/* Finishes what vit_atomic_open began.  With rc == VIT_OK: flushes,
 * fsyncs, gives the file mode 0644, closes it, renames it over path (a
 * reader sees the old file or the whole new one) and syncs the folder,
 * best effort.  Otherwise, or when any of that fails, closes and removes
 * the temporary.  Frees tmp.  Returns rc, or VIT_EIO naming path and the
 * system's reason. */
int vit_atomic_close(FILE *f, char *tmp, const char *path, int rc);

#endif
