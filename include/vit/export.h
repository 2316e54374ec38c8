/*
 * vit/export.h - what a model computes, written for other programs to
 * compare with: the logits of every image of a data set as CSV.
 * (The weights themselves go out as safetensors: vit/safetensors.h.)
 *
 * tools/torch_check_export.py reads this file next to the safetensors
 * export and checks that PyTorch computes the same logits.
 *
 * Errors follow vit/core.h (VIT_E* codes, message in vit_last_error()).
 * Thread safety: a model is used by one thread at a time (vit/model.h);
 * calls on different models and paths may run at the same time.
 */
#ifndef VIT_EXPORT_H
#define VIT_EXPORT_H

#include "vit/core.h"
#include "vit/data.h"
#include "vit/model.h"

VIT_BEGIN_DECLS

/* Runs m forward (no gradients, in batches of 128; test-time augmentation
 * is not applied: these are the raw logits of one pass) on every image of
 * ds and writes path whole or not at all (vit_atomic_open / close, see
 * vit/atomic_file.h), replacing any file there, as CSV: the header
 * "index,label,pred,logit_0,...,logit_{K-1}" (K = the model's classes),
 * then one row per image in data set order: its index, its label, the
 * class of its largest logit (the first one on a tie) and its K logits,
 * printed with 9 significant digits in the float32 library (each reads
 * back as the same float) and 17 in float64.  Every line ends in "\n".
 * m's parameters and ds are only read (m's scratch is used).
 * *accuracy, if not NULL, receives the fraction of rows whose pred is
 * their label (untouched on failure).
 * Returns VIT_OK; VIT_EINVAL for a NULL m, ds or path, an empty ds or one
 * whose images are not the model's height, width and channels (the
 * message gives both); VIT_EIO when the file cannot be created or written
 * (the message names path and the system's reason; path keeps its old
 * contents); VIT_ENOMEM; or the forward pass's error, its message after
 * path's. */
int vit_export_logits_csv(vit_model *m, const vit_dataset *ds, const char *path,
                          double *accuracy);

VIT_END_DECLS

#endif
