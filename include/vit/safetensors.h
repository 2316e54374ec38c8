/*
 * vit/safetensors.h - a model as a safetensors file under timm's names, for
 * PyTorch users, and back: export (vit_safetensors_save), import
 * (vit_safetensors_load) and import into a checkpoint that training resumes
 * from (vit_safetensors_import).
 *
 * File format (safetensors): u64 little-endian N, then N bytes of JSON
 * header, then the data.  The header maps every tensor name to
 * {"dtype":"F32","shape":[...],"data_offsets":[BEGIN,END]} (byte offsets
 * into the data, which follows the header), and "__metadata__" to an
 * object of string values.  Every value is a little-endian IEEE float32.
 *
 * The tensors are the parameters of timm's VisionTransformer:
 *
 *   ours                               safetensors (PyTorch layout)
 *   stem.w [9*C, S], stem.b (stem S)   patch_embed.backbone.0.weight [S, C, 3, 3], .bias
 *   stem2.w [16*S, S2], stem2.b        patch_embed.backbone.2.weight [S2, S, 4, 4], .bias
 *   patch.w [P*P*C, D]                 patch_embed.proj.weight [D, C, P, P]
 *                                        w[d, c, py, px] = patch.w[(py*P + px)*C + c, d]
 *   patch.b [D]                        patch_embed.proj.bias [D]
 *   cls [D]                            cls_token [1, 1, D]
 *   pos [T, D]                         pos_embed [1, T, D]
 *   blocks.L.ln1.g / .b                blocks.L.norm1.weight / .bias
 *   blocks.L.attn.w_qkv [D, 3D]        blocks.L.attn.qkv.weight [3D, D] = w_qkv^T
 *     (= [W_Q | W_K | W_V])              (= [W_Q^T; W_K^T; W_V^T])
 *   blocks.L.attn.b_qkv [3D]           blocks.L.attn.qkv.bias [3D]
 *   blocks.L.attn.w_o [D, D], b_o      blocks.L.attn.proj.weight [D, D] = W_O^T, .bias
 *   blocks.L.attn.tau [H] (lsa = 1)    blocks.L.attn.tau [H]: not timm's (locality
 *                                        self-attention: scores tau[h] Q K^T, no token
 *                                        attending itself), so a strict timm load fails
 *   blocks.L.ln2.g / .b                blocks.L.norm2.weight / .bias
 *   blocks.L.mlp.w1 [D, M], b1         blocks.L.mlp.fc1.weight [M, D] = w1^T, .bias
 *   blocks.L.mlp.w2 [M, D], b2         blocks.L.mlp.fc2.weight [D, M] = w2^T, .bias
 *   ln.g / ln.b                        norm.weight / .bias
 *   head.w [D, K], head.b              head.weight [K, D] = head.w^T, head.bias
 *
 * (T = number of patches + 1, M = mlp, K = classes.)  Another
 * architecture's names are its own (vit/arch.h, export_tensor): the Swin's
 * torchvision's SwinTransformer's, and its convolutional stem, which
 * torchvision lacks, under our extension features.0.stem.0.weight /
 * .bias and features.0.stem.2.weight / .bias (a Sequential in front of
 * the patch convolution, docs/architectures.md).  The metadata holds
 * the model's config: the model keys of vit_config_format (dim, depth,
 * heads, mlp, patch, image_height, image_width, channels, classes, pool)
 * and its training recipe (lr, epochs, seed, ...), except that AdamW's
 * beta1, beta2, eps and weight_decay are written as adamw_beta1,
 * adamw_beta2, adamw_eps and adamw_weight_decay, so that no loader takes
 * AdamW's eps for the layer norm's; besides: format "pt", producer
 * "vit_export VERSION", layout "timm.VisionTransformer", global_pool
 * "token" (pool cls) or "avg" (pool mean), layer_norm_eps (ln_eps, "%g":
 * "1e-05" by default),
 * activation "gelu_exact" and input "NCHW float32 in [0, 1], no
 * normalization"; and for a model with tta shift9, "tta_note", saying
 * that the weights give one pass per image while the model's own scores
 * average the softmax over the image and its 8 one-pixel shifts (zeros
 * shifted in; docs/cli.md shows it in PyTorch).
 *
 * To reproduce our logits in timm itself: its default LayerNorm eps is
 * 1e-6, so for our default ln_eps 1e-5 pass
 * norm_layer=partial(nn.LayerNorm, eps=1e-5); and for
 * global_pool "avg" pass fc_norm=False, because we apply the final norm to
 * every token before averaging, while timm's "avg" default moves the final
 * norm after the average (fc_norm).
 *
 * Errors follow core.h: VIT_OK or a negative VIT_E* code, with a message in
 * vit_last_error() that names the file and the problem.  Thread safety:
 * reentrant; calls on different models and paths may run at the same time.
 */
#ifndef VIT_SAFETENSORS_H
#define VIT_SAFETENSORS_H

#include "vit/core.h"
#include "vit/data.h"
#include "vit/model.h"

VIT_BEGIN_DECLS

/* Writes m's parameters (rounded to float32) and config as a safetensors
 * file at path, tensors in timm's state_dict order with contiguous data.
 * Atomic: the bytes go to a temporary file beside path, which is flushed,
 * fsync'ed, given mode 0644 and renamed over path; on failure path is left
 * as it was and the temporary is removed.  m is only read.  class_names
 * (classes strings, e.g. a checkpoint's vit_run_state names, only read) go
 * into the metadata as "class_names", a JSON array in a string; NULL
 * leaves it out.  tc (only read; may be NULL) is the recipe that trained
 * the model, written beside the network's keys as provenance (AdamW's
 * keys prefixed adamw_; with tta shift9 or shift9flip a "tta_note" says
 * the weights give one pass); NULL writes the network alone.  *bytes, if
 * bytes is not NULL, receives the file size.
 * Returns VIT_OK; VIT_EINVAL for a NULL m or path; VIT_ENOMEM; VIT_EIO
 * naming the path and the system's reason. */
int vit_safetensors_save(const vit_model *m, const vit_train_config *tc, char *const *class_names,
                         const char *path, size_t *bytes);

/* vit_safetensors_save, and how the run fitted its images to the model's
 * shape: fit (a checkpoint's vit_run_data.fit, only read) goes into the
 * metadata as "fit" ("HxWxC", 0 for a part the images kept) with a
 * "fit_note" telling a user of the weights how to prepare an image (alpha
 * over white, the channel conversion and the resize filter of
 * vit_image_fit, to the model's image_height x image_width x channels).
 * fit NULL or all zero (a run whose images were not fitted) writes neither
 * key: the file is vit_safetensors_save's.  vit_safetensors_load ignores
 * both keys.  Errors: those of vit_safetensors_save, and VIT_EINVAL for a
 * fit with one side 0, a negative side or channels not 0, 1 or 3 (nothing
 * written). */
int vit_safetensors_save_fit(const vit_model *m, const vit_train_config *tc,
                             char *const *class_names, const vit_data_fit *fit, const char *path,
                             size_t *bytes);

/* Reads a safetensors file with the names above (written by
 * vit_safetensors_save or by PyTorch) into a new model, *model, owned by
 * the caller (vit_model_free).
 *
 * The config comes from "__metadata__": the model keys dim, depth, heads,
 * mlp, patch, image_height, image_width, channels and classes are
 * required, and the pooling as pool ("cls"/"mean") or global_pool
 * ("token"/"avg"), agreeing when both are given.  Recipe keys (lr, epochs,
 * adamw_eps, ...; the old names eps, beta1, beta2 and weight_decay of
 * earlier exports are accepted too) are taken when present, defaults
 * (vit_config_default) otherwise.  layer_norm_eps, when given, is the
 * model's ln_eps (it must agree with an ln_eps key, if both are given), and
 * activation must be gelu_exact, the only one this library computes;
 * other string keys are ignored.
 *
 * Every tensor of the model must be present exactly once, with dtype F32,
 * its shape above and its data inside the file; no other tensor may be
 * present, tensors may not overlap, and every value must be finite.  The
 * file is untrusted: the header is bounded by the file size (and 100 MB),
 * and the model's size is checked against the data before it is
 * allocated.
 *
 * Returns VIT_OK; VIT_EINVAL for a NULL argument; VIT_EIO when the file
 * cannot be read; VIT_EFORMAT for anything malformed or missing, with one
 * message naming the file and the problem (for a missing key: which);
 * VIT_ENUM for a non-finite value; VIT_ENOMEM.  On failure *model is NULL
 * and nothing stays allocated. */
int vit_safetensors_load(const char *path, vit_model **model);

/* As vit_safetensors_load, and the metadata's "class_names" (as
 * vit_safetensors_save writes it: a JSON array of strings inside the
 * string value) into *class_names, if class_names is not NULL: an array of
 * the model's classes malloc'd NUL-terminated strings, name k for label k,
 * the caller's (vit_safetensors_class_names_free with the model's
 * classes); NULL when the file has no class_names.  The value must be an
 * array of exactly classes strings, each 1 .. VIT_CKPT_CLASS_NAME_MAX - 1
 * bytes and none repeated; otherwise VIT_EFORMAT naming the file, the key
 * and the problem.  On failure *model and *class_names are NULL. */
int vit_safetensors_load_named(const char *path, vit_model **model, char ***class_names);

/* Frees names[0 .. n-1] and names; NULL is fine. */
void vit_safetensors_class_names_free(char **names, int n);

/* Imports a safetensors file as a training checkpoint: vit_safetensors_load
 * of path, then vit_run_save to ckpt_path (atomic, as vit_run_save) with a
 * fresh optimizer state - zero AdamW moments, step 0, epoch 0 and the rng
 * seeded from the config's seed, and the class names of the metadata
 * (vit_safetensors_load_named; none when the file has none, so the
 * checkpoint reads back as "0" .. "K-1") - so that training resumes from it
 * (vit_run_load with an optimizer, vit_train --resume) as from a run that
 * has not taken a step yet.  If model is not NULL, *model receives the
 * imported model (the caller's, vit_model_free); otherwise it is freed.
 * Returns VIT_OK or the codes of vit_safetensors_load and vit_run_save;
 * on failure ckpt_path is untouched and *model (if given) is NULL. */
int vit_safetensors_import(const char *path, const char *ckpt_path, vit_model **model);

VIT_END_DECLS

#endif
