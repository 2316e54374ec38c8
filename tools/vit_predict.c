/*
 * vit_predict - classify PNG or JPEG files with a checkpoint; prints, per
 * file, the most likely classes and their probabilities.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "vit/vit.h"

static const char *prog = "vit_predict";

static void usage(void)
{
    printf("usage: vit_predict [--fit] [--topk K] CKPT IMAGE...\n"
           "Classifies each PNG or JPEG (pixel values scaled to [0, 1] as in training)\n"
           "and prints: file class probability, the class by the name the checkpoint\n"
           "holds (the class folder name for class folders; the digit for digits and\n"
           "IDX).  Images must have the model's size and channels unless --fit is given.\n"
           "  --fit       convert gray<->RGB (RGB to gray by BT.601 luma) and resize to\n"
           "              the model's size with a bilinear (triangle) filter, widened\n"
           "              when shrinking (vit_image_fit)\n"
           "  --topk K    print the K most likely classes, most likely first: file\n"
           "              class1 p1 class2 p2 ... (default 1)\n");
}

/* Indices of the k largest probabilities, largest first (ties: lower
 * index first). */
static void top_k(const vit_real *p, int n, int k, int *out)
{
    for (int j = 0; j < k; j++) {
        int best = -1;
        for (int c = 0; c < n; c++) {
            int used = 0;
            for (int i = 0; i < j; i++)
                used |= out[i] == c;
            if (!used && (best < 0 || p[c] > p[best]))
                best = c;
        }
        out[j] = best;
    }
}

/* The image at path as the model c expects it, or NULL (reported). */
static vit_real *load_image(const char *path, const vit_config *c, int fit)
{
    vit_real *px = NULL, *fitted;
    int h, w, ch;
    if (vit_image_read(path, &px, &h, &w, &ch)) {
        cli_fail(prog, NULL);
        return NULL;
    }
    if (h == c->image_height && w == c->image_width && ch == c->channels)
        return px;
    if (!fit) {
        fprintf(stderr, "%s: %s: image is %dx%dx%d but the model expects %dx%dx%d (--fit "
                "converts and resizes)\n", prog, path, h, w, ch, c->image_height,
                c->image_width, c->channels);
        free(px);
        return NULL;
    }
    fitted = malloc((size_t)c->image_height * (size_t)c->image_width * (size_t)c->channels *
                    sizeof *fitted);
    if (fitted == NULL || vit_image_fit(px, h, w, ch, fitted, c->image_height, c->image_width,
                                        c->channels)) {
        cli_fail(prog, fitted ? path : "out of memory");
        free(fitted);
        fitted = NULL;
    }
    free(px);
    return fitted;
}

int main(int argc, char **argv)
{
    static const cli_flag flags[] = {{"--help", 0}, {"--version", 0}, {"--fit", 0},
                                     {"--topk", 1}, {NULL, 0}};
    int fit = 0, k = 1, nimg = 0;
    const char *ckpt = NULL;
    if (!cli_normalize(prog, &argc, &argv, flags, 0))
        return 2;
    if (argc < 2) {
        usage();
        return 2;
    }
    char **images = calloc((size_t)argc, sizeof *images);
    if (images == NULL)
        return cli_fail(prog, "out of memory");
    for (int i = 1; i < argc; i++) {
        const char *value = NULL, *opt = argv[i];
        if (strncmp(opt, "--", 2) != 0 && strcmp(opt, "-h") != 0) {
            if (ckpt == NULL)
                ckpt = opt;
            else
                images[nimg++] = argv[i];
            continue;
        }
        int r = cli_arg(prog, argc, argv, &i, flags, usage, NULL, 0, &value);
        if (r >= 0) {
            free(images);
            return r;
        }
        if (strcmp(opt, "--fit") == 0) {
            fit = 1;
        } else if (strcmp(opt, "--topk") == 0) {
            char *end;
            long v = strtol(value, &end, 10);
            if (*value == '\0' || *end != '\0' || v < 1 || v > 1000000) {
                fprintf(stderr, "%s: --topk: expected a positive integer, got '%s'\n", prog,
                        value);
                free(images);
                return 2;
            }
            k = (int)v;
        }
    }
    if (nimg == 0) {
        fprintf(stderr, "%s: no image given (see --help)\n", prog);
        free(images);
        return 2;
    }
    vit_model *m = NULL;
    vit_run_state st;
    if (vit_run_load(ckpt, &m, NULL, &st)) {
        free(images);
        return cli_fail(prog, NULL);
    }
    const vit_config *c = vit_model_config(m);
    k = k < c->classes ? k : c->classes;
    vit_tape *tape = vit_tape_new();
    vit_real *probs = malloc((size_t)c->classes * sizeof *probs);
    int *best = malloc((size_t)k * sizeof *best);
    int failures = 0;
    for (int i = 0; tape && probs && best && i < nimg; i++) {
        vit_real *px = load_image(images[i], c, fit);
        if (px == NULL) {
            failures++;
        } else if (vit_predict(m, tape, px, 1, probs)) {
            cli_fail(prog, images[i]);
            failures++;
        } else {
            top_k(probs, c->classes, k, best);
            printf("%s", images[i]);
            for (int j = 0; j < k; j++)
                printf(" %s %.4f", st.class_names[best[j]], (double)probs[best[j]]);
            printf("\n");
        }
        free(px);
    }
    if (!tape || !probs || !best)
        failures += cli_fail(prog, "out of memory");
    free(best);
    free(probs);
    free(images);
    vit_tape_free(tape);
    vit_run_state_free(&st);
    vit_model_free(m);
    return failures ? 1 : 0;
}
