/*
 * seq_consumer - the causal sequence model of examples/seq_model.c built the
 * way a user builds their own model: test_install compiles this file and
 * examples/seq_model.c against an installed libvit with nothing but
 * `pkg-config --cflags --libs vit`, so the model must be writable from the
 * public headers alone (tape, custom op, parameters, optimizer).  It trains
 * reversal of 5 digits for STEPS steps and checks that the loss goes down:
 * near ln 10 = 2.303 at the start (small weights: almost uniform logits),
 * the mean of the last 5 steps under a third of that (measured: 2.31 and
 * 0.23 at 40 steps), all finite; then prints PASS.  No libm: those flags
 * do not link it.
 */
#include <stdio.h>
#include <stdlib.h>

#include "../examples/seq_model.h"

enum { STEPS = 40, LAST = 5 };

int main(void)
{
    seq_config c;
    seq_config_default(&c);
    c.steps = STEPS;
    seq_model *m = seq_model_new(&c);
    int *tokens = malloc((size_t)c.batch * 2 * c.len * sizeof *tokens);
    int *labels = malloc((size_t)c.batch * c.len * sizeof *labels);
    if (!m || !tokens || !labels) {
        printf("FAIL seq_model_new: %s\n", vit_last_error());
        return 1;
    }
    printf("seq_model: %zu parameters, %d steps of %d sequences\n", seq_model_param_count(m),
           STEPS, c.batch);
    vit_rng rng;
    vit_rng_seed(&rng, 99);
    double first = 0, last = 0;
    for (int s = 0; s < STEPS; s++) {
        double loss = -1;
        seq_make_batch(&c, &rng, 0, c.batch, tokens, labels);
        int rc = seq_train_step(m, tokens, labels, c.batch,
                                vit_lr_at(s, STEPS, STEPS / 20, c.lr, c.lr / 10), &loss);
        if (rc != VIT_OK || !(loss >= 0 && loss < 100)) {
            printf("FAIL step %d: rc %d, loss %g: %s\n", s + 1, rc, loss, vit_last_error());
            return 1;
        }
        if (s == 0)
            first = loss;
        if (s >= STEPS - LAST)
            last += loss / LAST;
        if (s == 0 || (s + 1) % 10 == 0)
            printf("step %2d  loss %.4f\n", s + 1, loss);
    }
    int ok_first = first > 2.2 && first < 2.4, ok_last = last < first / 3;
    printf("%-4s first loss %.4f (ln 10 = 2.3026)\n", ok_first ? "ok" : "FAIL", first);
    printf("%-4s mean loss of the last %d steps %.4f (< first / 3)\n", ok_last ? "ok" : "FAIL",
           LAST, last);
    seq_model_free(m);
    free(tokens);
    free(labels);
    if (!ok_first || !ok_last)
        return 1;
    printf("PASS\n");
    return 0;
}
