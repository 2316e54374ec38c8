/* Internal: what the readers of stored configs (run_io.c for checkpoints,
 * safetensors.c for exported metadata) share.  Defined in model_config.c. */
#ifndef VIT_SRC_CONFIG_INTERNAL_H
#define VIT_SRC_CONFIG_INTERNAL_H

#include "vit/model.h"

/* The config a stored config text is read over: the defaults, except the
 * keys that came after checkpoint format 2 (patch_stride, patch_pad, lsa,
 * tta, ema), which get the meaning they had before them.  A file whose text
 * lacks them was trained and scored without them, whatever the defaults
 * have become since (the default recipe now overlaps its patches and
 * averages nine shifted passes). */
void vit_config_legacy_default(vit_config *c);

/* The shortest of %.15g, %.16g and %.17g that reads back as v (out[32]):
 * 0.05 stays "0.05", yet every value survives text bitwise. */
const char *vit_fmt_double(double v, char out[32]);

/* Index of a shared key (the data's shape and the recipe, not an
 * architecture's, not "arch") in the config's table, or -1. */
int vit_config_shared_key(const char *key);

#endif
