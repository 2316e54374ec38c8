/* Internal: what the generic model (model.c) asks of the built-in ViT
 * beyond vit_arch (model_vit.c). */
#ifndef VIT_SRC_MODEL_VIT_H
#define VIT_SRC_MODEL_VIT_H

#include "mixed.h"
#include "vit/model.h"

/* The ViT's weight matrices as bf16 operands, packed once per step
 * (mixed.h), for the state build made and the allocated p: *out a new set
 * (the caller frees it).  VIT_OK, or VIT_ENOMEM and the like. */
int vit_vit_mixed_layout(const vit_config *cfg, const void *state, vit_params *p,
                         vit_mixed_weights **out);

#endif
