/* Internal: the checkpoint format written to a stream the caller opened
 * (src/io/checkpoint.c), for files in that format written by other writers
 * (vit_params_save, through vit_atomic_begin / vit_atomic_end). */
#ifndef VIT_SRC_CHECKPOINT_INTERNAL_H
#define VIT_SRC_CHECKPOINT_INTERNAL_H

#include <stdio.h>

#include "vit/checkpoint.h"

/* Checks c as vit_ckpt_write does (same codes; messages name
 * vit_ckpt_write) and writes it, CRC included, to f, which stays open.
 * VIT_EIO naming path when a write fails. */
int vit_ckpt_stream(FILE *f, const vit_ckpt *c, const char *path);

#endif
