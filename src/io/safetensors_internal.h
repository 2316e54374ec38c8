/* Internal: a safetensors file parsed once (safetensors.c), for the readers
 * of files that are not our exports (import_timm.c): its tensors' names and
 * shapes, its metadata, and the model of a config taken from it under the
 * names of vit/safetensors.h. */
#ifndef VIT_SRC_SAFETENSORS_INTERNAL_H
#define VIT_SRC_SAFETENSORS_INTERNAL_H

#include <stdint.h>

#include "vit/model.h"

#define VIT_ST_SHAPE_MAX 8

typedef struct vit_st_file vit_st_file;

/* Reads path whole and parses its header (the checks of
 * vit_safetensors_load: JSON, tensors covering the data exactly).  *out is
 * the caller's (vit_st_close), NULL on failure.  path must outlive it. */
int vit_st_open(const char *path, vit_st_file **out);
void vit_st_close(vit_st_file *f);

/* The tensors, in header order: their number and name i. */
int vit_st_count(const vit_st_file *f);
const char *vit_st_name(const vit_st_file *f, int i);

/* Tensor name's rank, its shape into shape[]; -1 when the file lacks it. */
int vit_st_shape(const vit_st_file *f, const char *name, uint64_t shape[VIT_ST_SHAPE_MAX]);

/* A metadata value, or NULL. */
const char *vit_st_meta(const vit_st_file *f, const char *key);

/* The model cfg describes with every tensor from the file (F32, the shapes
 * and names of vit/safetensors.h): each missing, misshapen or unexpected
 * tensor a line of one VIT_EFORMAT message; the tensors named in
 * skip[0 .. nskip-1] may be in the file unused.  *model is the caller's. */
int vit_st_fill(vit_st_file *f, const vit_config *cfg, const char *const *skip, int nskip,
                vit_model **model);

#endif
