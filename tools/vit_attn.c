/*
 * vit_attn - draw what a trained model attends to: the input image and, for
 * every layer (rows) and head (columns), the attention of the class token
 * (or of one patch) over the layer's patch grid as a heat map laid over the
 * input, into one PNG, labelled with the predicted class.  A model whose
 * layers have grids of their own (a Swin's stages) draws each row on its
 * layer's grid, the query the patch under the same image location.
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
           "                [--data SPEC] [--scale absolute|figure|map] [--force]\n"
           "Runs the model of checkpoint CKPT on one image, either image N of the test split\n"
           "of --data (default: the data the run trained on) or a PNG or JPEG file, read\n"
           "and fitted as vit_predict does (of the model's size and channels, or with\n"
           "--fit, or when the run fitted its own images, converted and resized to\n"
           "them), and writes a PNG (default attention.png; an existing file is replaced\n"
           "only with --force) with the image and, per layer\n"
           "(rows) and head (columns), the attention weights of the query over the patch\n"
           "grid as a heat map blended over the image, each captioned with its smallest and\n"
           "largest weight.  --query cls uses the class token (the default when the model\n"
           "has one); --query R,C the patch in row R, column C of the grid (0-based),\n"
           "outlined in the picture.  A model without a class token (swin) refuses cls\n"
           "and by default takes the centre patch (rows/2, columns/2).  A Swin draws one\n"
           "row per block, labelled with its stage and whether its windows shift, each\n"
           "on its stage's grid (zero outside the query's window); R,C are on the first\n"
           "stage's grid and stage s uses patch (R/2^s, C/2^s), the one covering the same\n"
           "pixels; a stage with fewer heads leaves its row's last columns empty.\n"
           "--scale: the weight at the top of the colour ramp: absolute (default) 1, the\n"
           "same on every map and in every picture, so spread-out attention stays dark;\n"
           "figure: the largest weight of any map in the picture; map: each map's own\n"
           "largest (every map then looks peaked, however flat it is).\n"
           "CKPT may be a run's folder: its best.ckpt when the run kept one, else\n"
           "last.ckpt.\n"
           "Also prints, per map, its range and the patch with the largest weight (on its\n"
           "layer's grid).\n");
}

/* What the options set (digit -1: none given). */
typedef struct attn_opts {
    const char *out, *data, *qtext;
    int digit, scale, fit, force;
} attn_opts;

static int read_option(void *user, const char *a, const char *v)
{
    attn_opts *o = user;
    if (strcmp(a, "--fit") == 0)
        o->fit = 1;
    else if (strcmp(a, "--force") == 0)
        o->force = 1;
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

/* The model's attention layers (vit/arch.h), set once it is loaded: their
 * count, each one's shape and grid, and the per-layer fields of the figure
 * (fig_attn: grids, maps drawn, query patch, heading). */
enum { MAX_LAYERS = 1000 }; /* the figure's limit */
static int nl;
static const vit_arch_attn *AL[MAX_LAYERS];
static int lgh[MAX_LAYERS], lgw[MAX_LAYERS], lheads[MAX_LAYERS], lquery[MAX_LAYERS];
static char lname[MAX_LAYERS][80];
static const char *lnames[MAX_LAYERS];

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

/* Runs the model on one image and copies each layer's and head's query row
 * over its grid (the class token's column left out) into maps, layer after
 * layer (fig_attn_map's layout).  query: -1 the class token, else a patch
 * of layer 0's grid, taken in layer l as the patch of its grid under the
 * same image location (lquery[l]).  Returns the predicted class and its
 * probability. */
static int attention_rows(vit_model *m, const vit_real *px, vit_real *maps, int *pred,
                          double *prob)
{
    const vit_config *c = vit_model_config(m);
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
    vit_real *to = maps;
    for (int l = 0; l < nl; l++) {
        const vit_arch_attn *a = AL[l];
        const vit_real *m_l = vit_model_attention_maps(m, l);
        int n = a->grid_h * a->grid_w, q = lquery[l] < 0 ? 0 : lquery[l] + a->first;
        for (int h = 0; h < a->heads; h++, to += n)
            if (m_l)
                memcpy(to, m_l + ((size_t)h * a->queries + (size_t)q) * (size_t)a->keys + a->first,
                       (size_t)n * sizeof *maps);
            else
                memset(to, 0, (size_t)n * sizeof *maps);
    }
    vit_tape_free(tape);
    return 0;
}

/* One line per map: its range and where the weight goes on its grid; a
 * layer with a label names it and its grid, one with a class token says
 * how much weight that keeps. */
static void print_summary(const vit_real *maps)
{
    const vit_real *w = maps;
    for (int l = 0; l < nl; l++) {
        const vit_arch_attn *a = AL[l];
        int n = a->grid_h * a->grid_w;
        for (int h = 0; h < a->heads; h++, w += n) {
            int best = 0, least = 0;
            double patches = 0;
            for (int i = 0; i < n; i++) {
                patches += (double)w[i];
                best = w[i] > w[best] ? i : best;
                least = w[i] < w[least] ? i : least;
            }
            char what[96] = "";
            if (a->label[0])
                snprintf(what, sizeof what, " (%s, %dx%d grid)", a->label, a->grid_h, a->grid_w);
            printf("L%d H%d%s: weights %.3f-%.3f, largest on patch (%d,%d)", l, h, what,
                   (double)w[least], (double)w[best], best / a->grid_w, best % a->grid_w);
            /* fmax: rounding can make the patches' sum exceed 1 by an ulp,
             * which would print as -0.000. */
            if (a->first)
                printf("; class token %.3f", fmax(0, 1 - patches));
            putchar('\n');
        }
    }
}

int main(int argc, char **argv)
{
    cli_ignore_file_size_signal();
    const char *ckpt = NULL, *png = NULL;
    attn_opts o = {.out = "attention.png", .qtext = NULL, .digit = -1,
                   .scale = FIG_SCALE_ABSOLUTE};
    static const cli_flag flags[] = {{"--digit", 1}, {"--query", 1}, {"--out", 1}, {"--data", 1},
                                     {"--scale", 1}, {"--fit", 0}, {"--force", 0}, {"--help", 0},
                                     {"--version", 0}, {NULL, 0}};
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
    if (cli_refuse_existing(prog, "--out", out, o.force))
        return 2;

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
    nl = vit_model_info(m)->attn_layers;
    if (nl < 1) {
        fprintf(stderr, "%s: %s: this %s model keeps no attention maps to draw\n", prog, ckpt,
                vit_model_arch(m)->name);
        vit_model_free(m);
        vit_run_state_free(&st);
        return 1;
    }
    if (nl > MAX_LAYERS) {
        fprintf(stderr, "%s: %s: %d attention layers are more than a picture holds (%d)\n",
                prog, ckpt, nl, MAX_LAYERS);
        vit_model_free(m);
        vit_run_state_free(&st);
        return 1;
    }
    /* uniform: every layer on one grid with the same heads (a ViT): the
     * picture and lines as before layers had shapes of their own */
    int cls = 1, heads = 0, uniform = 1, named = 0;
    size_t nmaps = 0;
    for (int l = 0; l < nl; l++) {
        const vit_arch_attn *a = AL[l] = vit_model_attention_layer(m, l);
        cls &= a->cls;
        heads = a->heads > heads ? a->heads : heads;
        uniform &= a->grid_h == AL[0]->grid_h && a->grid_w == AL[0]->grid_w &&
                   a->heads == AL[0]->heads;
        named |= a->label[0] != 0;
        nmaps += (size_t)a->heads * a->grid_h * a->grid_w;
        lgh[l] = a->grid_h, lgw[l] = a->grid_w, lheads[l] = a->heads;
        snprintf(lname[l], sizeof lname[l], "L%d %s", l, a->label);
        lnames[l] = a->label[0] ? lname[l] : NULL;
    }
    int gh = AL[0]->grid_h, gw = AL[0]->grid_w, query = -1, label = -1, pred = 0;
    double prob = 0;
    vit_real *px = NULL, *maps = NULL;
    draw_canvas canvas = {0};
    int rc = 1;
    char qauto[32] = ""; /* the centre patch, when no --query was given */
    if (!qtext && cls)
        qtext = "cls";
    else if (!qtext) {
        snprintf(qauto, sizeof qauto, "%d,%d", gh / 2, gw / 2);
        qtext = qauto;
    }
    if (!parse_query(qtext, gh, gw, &query) ||
        load_image(c, png, fit || cli_run_fits(&st), digit, data, &how, &px, &label))
        goto done;
    if (query < 0 && !cls) {
        fprintf(stderr, "%s: --query cls: a %s model has no class token; give --query R,C (a "
                "patch of its first %dx%d grid), or leave --query out for the centre patch "
                "(%d,%d)\n", prog, vit_model_arch(m)->name, gh, gw, gh / 2, gw / 2);
        goto done;
    }
    for (int l = 0; l < nl; l++) /* the patch under the same pixels on layer l's grid */
        lquery[l] = query < 0 ? -1 : query / gw * lgh[l] / gh * lgw[l] + query % gw * lgw[l] / gw;
    maps = malloc(nmaps * sizeof *maps);
    if (!maps) {
        fprintf(stderr, "%s: out of memory\n", prog);
        goto done;
    }
    if (attention_rows(m, px, maps, &pred, &prob))
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
    else if (uniform)
        snprintf(qline, sizeof qline, "query: patch (%d,%d)", query / gw, query % gw);
    else
        snprintf(qline, sizeof qline, "query: patch (%d,%d) of the %dx%d grid%s", query / gw,
                 query % gw, gh, gw, qauto[0] ? " (centre)" : "");
    snprintf(title, sizeof title, "Predicted %s (p = %.3f): attention, rows = layers, "
             "columns = heads", pred_name, prob);
    snprintf(pline, sizeof pline, "heat over the input at %.0f%%", FIG_ATTN_ALPHA * 100);
    fig_attn f = {.image = px, .height = c->image_height, .width = c->image_width,
                  .channels = c->channels, .grid_h = gh, .grid_w = gw, .layers = nl,
                  .heads = heads, .maps = maps, .scale = scale, .query = query, .title = title,
                  .layer_grid_h = lgh, .layer_grid_w = lgw, .layer_heads = lheads,
                  .layer_query = lquery, .layer_names = named ? lnames : NULL,
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
    print_summary(maps);
    const char *scale_name[] = {"absolute", "figure", "map"};
    char hs[32];
    if (uniform)
        snprintf(hs, sizeof hs, "%d", heads);
    else
        snprintf(hs, sizeof hs, "up to %d", heads);
    printf("wrote %s (%dx%d pixels): %d layers x %s heads, query %s%s, scale %s\n", out,
           lay.width, lay.height, nl, hs, qtext, qauto[0] ? " (centre)" : "", scale_name[scale]);
    rc = 0;
done:
    draw_canvas_free(&canvas);
    free(maps);
    free(px);
    vit_run_state_free(&st);
    vit_model_free(m);
    return rc;
}
