/*
 * tools/export.h - writing a model for PyTorch users (vit_export; the code
 * lives here so that tests/test_export.c exercises it directly).
 *
 * The safetensors file holds every parameter as little-endian float32 under
 * the names and layouts of timm's VisionTransformer:
 *
 *   ours                               safetensors (PyTorch layout)
 *   patch.w [P*P*C, D]                 patch_embed.proj.weight [D, C, P, P]
 *                                        w[d, c, py, px] = patch.w[(py*P + px)*C + c, d]
 *   patch.b [D]                        patch_embed.proj.bias [D]
 *   cls [D]                            cls_token [1, 1, D]
 *   pos [T, D]                         pos_embed [1, T, D]
 *   blocks.L.ln1.g / .b                blocks.L.norm1.weight / .bias
 *   blocks.L.attn.w_q, w_k, w_v [D, D] blocks.L.attn.qkv.weight [3D, D] = [W_Q^T; W_K^T; W_V^T]
 *   blocks.L.attn.b_q, b_k, b_v        blocks.L.attn.qkv.bias [3D]
 *   blocks.L.attn.w_o [D, D], b_o      blocks.L.attn.proj.weight [D, D] = W_O^T, .bias
 *   blocks.L.ln2.g / .b                blocks.L.norm2.weight / .bias
 *   blocks.L.mlp.w1 [D, M], b1         blocks.L.mlp.fc1.weight [M, D] = w1^T, .bias
 *   blocks.L.mlp.w2 [M, D], b2         blocks.L.mlp.fc2.weight [D, M] = w2^T, .bias
 *   ln.g / ln.b                        norm.weight / .bias
 *   head.w [D, K], head.b              head.weight [K, D] = head.w^T, head.bias
 *
 * Tensors appear in that order (timm's state_dict order) with contiguous
 * data offsets.  "__metadata__" maps strings to strings: every config key
 * of the model (dim, depth, heads, mlp, patch, image_height, ...; see
 * vit_config_format) plus
 *   format "pt", producer "vit_export VERSION", layout "timm.VisionTransformer",
 *   global_pool "token" or "avg", layer_norm_eps "1e-05", activation
 *   "gelu_exact", input "NCHW float32 in [0, 1], no normalization".
 * To reproduce our logits in timm itself: its default LayerNorm eps is 1e-6,
 * so pass norm_layer=partial(nn.LayerNorm, eps=1e-5); and for pool = mean
 * (global_pool "avg") pass fc_norm=False, because we apply the final norm to
 * every token before averaging, while timm's "avg" default normalises after.
 *
 * Errors: functions return 0, or -1 after writing a one-line message into
 * err (cap bytes).
 */
#ifndef VIT_TOOLS_EXPORT_H
#define VIT_TOOLS_EXPORT_H

#include <stddef.h>

#include "vit/vit.h"

/* Writes m as a safetensors file at path, atomically (a temporary file in the
 * same folder, flushed to disk and renamed over path; on failure path is
 * untouched and the temporary file removed).  class_names (the model's
 * classes of them, or NULL for none) go into the metadata as "class_names",
 * a JSON array in a string.  *bytes, if not NULL, receives the file size. */
int export_safetensors(vit_model *m, char *const *class_names, const char *path, size_t *bytes,
                       char *err, size_t cap);

/* Runs m on every image of ds and writes path (atomically) as CSV: the
 * header "index,label,pred,logit_0,...,logit_{K-1}", then one row per image
 * with logits printed to 9 significant digits.  *accuracy, if not NULL,
 * receives the fraction of rows with pred == label. */
int export_logits_csv(vit_model *m, const vit_dataset *ds, const char *path, double *accuracy,
                      char *err, size_t cap);

#endif
