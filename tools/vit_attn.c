/*
 * vit_attn - draw what a trained model attends to: the input image and, for
 * every layer (rows) and head (columns), the attention of the class token
 * (or of one patch) over the patch grid as a heat map laid over the input,
 * into one PNG, labelled with the predicted class.
 */
#include <limits.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "figures.h"
#include "vit/vit.h"

static const char *prog = "vit_attn";

static void usage(void)
{
    printf("usage: vit_attn CKPT (--digit N | IMAGE) [--fit] [--query cls|R,C] [--out FILE.png]\n"
           "                [--data SPEC] [--scale absolute|figure|map]\n"
           "Runs the model of checkpoint CKPT on one image, either image N of the test split\n"
           "of --data (default: the data the run trained on) or a PNG or JPEG file, read\n"
           "and fitted as vit_predict does (of the model's size and channels, or with\n"
           "--fit, or when the run fitted its own images, converted and resized to\n"
           "them), and writes a PNG (default attention.png) with the image and, per layer\n"
           "(rows) and head (columns), the attention weights of the query over the patch\n"
           "grid as a heat map blended over the image, each captioned with its smallest and\n"
           "largest weight.  --query cls (default) uses the class token; --query R,C uses\n"
           "the patch in row R, column C of the grid (0-based), outlined in the picture.\n"
           "--scale: the weight at the top of the colour ramp: absolute (default) 1, the\n"
           "same on every map and in every picture, so spread-out attention stays dark;\n"
           "figure: the largest weight of any map in the picture; map: each map's own\n"
           "largest (every map then looks peaked, however flat it is).\n"
           "CKPT may be a run's folder: its best.ckpt when the run kept one, else\n"
           "last.ckpt.\n"
           "Also prints, per map, its range and the patch with the largest weight.\n");
}

/* What the options set (digit -1: none given). */
typedef struct attn_opts {
    const char *out, *data, *qtext;
    int digit, scale, fit;
} attn_opts;

static int read_option(void *user, const char *a, const char *v)
{
    attn_opts *o = user;
    if (strcmp(a, "--fit") == 0)
        o->fit = 1;
    else if (strcmp(a, "--digit") == 0) {
        if (!cli_int(prog, a, v, 0, 1 << 30, &o->digit))
            return 2;
    } else if (strcmp(a, "--query") == 0)
        o->qtext = v;
    else if (strcmp(a, "--out") == 0)
        o->out = v;
    else if (strcmp(a, "--data") == 0)
        o->data = v;
    else if (strcmp(a, "--scale") == 0) {
        if (strcmp(v, "absolute") == 0)
            o->scale = FIG_SCALE_ABSOLUTE;
        else if (strcmp(v, "figure") == 0)
            o->scale = FIG_SCALE_FIGURE;
        else if (strcmp(v, "map") == 0)
            o->scale = FIG_SCALE_MAP;
        else {
            fprintf(stderr, "%s: --scale: expected absolute, figure or map, got '%s'\n", prog, v);
            return 2;
        }
    } else
        return cli_unknown_option(prog, a);
    return -1;
}

/* The name of class cls, as printed in the picture and on stdout: the
 * checkpoint's name for it (the digit itself for digits and IDX). */
static void class_name(char *buf, size_t cap, const vit_run_state *st, int cls)
{
    if (cls >= 0 && cls < st->nclass_names)
        snprintf(buf, cap, "%s", st->class_names[cls]);
    else
        snprintf(buf, cap, "%d", cls);
}

/* Where the model's architecture keeps its attention maps (vit/arch.h):
 * set once the model is loaded. */
static vit_arch_info A;
static vit_arch_attn L0; /* layer 0's maps: every layer's shape (a ViT's) */

/* The model's token grid (overlapping patches included). */
static void config_grid(const vit_config *c, int *gh, int *gw)
{
    (void)c;
    *gh = L0.grid_h;
    *gw = L0.grid_w;
}

/* Parses "cls" (query -1) or "R,C" into a patch index on a gh x gw grid. */
static int parse_query(const char *text, int gh, int gw, int *query)
{
    if (strcmp(text, "cls") == 0) {
        *query = -1;
        return 1;
    }
    char *e1, *e2;
    errno = 0;
    long r = strtol(text, &e1, 10), c = -1;
    int ok = e1 != text && *e1 == ',';
    if (ok) {
        c = strtol(e1 + 1, &e2, 10);
        ok = e2 != e1 + 1 && *e2 == 0 && errno == 0;
    }
    if (!ok) {
        fprintf(stderr, "%s: --query: expected cls or R,C (patch row and column), got '%s'\n",
                prog, text);
        return 0;
    }
    if (r < 0 || r >= gh || c < 0 || c >= gw) {
        fprintf(stderr, "%s: --query: patch (%ld,%ld) is outside the %dx%d patch grid (rows 0..%d, "
                "columns 0..%d)\n", prog, r, c, gh, gw, gh - 1, gw - 1);
        return 0;
    }
    *query = (int)(r * gw + c);
    return 1;
}

/* The image to look at, [H, W, C] as the model expects, malloc'd into *px.
 * Exactly one of file and digit >= 0 is given; a file is read and fitted
 * as vit_predict does (fit: --fit, or a run that fitted its images). */
static int load_image(const vit_config *c, const char *file, int fit, int digit, const char *data,
                      const vit_data_opts *how, vit_real **px, int *label)
{
    size_t n = (size_t)c->image_height * c->image_width * c->channels;
    *label = -1;
    if (file)
        return (*px = cli_model_image(prog, file, c, fit)) == NULL;
    vit_dataset train = {0}, test = {0};
    int rc = 1;
    if (cli_load_data(prog, data, how, &train, &test))
        ;
    else if (digit >= test.count)
        fprintf(stderr, "%s: --digit: %d is out of range; the test split of %s has images 0..%d\n",
                prog, digit, data, test.count - 1);
    else if (test.height != c->image_height || test.width != c->image_width ||
             test.channels != c->channels)
        fprintf(stderr, "%s: %s: images are %dx%dx%d but the model expects %dx%dx%d\n", prog, data,
                test.height, test.width, test.channels, c->image_height, c->image_width,
                c->channels);
    else if (!(*px = malloc(n * sizeof **px)))
        fprintf(stderr, "%s: out of memory\n", prog);
    else {
        memcpy(*px, test.images + (size_t)digit * n, n * sizeof **px);
        *label = test.labels[digit];
        rc = 0;
    }
    vit_dataset_free(&train);
    vit_dataset_free(&test);
    return rc;
}

/* Runs the model on one image and copies each layer's and head's query row,
 * without the class token's column, into maps [layers, heads, gh*gw].
 * Returns the predicted class and its probability. */
static int attention_rows(vit_model *m, const vit_real *px, int query, vit_real *maps,
                          int *pred, double *prob)
{
    const vit_config *c = vit_model_config(m);
    int gh, gw;
    config_grid(c, &gh, &gw);
    int T = L0.keys, first = L0.first, n = gh * gw;
    int q = query < 0 ? 0 : query + first;
    vit_tape *tape = vit_tape_new();
    if (!tape)
        return cli_fail(prog, NULL);
    vit_tensor *logits = vit_model_forward(m, tape, px, 1, 0);
    if (!logits || vit_tape_status(tape)) {
        vit_tape_free(tape);
        return cli_fail(prog, "forward");
    }
    int best = 0;
    double sum = 0;
    for (int k = 0; k < c->classes; k++)
        if (logits->data[k] > logits->data[best])
            best = k;
    for (int k = 0; k < c->classes; k++)
        sum += exp((double)(logits->data[k] - logits->data[best]));
    *pred = best;
    *prob = 1 / sum;
    for (int l = 0; l < A.attn_layers; l++) {
        const vit_real *a = vit_model_attention_maps(m, l);
        for (int h = 0; h < L0.heads && a; h++) {
            const vit_real *row = a + ((size_t)h * L0.queries + (size_t)q) * (size_t)T;
            memcpy(maps + ((size_t)l * L0.heads + h) * (size_t)n, row + first,
                   (size_t)n * sizeof *maps);
        }
    }
    vit_tape_free(tape);
    return 0;
}

/* One line per map: its range and where the weight goes. */
static void print_summary(const vit_config *c, const vit_real *maps, int gw)
{
    int gh, gw_;
    config_grid(c, &gh, &gw_);
    int n = gh * gw;
    (void)c;
    for (int l = 0; l < A.attn_layers; l++)
        for (int h = 0; h < L0.heads; h++) {
            const vit_real *w = maps + ((size_t)l * L0.heads + h) * (size_t)n;
            int best = 0, least = 0;
            double patches = 0;
            for (int i = 0; i < n; i++) {
                patches += (double)w[i];
                best = w[i] > w[best] ? i : best;
                least = w[i] < w[least] ? i : least;
            }
            /* fmax: rounding can make the patches' sum exceed 1 by an ulp,
             * which would print as -0.000. */
            printf("L%d H%d: weights %.3f-%.3f, largest on patch (%d,%d); class token %.3f\n", l,
                   h, (double)w[least], (double)w[best], best / gw, best % gw,
                   fmax(0, 1 - patches));
        }
}

int main(int argc, char **argv)
{
    cli_ignore_file_size_signal();
    const char *ckpt = NULL, *png = NULL;
    attn_opts o = {.out = "attention.png", .qtext = "cls", .digit = -1,
                   .scale = FIG_SCALE_ABSOLUTE};
    static const cli_flag flags[] = {{"--digit", 1}, {"--query", 1}, {"--out", 1}, {"--data", 1},
                                     {"--scale", 1}, {"--fit", 0}, {"--help", 0}, {"--version", 0},
                                     {NULL, 0}};
    const char **pos[] = {&ckpt, &png};
    int exit_rc = cli_options(prog, &argc, &argv, flags, usage, pos, 2, read_option, &o);
    if (exit_rc >= 0)
        return exit_rc;
    const char *out = o.out, *data = o.data, *qtext = o.qtext;
    int digit = o.digit, scale = o.scale, fit = o.fit;
    if (!ckpt) {
        fprintf(stderr, "%s: no checkpoint given (see --help)\n", prog);
        return 2;
    }
    if ((digit >= 0) == (png != NULL)) {
        fprintf(stderr, "%s: give exactly one image: --digit N or a PNG or JPEG file\n", prog);
        return 2;
    }

    char ckpt_path[PATH_MAX + 16]; /* a run folder's checkpoint */
    if (!(ckpt = cli_run_checkpoint(prog, NULL, ckpt, 0, ckpt_path, sizeof ckpt_path)))
        return 2;
    vit_model *m = NULL;
    vit_run_state st;
    if (vit_run_load(ckpt, &m, NULL, NULL, &st))
        return cli_fail(prog, NULL);
    /* Without --data: the data (and split) the checkpoint's run trained on. */
    vit_data_opts how;
    data = cli_data_of_run(&st.data, st.has_data, data, &how);
    const vit_config *c = vit_model_config(m);
    A = *vit_model_info(m);
    if (A.attn_layers >= 1)
        L0 = *vit_model_attention_layer(m, 0);
    if (A.attn_layers < 1) {
        fprintf(stderr, "%s: %s: this %s model keeps no attention maps to draw\n", prog, ckpt,
                vit_model_arch(m)->name);
        vit_model_free(m);
        vit_run_state_free(&st);
        return 1;
    }
    int gh, gw, query = -1, label = -1, pred = 0;
    config_grid(c, &gh, &gw);
    double prob = 0;
    vit_real *px = NULL, *maps = NULL;
    draw_canvas canvas = {0};
    int rc = 1;
    if (!parse_query(qtext, gh, gw, &query) ||
        load_image(c, png, fit || cli_run_fits(&st), digit, data, &how, &px, &label))
        goto done;
    if (query < 0 && !L0.cls) {
        fprintf(stderr, "%s: --query cls: a %s model has no class token; give --query R,C\n",
                prog, vit_model_arch(m)->name);
        goto done;
    }
    maps = malloc((size_t)A.attn_layers * L0.heads * gh * gw * sizeof *maps);
    if (!maps) {
        fprintf(stderr, "%s: out of memory\n", prog);
        goto done;
    }
    if (attention_rows(m, px, query, maps, &pred, &prob))
        goto done;

    char pred_name[64], label_name[64], title[192], source[128], qline[64], pline[96];
    class_name(pred_name, sizeof pred_name, &st, pred);
    class_name(label_name, sizeof label_name, &st, label);
    if (png)
        snprintf(source, sizeof source, "image: %.80s", strrchr(png, '/') ? strrchr(png, '/') + 1 : png);
    else
        snprintf(source, sizeof source, "test image %d, label %s", digit, label_name);
    if (query < 0)
        snprintf(qline, sizeof qline, "query: class token");
    else
        snprintf(qline, sizeof qline, "query: patch (%d,%d)", query / gw, query % gw);
    snprintf(title, sizeof title, "Predicted %s (p = %.3f): attention, rows = layers, "
             "columns = heads", pred_name, prob);
    snprintf(pline, sizeof pline, "heat over the input at %.0f%%", FIG_ATTN_ALPHA * 100);
    fig_attn f = {.image = px, .height = c->image_height, .width = c->image_width,
                  .channels = c->channels, .grid_h = gh, .grid_w = gw, .layers = A.attn_layers,
                  .heads = L0.heads, .maps = maps, .scale = scale, .query = query, .title = title,
                  .notes = {source, qline, pline,
                            scale == FIG_SCALE_MAP      ? "colour: 0 to each map's own largest weight"
                            : scale == FIG_SCALE_FIGURE ? "colour: 0 to the largest weight shown"
                                                        : "colour: weight 0 to 1, on every map"}};
    fig_attn_layout lay;
    if (fig_attn_draw(&f, &canvas, &lay)) {
        cli_fail(prog, NULL);
        goto done;
    }
    if (draw_save_png(&canvas, out)) {
        cli_fail(prog, NULL);
        goto done;
    }
    printf("%s: predicted %s (p = %.3f)%s\n", png ? png : "test image", pred_name, prob,
           label >= 0 ? (label == pred ? ", correct" : ", wrong") : "");
    print_summary(c, maps, gw);
    const char *scale_name[] = {"absolute", "figure", "map"};
    printf("wrote %s (%dx%d pixels): %d layers x %d heads, query %s, scale %s\n", out, lay.width,
           lay.height, A.attn_layers, L0.heads, qtext, scale_name[scale]);
    rc = 0;
done:
    draw_canvas_free(&canvas);
    free(maps);
    free(px);
    vit_run_state_free(&st);
    vit_model_free(m);
    return rc;
}
