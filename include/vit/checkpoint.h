/*
 * vit/checkpoint.h - saving and loading training state as named tensors.
 *
 * A checkpoint holds a step and epoch counter, the vit_rng state, the model
 * configuration as text and any number of named tensors of rank 1 to 4
 * (model parameters, AdamW moments, ...).  The format does not know what
 * the tensors mean; the caller picks the names and finds them again with
 * vit_ckpt_find.
 *
 * File format, version 5 (versions 4 to 1, below, are still read).  Every
 * integer is little-endian and is written and read one byte at a time, so the file is the same on every machine.
 * Offsets are in bytes from the start of the file.
 *
 *   offset  size       field
 *   0       8          magic, the ASCII bytes "VITCKPT1" (no terminator)
 *   8       4          u32 format version, 5
 *   12      4          u32 sizeof(vit_real) of the writer, 4 or 8
 *                      (informational: values are float32 either way)
 *   16      8          u64 step
 *   24      8          u64 epoch
 *   32      32         4 x u64 rng state s[0], s[1], s[2], s[3]
 *   64      8          u64 epoch_step: steps done in the current epoch
 *                      (0 at an epoch boundary)
 *   72      24         3 x f64 epoch_sums, each an IEEE 754 binary64 bit
 *                      pattern stored as a little-endian u64
 *   96      4          u32 N, length of the order (0 .. 2^31 - 1)
 *   100     4*N        N x u32 order values (each < 2^31)
 *   H=100+4N 4         u32 L, length of the config text
 *   H+4     L          config text bytes (no terminator, no NUL inside)
 *   H+4+L   4          u32 M, number of class names (0 .. VIT_CKPT_CLASSES_MAX;
 *                      0: the writer knew none)
 *   then M class names, each:
 *           2          u16 length (1 .. VIT_CKPT_CLASS_NAME_MAX - 1)
 *           length     UTF-8 bytes (no terminator, no NUL inside)
 *   then    4          u32 D, length of the data record (0 .. VIT_CKPT_DATA_MAX)
 *           D          data record bytes (no terminator, no NUL inside)
 *   then    4          u32 K, number of tensors
 *   then K tensor records, each:
 *           2          u16 name length N (1 .. 63)
 *           N          name bytes (no terminator, no NUL inside)
 *           4          u32 ndim (1 .. 4)
 *           8*ndim     u64 dims, outermost first, each >= 1
 *           4*count    values, count = product of dims, row-major, each an
 *                      IEEE 754 binary32 whose bit pattern is stored as a
 *                      little-endian u32
 *   end-4   4          u32 CRC-32 (zlib's crc32, polynomial 0xEDB88320) of
 *                      every byte before it
 *
 * Version 4 is version 5 without the data record (the tensor count follows
 * the class names).  Versions 3 and 2 have the layout of 4.  Version 4 marks the fused
 * attention layout of a run (vit/train.h): each block's input projections
 * are one tensor blocks.L.attn.w_qkv [D, 3D] = [W_Q | W_K | W_V] (and
 * b_qkv [3D]) where versions 1 to 3 stored w_q, w_k, w_v [D, D] (and b_q,
 * b_k, b_v) one after the other, and the flat tensors over all parameters
 * (adam.m, adam.v, train.params) follow the model's layout; vit_run_load
 * converts the older files, and a version-3 build refuses a version-4 file
 * by its version instead of misreading it.  The format itself does not
 * know the model: this reader returns each file's tensors as stored, with
 * the version in vit_ckpt.version.  Version 3 marks files a version-2 reader
 * would misread: a run with weight averaging (vit/train.h) stores the
 * averaged parameters under the model's names and the trained weights as a
 * further tensor, and its config text holds keys (ema, tta) older readers
 * do not know; a version-2 build refuses the file by its version instead.
 *
 * Version 1 is the same without the fields at offsets 64 .. H (the config
 * length follows the rng state at offset 64) and without the class names
 * (the tensor count follows the config text); reading it gives epoch_step
 * 0, zero sums, no order and no class names.
 *
 * Values are always float32 so that the float32 and float64 builds read
 * each other's files; the float64 build rounds to nearest when writing and
 * widens exactly when reading.  Tensor names are unique within a file.
 *
 * Errors follow core.h (VIT_OK or a negative VIT_E* code, message in
 * vit_last_error() naming the file).  Thread safety: reentrant; calls on
 * different vit_ckpt structs may run on different threads.  Concurrent
 * writers to one path each replace it atomically; the last rename wins.
 */
#ifndef VIT_CHECKPOINT_H
#define VIT_CHECKPOINT_H

#include "vit/core.h"

VIT_BEGIN_DECLS

#define VIT_CKPT_VERSION 5     /* the version written */
#define VIT_CKPT_VERSION_MIN 1 /* the oldest version read */
#define VIT_CKPT_NAME_MAX 64 /* size of vit_ckpt_tensor.name, including its NUL */
#define VIT_CKPT_CLASS_NAME_MAX 256 /* longest class name + 1 (a file name fits) */
#define VIT_CKPT_CLASSES_MAX 100000 /* most class names (the most classes a model has) */
#define VIT_CKPT_DATA_MAX 65536 /* longest data record, in bytes */

/* One tensor: name (NUL-terminated, 1..63 bytes), ndim in 1..4, dims[0 ..
 * ndim-1] >= 1 (entries past ndim are ignored), and data holding the
 * product of the dims values. */
typedef struct vit_ckpt_tensor {
    char name[VIT_CKPT_NAME_MAX];
    int ndim;
    long long dims[4];
    vit_real *data;
} vit_ckpt_tensor;

/* A whole checkpoint.  config is NUL-terminated text (NULL is written as
 * empty).  When writing, the caller owns everything and the structure is
 * only read.  When vit_ckpt_read fills it, config, tensors, every
 * tensors[i].data, order, class_names, every class_names[i] and data are
 * allocated by the library and released together by vit_ckpt_free. */
typedef struct vit_ckpt {
    unsigned long long step, epoch;
    unsigned long long rng[4];
    char *config;
    int ntensors;
    vit_ckpt_tensor *tensors;
    /* Where inside an epoch the state was taken (format 2; all zero in a
     * version-1 file): epoch_step steps done, the caller's running sums of
     * the epoch, and the data order the epoch follows (norder values, each
     * in 0 .. INT_MAX; order NULL when norder is 0). */
    unsigned long long epoch_step;
    double epoch_sums[3];
    int norder;
    int *order;
    /* The names of the model's classes (format 2; none in a version-1
     * file): nclass_names strings, each NUL-terminated, 1 ..
     * VIT_CKPT_CLASS_NAME_MAX - 1 bytes long; class_names NULL when
     * nclass_names is 0.  The format does not know the model: matching
     * the count to the classes is the caller's (vit_run_load). */
    int nclass_names;
    char **class_names;
    /* What the run trained on (format 5; NULL in older files, and written
     * as empty when NULL): NUL-terminated text the format does not
     * interpret (vit/train.h's vit_run_data writes and reads it). */
    char *data;
    /* The file's format version (1 .. VIT_CKPT_VERSION), set by
     * vit_ckpt_read so that a caller can convert what older versions
     * meant; ignored by vit_ckpt_write, which writes VIT_CKPT_VERSION. */
    unsigned version;
} vit_ckpt;

/* Writes c to path atomically: the bytes go to a new temporary file
 * PATH.tmp.XXXXXX (mkstemp) in the same folder, which is flushed, fsync'ed
 * and closed, then renamed over path, and finally the folder is fsync'ed
 * so the rename itself is durable.  A reader therefore sees the old file
 * or the complete new one, never a mix.  The file gets the permission bits
 * of the file it replaces, or 0644 when path did not exist.
 * Returns VIT_EINVAL for a NULL path or c, ntensors < 0, a NULL tensors or
 * data pointer, norder < 0, a NULL order with norder > 0 or a negative
 * order value, nclass_names outside 0 .. VIT_CKPT_CLASSES_MAX, a NULL
 * class_names with nclass_names > 0, a class name that is NULL, empty or
 * VIT_CKPT_CLASS_NAME_MAX bytes or longer, a tensor name that is empty,
 * too long, unterminated or repeated,
 * ndim outside 1..4 or a dim < 1; VIT_ENUM when a value is not finite as
 * float32 (NaN, infinity, or a double beyond the float range), naming the
 * tensor; VIT_ENOMEM when sizes overflow; VIT_EIO when any file operation
 * fails (including a full disk or a file size limit), with a message that
 * names the path and the system's reason.  On every failure the temporary
 * file is removed and path is left as it was - except when only the final
 * fsync of the folder fails, after the rename: then path already holds
 * the new checkpoint but VIT_EIO still reports that it may not be durable. */
int vit_ckpt_write(const char *path, const vit_ckpt *c);

/* Deletes the temporaries PATH.tmp.XXXXXX (exactly six characters after
 * ".tmp.", the pattern vit_ckpt_write uses) that a write of path killed
 * before its rename (kill -9, power loss) left in path's folder.  Call it
 * only while nothing else writes path.  Best effort: a folder that cannot
 * be read or a file that cannot be removed is skipped; nothing is
 * returned, since litter is all that stays. */
void vit_ckpt_remove_temporaries(const char *path);

/* Reads path into *c (overwritten; call vit_ckpt_free when done).  Checks,
 * in this order, that the file is at least as long as each field it
 * reads, the magic, the version, the writer's real size, every length,
 * count and dims against the bytes left in the file before allocating
 * anything sized by them (so a corrupt file can never cause a huge
 * allocation or an overflow), the class names (count, lengths, no NUL),
 * the tensor names, that exactly the CRC follows the
 * last tensor, the CRC, and finally that every value is finite.
 * Returns VIT_EINVAL for a NULL path or c; VIT_EIO when the file cannot be
 * opened or read; VIT_EFORMAT for anything malformed, with a message that
 * names the file and the problem ("bad magic", "truncated at byte N",
 * "checksum mismatch", ...); VIT_ENUM for a non-finite value; VIT_ENOMEM
 * when an allocation fails.  On failure nothing is left allocated and *c
 * is zeroed. */
int vit_ckpt_read(const char *path, vit_ckpt *c);

/* Reads what precedes the tensors (the counters, rng state, position,
 * config text, class names and data record) into *c as vit_ckpt_read
 * does, with no tensors (ntensors 0, tensors NULL): for a caller that
 * wants the config or the data record without the parameters.  Reads
 * only the first bytes of the file it needs (64 KiB, or more for a long
 * order or many class names).  The checksum covers the whole file and is
 * not checked, so a file corrupt further on passes here and fails
 * vit_ckpt_read.  Errors, ownership and thread safety as for
 * vit_ckpt_read (each length is still checked against the file's). */
int vit_ckpt_read_header(const char *path, vit_ckpt *c);

/* Frees what vit_ckpt_read allocated and zeroes *c.  Accepts NULL and a
 * zeroed checkpoint.  Do not call it on a caller-built vit_ckpt whose
 * memory the caller manages. */
void vit_ckpt_free(vit_ckpt *c);

/* The tensor named name, or NULL when there is none (or c or name is NULL). */
const vit_ckpt_tensor *vit_ckpt_find(const vit_ckpt *c, const char *name);

VIT_END_DECLS

#endif
