/* Internal: what the layers above the model use of it beyond vit/model.h. */
#ifndef VIT_SRC_MODEL_INTERNAL_H
#define VIT_SRC_MODEL_INTERNAL_H

#include "vit/model.h"

/* The logits [batch, classes] of images [batch, H, W, C] on tape, as
 * vit_model_forward(m, tape, images, batch, 0) computes them (the same
 * bits), without copying out the attention maps: scoring reads only the
 * logits, and the maps of a 256-image batch are tens of MB written and
 * never read.  vit_model_attention_maps() has nothing to show afterwards
 * (NULL).  NULL on error, as vit_model_forward. */
vit_tensor *vit_model_logits(vit_model *m, vit_tape *tape, const vit_real *images, int batch);

#endif
