/*
 * vit_predict - classify PNG files with a checkpoint; prints, per file, the
 * most likely class and its probability.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "vit/vit.h"

static const char *prog = "vit_predict";

int main(int argc, char **argv)
{
    static const cli_flag flags[] = {{"--help", 0}, {"--version", 0}, {NULL, 0}};
    if (!cli_normalize(prog, &argc, &argv, flags, 0))
        return 2;
    if (argc < 2 || strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0) {
        printf("usage: vit_predict CKPT IMAGE.png...\n"
               "Classifies each PNG (same size and channels as the training images; pixel\n"
               "values scaled to [0, 1] as in training) and prints: file class probability,\n"
               "the class by the name the checkpoint holds (the class folder name for PNG\n"
               "folders; the digit for digits and IDX).\n");
        return argc < 2 ? 2 : 0;
    }
    if (strcmp(argv[1], "--version") == 0) {
        printf("vit_predict %s (%s)\n", vit_version(), VIT_REAL_NAME);
        return 0;
    }
    if (argc < 3) {
        fprintf(stderr, "%s: no image given (see --help)\n", prog);
        return 2;
    }
    vit_model *m = NULL;
    vit_run_state st;
    if (vit_run_load(argv[1], &m, NULL, &st))
        return cli_fail(prog, NULL);
    const vit_config *c = vit_model_config(m);
    vit_tape *tape = vit_tape_new();
    vit_real *probs = malloc((size_t)c->classes * sizeof *probs);
    int failures = 0;
    for (int i = 2; tape && probs && i < argc; i++) {
        vit_real *px = NULL;
        int h, w, ch;
        if (vit_png_read(argv[i], &px, &h, &w, &ch)) {
            cli_fail(prog, NULL);
            failures++;
            continue;
        }
        if (h != c->image_height || w != c->image_width || ch != c->channels) {
            fprintf(stderr, "%s: %s: image is %dx%dx%d but the model expects %dx%dx%d\n", prog,
                    argv[i], h, w, ch, c->image_height, c->image_width, c->channels);
            failures++;
        } else if (vit_predict(m, tape, px, 1, probs)) {
            cli_fail(prog, argv[i]);
            failures++;
        } else {
            int best = 0;
            for (int k = 1; k < c->classes; k++)
                if (probs[k] > probs[best])
                    best = k;
            printf("%s %s %.4f\n", argv[i], st.class_names[best], (double)probs[best]);
        }
        free(px);
    }
    if (!tape || !probs)
        failures += cli_fail(prog, "out of memory");
    free(probs);
    vit_tape_free(tape);
    vit_run_state_free(&st);
    vit_model_free(m);
    return failures ? 1 : 0;
}
