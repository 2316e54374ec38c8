/*
 * tools/export.h - vit_export's logits CSV, which tools/torch_check_export.py
 * compares with PyTorch's (the code lives here so that tests/test_export.c
 * exercises it directly).  The safetensors file itself is written by the
 * library: vit_safetensors_save, see vit/safetensors.h.
 *
 * Errors: functions return 0, or -1 after writing a one-line message into
 * err (cap bytes).
 */
#ifndef VIT_TOOLS_EXPORT_H
#define VIT_TOOLS_EXPORT_H

#include <stddef.h>

#include "vit/vit.h"

/* Runs m on every image of ds and writes path (atomically) as CSV: the
 * header "index,label,pred,logit_0,...,logit_{K-1}", then one row per image
 * with logits printed to 9 significant digits.  *accuracy, if not NULL,
 * receives the fraction of rows with pred == label. */
int export_logits_csv(vit_model *m, const vit_dataset *ds, const char *path, double *accuracy,
                      char *err, size_t cap);

#endif
