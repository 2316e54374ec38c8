/* Internal: the architecture registry's and config parser's shared parts
 * (arch.c, model_config.c, model_vit.c) and the bf16 seam (arch_bf16.c,
 * model.c). */
#ifndef VIT_SRC_ARCH_INTERNAL_H
#define VIT_SRC_ARCH_INTERNAL_H

#include <stddef.h>

#include "vit/arch.h"

/* The built-in ViT (model_vit.c); vit_arch_vit() returns it. */
extern const vit_arch vit_arch_vit_def;
/* The built-in Swin Transformer (model_swin.c). */
extern const vit_arch vit_arch_swin_def;

/* Index of key in a's table, or -1. */
int vit_arch_key_find(const vit_arch *a, const char *key);

/* Parses value into key k's field at base (an arch's config struct): VIT_OK
 * or VIT_EINVAL "KEY: PROBLEM" (then nothing written). */
int vit_arch_key_set(const vit_arch_key *k, void *base, const char *value);

/* "key = value\n" of k's field at base into out[cap]: snprintf's count. */
int vit_arch_key_format(const vit_arch_key *k, const void *base, char *out, size_t cap);

/* Every key of a within its range at base: VIT_OK or VIT_EINVAL naming it. */
int vit_arch_keys_check(const vit_arch *a, const void *base);

/* bf16 (arch_bf16.c): the weight matrices a's bf16_weights hook declares
 * for a model of cfg (the state build made, p allocated), as the operands a
 * step packs (mixed.h): *out a new set the caller frees
 * (vit_mixed_weights_free), NULL on error.  VIT_EINVAL naming a when it has
 * no hook (bf16 refused), or the hook's error. */
typedef struct vit_mixed_weights vit_mixed_weights;
int vit_arch_bf16_layout(const vit_arch *a, const vit_config *cfg, const void *state,
                         vit_params *p, vit_mixed_weights **out);

#endif
