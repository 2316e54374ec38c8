/*
 * An architecture's bf16 step (vit/arch.h, vit_arch.bf16_weights): the set
 * its hook declares its weight matrices into, checked against the model's
 * tensors, and turned into the operands a step packs once (mixed.h).
 */
#include "vit/arch.h"
#include "vit/model.h"

#include "arch_internal.h"
#include "error.h"
#include "mixed.h"

struct vit_arch_bf16 {
    const vit_arch *arch; /* for messages */
    vit_params *p;        /* the model's tensors, allocated */
    vit_mixed_weights *w; /* the operands declared so far */
};

int vit_arch_bf16_add(vit_arch_bf16 *set, int tensor, size_t offset, int rows, int cols, int ld,
                      int use)
{
    if (!set)
        return vit_fail(VIT_EINVAL, "vit_arch_bf16_add: set is NULL");
    const char *an = set->arch->name;
    const vit_param_tensor *t = vit_params_tensor(set->p, tensor);
    if (!t)
        return vit_fail(VIT_EINVAL, "vit_arch_bf16_add: %s: tensor %d is not one of the model's "
                        "0 .. %d", an, tensor, vit_params_tensor_count(set->p) - 1);
    if (rows < 1 || cols < 1 || ld < cols)
        return vit_fail(VIT_EINVAL, "vit_arch_bf16_add: %s: %s: a %d x %d matrix with row "
                        "stride %d (rows and cols at least 1, the stride at least cols)", an,
                        t->name, rows, cols, ld);
    if (use < VIT_ARCH_BF16_AS_IS || use > VIT_ARCH_BF16_BOTH)
        return vit_fail(VIT_EINVAL, "vit_arch_bf16_add: %s: %s: use %d is not "
                        "VIT_ARCH_BF16_AS_IS, _TRANSPOSED or _BOTH", an, t->name, use);
    size_t extent = (size_t)(rows - 1) * (size_t)ld + (size_t)cols;
    if (offset > t->size || extent > t->size - offset)
        return vit_fail(VIT_EINVAL, "vit_arch_bf16_add: %s: %s: a %d x %d matrix from value %zu "
                        "with row stride %d runs past its %zu values", an, t->name, rows, cols,
                        offset, ld, t->size);
    /* The float32 library's values (the float64 one never gets here:
     * bf16 resolves to fp32 there, vit_precision_resolve). */
    const float *B = (const float *)(vit_params_values(set->p) + t->offset + offset);
    if (use & VIT_ARCH_BF16_AS_IS) /* y = x W: op(B) = W [rows, cols] */
        TRY(vit_mixed_weights_add(set->w, 0, rows, cols, B, ld));
    if (use & VIT_ARCH_BF16_TRANSPOSED) /* dx = dy W^T: op(B) = W^T [cols, rows] */
        TRY(vit_mixed_weights_add(set->w, 1, cols, rows, B, ld));
    return VIT_OK;
}

int vit_arch_bf16_layout(const vit_arch *a, const vit_config *cfg, const void *state,
                         vit_params *p, vit_mixed_weights **out)
{
    *out = NULL;
    if (!a->bf16_weights)
        return vit_fail(VIT_EINVAL, "precision: bf16 is implemented for architectures that "
                        "declare their bf16 weights (vit_arch.bf16_weights), not %s (use fp32)",
                        a->name);
    vit_arch_bf16 set = {a, p, vit_mixed_weights_new()};
    if (!set.w)
        return VIT_ENOMEM; /* its message recorded */
    int rc = a->bf16_weights(cfg, state, p, &set);
    if (rc != VIT_OK) {
        vit_mixed_weights_free(set.w);
        return rc;
    }
    *out = set.w;
    return VIT_OK;
}
