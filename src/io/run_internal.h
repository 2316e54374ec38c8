/* Internal: how the training loop (train.c) writes its checkpoints through
 * run_io.c. */
#ifndef VIT_SRC_RUN_INTERNAL_H
#define VIT_SRC_RUN_INTERNAL_H

#include "vit/train.h"

/* vit_run_save with the config text written from cfg instead of the
 * model's own config.  A resumed run may change keys that do not shape the
 * model (epochs, ckpt_minutes: vit_train_run), and its checkpoints must
 * store the run's config, which the loaded model's copy no longer is.  cfg
 * must describe m: a config of another parameter count is refused with
 * VIT_EINVAL (nothing written).  Errors otherwise as vit_run_save. */
int vit_run_internal_save(const char *path, const vit_model *m, const vit_config *cfg,
                          const vit_train_config *tc, const vit_adamw *opt,
                          const vit_run_state *st);

/* The data record's text ("key = value" lines) into buf[cap]: VIT_OK, or
 * VIT_EINVAL when it does not fit. */
int vit_run_data_format(const vit_run_data *d, char *buf, size_t cap);

/* Parses a data record's text (of the checkpoint at path, for messages)
 * into *d; unknown keys are skipped.  VIT_EFORMAT naming the line. */
int vit_run_data_parse(const char *text, const char *path, vit_run_data *d);

#endif
