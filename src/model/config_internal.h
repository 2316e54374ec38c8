/* Internal: the key tables of the network (model_config.c) and of the
 * training recipe (train_config.c), the one machinery that reads and writes
 * their values, and what the readers of stored configs (run_io.c for
 * checkpoints, safetensors.c for exported metadata) share. */
#ifndef VIT_SRC_CONFIG_INTERNAL_H
#define VIT_SRC_CONFIG_INTERNAL_H

#include "vit/model.h"
#include "vit/train_config.h"

/* VIT_CFG_CHANNELS: a vit_channel_values, in text 1 .. VIT_CHANNELS_MAX
 * comma-separated numbers, each in [lo, hi]. */
enum vit_cfg_kind { VIT_CFG_INT, VIT_CFG_DOUBLE, VIT_CFG_U64, VIT_CFG_TTA, VIT_CFG_PRECISION,
                    VIT_CFG_CHANNELS };

/* One key of a table: its field at offset in the struct, its range
 * (inclusive; checked when set from text) and help. */
typedef struct vit_cfg_field {
    const char *key;
    enum vit_cfg_kind kind;
    size_t offset;
    double lo, hi;
    const char *help;
} vit_cfg_field;

/* The key of table[0 .. n-1] named key, or NULL. */
const vit_cfg_field *vit_cfg_field_find(const vit_cfg_field *table, int n, const char *key);

/* Sets field f of the struct at base from text (VIT_EINVAL "KEY: PROBLEM"
 * and nothing set for a value that does not parse or is out of range). */
int vit_cfg_field_set(void *base, const vit_cfg_field *f, const char *key, const char *value);

/* Field f of the struct at base as "key = value\n" into out[room]:
 * snprintf's count. */
int vit_cfg_field_format(const void *base, const vit_cfg_field *f, char *out, size_t room);

/* The recipe's table (train_config.c), in the order of config text, and
 * its length. */
const vit_cfg_field *vit_train_config_fields(int *n);

/* The config a stored config text is read over: the defaults, except the
 * keys that came after checkpoint format 2 (patch_stride, patch_pad, lsa;
 * the recipe's tta and ema), which get the meaning they had before them.
 * A file whose text lacks them was trained and scored without them,
 * whatever the defaults have become since (the default recipe now overlaps
 * its patches and averages nine shifted passes). */
void vit_config_legacy_default(vit_config *c);
void vit_train_config_legacy_default(vit_train_config *tc);

/* The shortest of %.15g, %.16g and %.17g that reads back as v (out[32]):
 * 0.05 stays "0.05", yet every value survives text bitwise. */
const char *vit_fmt_double(double v, char out[32]);

/* Index of a shared key of the network (the data's shape, init_std; not an
 * architecture's, not "arch") in the network's table, or -1. */
int vit_config_shared_key(const char *key);

#endif
