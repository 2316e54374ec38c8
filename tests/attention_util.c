/* Shared by the attention suites; see attention_util.h. */
#include "attention_util.h"

vit_sdpa sdpa_shape(int B, int H, int nq, int nk, int dk, int dv)
{
    vit_sdpa a;
    memset(&a, 0, sizeof a);
    a.batch = B;
    a.heads = H;
    a.n_q = nq;
    a.n_k = nk;
    a.d_k = dk;
    a.d_v = dv;
    return a;
}

int ref_allowed(const vit_sdpa *a, int b, int i, int j)
{
    const vit_attn_mask *m = &a->mask;
    if (m->causal && j > i)
        return 0;
    if (m->key_valid && !m->key_valid[b * a->n_k + j])
        return 0;
    if (m->allowed) {
        size_t off = m->allowed_per_item ? (size_t)b * a->n_q * a->n_k : 0;
        if (!m->allowed[off + (size_t)i * a->n_k + j])
            return 0;
    }
    return 1;
}
