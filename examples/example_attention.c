#include <stdio.h>
#include <stdlib.h>
#include <vit/vit.h>

int main(void)
{
    /* Self-attention over 2 images of 5 tokens of width 8, 2 heads. */
    vit_mha m = {.batch = 2, .n_q = 5, .n_k = 5, .d_model = 8, .heads = 2, .has_bias = 1};
    m.mask.causal = 1;                         /* query i sees keys 0..i */
    size_t np = vit_mha_param_count(&m);       /* 4*8*8 + 4*8 = 288 */
    vit_real *w = calloc(np, sizeof *w), *dw = calloc(np, sizeof *dw);
    vit_real x[2 * 5 * 8], y[2 * 5 * 8], dx[2 * 5 * 8] = {0}, dy[2 * 5 * 8];
    vit_real *cache = malloc(vit_mha_cache_size(&m) * sizeof *cache);
    for (size_t i = 0; i < np; i++) w[i] = (vit_real)((int)(i % 7) - 3) / 10;
    for (int i = 0; i < 80; i++) { x[i] = (vit_real)(i % 5) / 5; dy[i] = 1; }

    if (vit_mha_forward(&m, w, y, x, x, cache) != VIT_OK ||
        vit_mha_backward(&m, w, dw, dx, dx, NULL, dy, x, x, cache, NULL) != VIT_OK) {
        fprintf(stderr, "attention: %s\n", vit_last_error());
        return 1;
    }
    const vit_real *maps = vit_mha_probs(&m, cache);   /* [B, H, n_q, n_k] */
    printf("y[0] = %g, weight of token 0 on itself = %g, dW_Q[0] = %g\n",
           (double)y[0], (double)maps[0], (double)dw[0]);
    free(w); free(dw); free(cache);
    return 0;
}
