/* Internal: what the generic model (model.c) asks of the built-in Swin
 * beyond vit_arch (model_swin.c). */
#ifndef VIT_SRC_MODEL_SWIN_H
#define VIT_SRC_MODEL_SWIN_H

#include "mixed.h"
#include "vit/params.h"

/* The Swin's weight matrices as bf16 operands, packed once per step
 * (mixed.h), for the state its build made and the allocated p: *out a new
 * set (the caller frees it).  VIT_OK, or VIT_ENOMEM and the like. */
int vit_swin_mixed_layout(const void *state, vit_params *p, vit_mixed_weights **out);

#endif
