/* Internal: the one writer of every file the library writes (checkpoints,
 * params, safetensors, exports, PNGs, a run's metrics.csv, final.csv and
 * clock.txt).  vit/atomic_file.h is its public face for the tools.
 *
 * The steps, always the same: a temporary beside the target, named PATH
 * ".tmp." and six characters from mkstemp (unique, so two writers in one
 * folder, even of one path, never share a temporary); the contents; fflush
 * and fsync; the mode of the file it replaces (0644 for a new one); rename
 * over PATH; fsync of the folder.  On any failure before the rename the
 * temporary is removed and PATH keeps its old contents.  Messages name PATH,
 * the step and the system's reason, after "WHO: " when who is not NULL
 * ("vit_ckpt_write: 'x/last.ckpt': flushing failed: No space left on
 * device"), else after "PATH: ". */
#ifndef VIT_SRC_ATOMIC_FILE_INTERNAL_H
#define VIT_SRC_ATOMIC_FILE_INTERNAL_H

#include <stdio.h>

/* What follows PATH in a temporary's name: this, then mkstemp's six. */
#define VIT_ATOMIC_TMP_INFIX ".tmp."
#define VIT_ATOMIC_TMP_RANDOM 6

/* Creates the temporary for path and opens it for binary writing: *f and
 * its malloc'd name *tmp, the caller's until vit_atomic_end.  VIT_OK;
 * VIT_EIO or VIT_ENOMEM with *f = NULL, *tmp = NULL and nothing made. */
int vit_atomic_begin(const char *who, const char *path, FILE **f, char **tmp);

/* Finishes what vit_atomic_begin started and frees tmp.  rc is the
 * caller's verdict on its writing: anything but VIT_OK (its message
 * already recorded) removes the temporary and returns rc.  With VIT_OK the
 * steps above run; a stream error on f (a write that failed without the
 * caller checking) counts as a failed write.  keep NULL: f is closed.
 * keep not NULL: on success f stays open, positioned at the end of what is
 * now path, for appending, in *keep; on failure f is closed and *keep is
 * NULL.  Returns VIT_OK, rc, or VIT_EIO; a failure of the folder's fsync
 * alone (after the rename: path holds the new file) is VIT_EIO too, with a
 * message saying so. */
int vit_atomic_end(const char *who, FILE *f, char *tmp, const char *path, int rc, FILE **keep);

/* Writes path whole or not at all: fill(f, ctx) writes the contents to the
 * temporary and returns VIT_OK or an error code with its message recorded
 * (which vit_atomic_write returns, path untouched). */
typedef int (*vit_atomic_fill)(FILE *f, void *ctx);
int vit_atomic_write(const char *who, const char *path, vit_atomic_fill fill, void *ctx);

/* Deletes the temporaries of path (PATH.tmp. and exactly six characters)
 * that a writer killed before its rename left beside it.  Only while
 * nothing else writes path.  Best effort, as litter is all that stays. */
void vit_atomic_remove_temporaries(const char *path);

#endif
