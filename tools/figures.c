/* The attention figure and the training curves; see figures.h. */
#include "figures.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const draw_rgb white = {255, 255, 255}, ink = {20, 20, 20}, grey = {110, 110, 110},
                      grid_rgb = {228, 228, 228}, query_rgb = {255, 64, 64};

const draw_rgb fig_train_loss_rgb = {31, 100, 200};
const draw_rgb fig_test_loss_rgb = {230, 110, 20};
const draw_rgb fig_test_acc_rgb = {30, 150, 60};
const draw_rgb fig_axis_rgb = {20, 20, 20};

static int imax(int a, int b) { return a > b ? a : b; }
static int ceil_div(int a, int b) { return (a + b - 1) / b; }

/* ======================================================================
 * Attention figure
 *
 *   title
 *   input
 *   [image]  [colour bar] max   notes...
 *                          0
 *   L0 H0  max 0.41  L0 H1  max 0.22  ...      one row per layer,
 *   [map over image] [map over image]          one column per head
 * ==================================================================== */

/* LABEL_H: a line of text (DRAW_GLYPH_H with descenders) and its gap. */
enum { MARGIN = 10, LABEL_H = 13, NOTE_PITCH = 13, GAP = 16, BAR_W = 12 };

static void map_label(char *buf, size_t cap, int layer, int head, double max)
{
    snprintf(buf, cap, "L%d H%d  max %.2f", layer, head, max);
}

int fig_attn_layout_of(const fig_attn *f, fig_attn_layout *lay)
{
    memset(lay, 0, sizeof *lay);
    const char *what = "attention figure";
    if (!f || !f->image || !f->maps)
        return vit_set_error(VIT_EINVAL, "%s: %s is NULL", what,
                             !f ? "figure" : !f->image ? "image" : "maps");
    if (f->grid_h <= 0 || f->grid_w <= 0 || f->layers <= 0 || f->heads <= 0)
        return vit_set_error(VIT_EINVAL,
                             "%s: grid %dx%d, %d layers, %d heads: all must be positive", what,
                             f->grid_h, f->grid_w, f->layers, f->heads);
    if (f->height <= 0 || f->width <= 0 || f->height % f->grid_h || f->width % f->grid_w)
        return vit_set_error(VIT_EINVAL, "%s: image %dx%d is not a whole number of %dx%d patches",
                             what, f->height, f->width, f->grid_h, f->grid_w);
    if (f->height / f->grid_h != f->width / f->grid_w)
        return vit_set_error(VIT_EINVAL, "%s: patches of %dx%d pixels are not square", what,
                             f->height / f->grid_h, f->width / f->grid_w);
    if (f->channels != 1 && f->channels != 3)
        return vit_set_error(VIT_EINVAL, "%s: channels must be 1 or 3, got %d", what, f->channels);
    if (f->query < -1 || f->query >= f->grid_h * f->grid_w)
        return vit_set_error(VIT_EINVAL, "%s: query patch %d is outside the %dx%d grid", what,
                             f->query, f->grid_h, f->grid_w);
    if (f->layers > 1000 || f->heads > 1000 || f->grid_h > 4096 || f->grid_w > 4096)
        return vit_set_error(VIT_EINVAL, "%s: too large (%d layers, %d heads, %dx%d grid)", what,
                             f->layers, f->heads, f->grid_h, f->grid_w);

    /* Nearest-neighbour upsampling of the image by a whole factor keeps
     * every patch one square of whole image pixels, at least
     * FIG_MAP_MIN_PX across in total. */
    lay->map_scale = ceil_div(FIG_MAP_MIN_PX, f->height < f->width ? f->height : f->width);
    lay->cell = f->height / f->grid_h * lay->map_scale;
    int map_w = lay->cell * f->grid_w, map_h = lay->cell * f->grid_h;
    char label[64];
    map_label(label, sizeof label, f->layers - 1, f->heads - 1, 0.99);
    lay->pitch_x = imax(map_w, draw_text_width(label, 1)) + GAP;
    lay->pitch_y = LABEL_H + map_h + GAP;

    int top = MARGIN + (f->title ? DRAW_GLYPH_H + 8 : 0);
    lay->image_scale = ceil_div(FIG_MAP_MIN_PX, imax(f->height, f->width));
    lay->image_x = MARGIN;
    lay->image_y = top + LABEL_H;
    int img_w = f->width * lay->image_scale, img_h = f->height * lay->image_scale;
    int notes_x = lay->image_x + img_w + GAP + BAR_W + 4 + draw_text_width("max", 1) + GAP;
    int right = notes_x;
    for (int i = 0; i < FIG_NOTES && f->notes[i]; i++)
        right = imax(right, notes_x + draw_text_width(f->notes[i], 1));
    if (f->title)
        right = imax(right, MARGIN + draw_text_width(f->title, 1));

    lay->maps_x = MARGIN + 1; /* + 1: room for the map's frame */
    lay->maps_y = lay->image_y + img_h + GAP + LABEL_H;
    right = imax(right, lay->maps_x + f->heads * lay->pitch_x - GAP);
    lay->width = right + MARGIN;
    lay->height = lay->maps_y + (f->layers - 1) * lay->pitch_y + map_h + 1 + MARGIN;
    return VIT_OK;
}

void fig_attn_map_origin(const fig_attn_layout *lay, int layer, int head, int *x, int *y)
{
    *x = lay->maps_x + head * lay->pitch_x;
    *y = lay->maps_y + layer * lay->pitch_y;
}

/* The header: label, image with the query patch outlined, colour bar, notes. */
static void draw_attn_header(draw_canvas *c, const fig_attn *f, const fig_attn_layout *lay)
{
    if (f->title)
        draw_text(c, MARGIN, MARGIN, f->title, 1, ink);
    int s = lay->image_scale, img_w = f->width * s, img_h = f->height * s;
    draw_text(c, lay->image_x, lay->image_y - LABEL_H, "input", 1, ink);
    draw_image(c, lay->image_x, lay->image_y, f->image, f->height, f->width, f->channels, s);
    if (f->query >= 0) {
        int ph = f->height / f->grid_h * s, pw = f->width / f->grid_w * s;
        int r = f->query / f->grid_w, col = f->query % f->grid_w;
        draw_frame(c, lay->image_x + col * pw, lay->image_y + r * ph, pw, ph, query_rgb);
    }
    /* Colour bar: weight 0 at the bottom, the map's largest at the top. */
    int bx = lay->image_x + img_w + GAP;
    for (int j = 0; j < img_h; j++)
        draw_fill(c, bx, lay->image_y + j, BAR_W, 1,
                  draw_colormap(img_h > 1 ? 1.0 - (double)j / (img_h - 1) : 1.0));
    draw_frame(c, bx - 1, lay->image_y - 1, BAR_W + 2, img_h + 2, grey);
    draw_text(c, bx + BAR_W + 4, lay->image_y, "max", 1, ink);
    draw_text(c, bx + BAR_W + 4, lay->image_y + img_h - DRAW_CAP_H, "0", 1, ink);
    int nx = bx + BAR_W + 4 + draw_text_width("max", 1) + GAP;
    for (int i = 0; i < FIG_NOTES && f->notes[i]; i++)
        draw_text(c, nx, lay->image_y + i * NOTE_PITCH, f->notes[i], 1, ink);
}

/* One heat map over the image: each image pixel a map_scale square of its
 * colour blended with draw_colormap(w / max) of its patch (FIG_ATTN_ALPHA). */
static void draw_attn_map(draw_canvas *c, const fig_attn *f, const fig_attn_layout *lay,
                          int layer, int head)
{
    int n = f->grid_h * f->grid_w, x, y;
    const vit_real *w = f->maps + ((size_t)layer * (size_t)f->heads + (size_t)head) * (size_t)n;
    double max = 0;
    for (int i = 0; i < n; i++)
        if ((double)w[i] > max)
            max = (double)w[i];
    fig_attn_map_origin(lay, layer, head, &x, &y);
    char label[64];
    map_label(label, sizeof label, layer, head, max);
    draw_text(c, x, y - LABEL_H, label, 1, ink);
    int patch = f->height / f->grid_h, s = lay->map_scale;
    for (int i = 0; i < f->height; i++)
        for (int j = 0; j < f->width; j++) {
            int k = (i / patch) * f->grid_w + j / patch;
            double t = max > 0 ? (double)w[k] / max : 0;
            draw_rgb col = draw_blend(draw_image_rgb(f->image, f->width, f->channels, i, j),
                                      draw_colormap(t), FIG_ATTN_ALPHA);
            draw_fill(c, x + j * s, y + i * s, s, s, col);
        }
    draw_frame(c, x - 1, y - 1, f->grid_w * lay->cell + 2, f->grid_h * lay->cell + 2, grey);
    if (f->query >= 0)
        draw_frame(c, x + (f->query % f->grid_w) * lay->cell, y + (f->query / f->grid_w) * lay->cell,
                   lay->cell, lay->cell, white);
}

int fig_attn_draw(const fig_attn *f, draw_canvas *out, fig_attn_layout *lay)
{
    memset(out, 0, sizeof *out);
    int rc = fig_attn_layout_of(f, lay);
    if (rc == VIT_OK)
        rc = draw_canvas_init(out, lay->width, lay->height, white);
    if (rc != VIT_OK)
        return rc;
    draw_attn_header(out, f, lay);
    for (int l = 0; l < f->layers; l++)
        for (int h = 0; h < f->heads; h++)
            draw_attn_map(out, f, lay, l, h);
    return VIT_OK;
}

/* ======================================================================
 * Training curves
 * ==================================================================== */

enum { FIG_W = 720, PLOT_LEFT = 84, PLOT_RIGHT = FIG_W - 28 };

int fig_panel_x(const fig_panel *p, double x)
{
    return p->x0 + (int)lround((x - p->xmin) / (p->xmax - p->xmin) * (p->x1 - p->x0));
}

int fig_panel_y(const fig_panel *p, double y)
{
    return p->y1 - (int)lround((y - p->ymin) / (p->ymax - p->ymin) * (p->y1 - p->y0));
}

/* A step of 1, 2 or 5 times a power of ten giving about `target` ticks. */
static double nice_step(double span, int target)
{
    double raw = span / target, p = pow(10, floor(log10(raw))), f = raw / p;
    return (f <= 1 ? 1 : f <= 2 ? 2 : f <= 5 ? 5 : 10) * p;
}

/* Widens [lo, hi] to multiples of a nice step; an empty range is padded
 * first.  min_step > 0 forces at least that step (whole epochs). */
static void nice_range(double lo, double hi, double min_step, double *a, double *b, double *step)
{
    if (!(hi > lo)) {
        double pad = lo == 0 ? 1 : fabs(lo) * 0.1;
        lo -= pad;
        hi += pad;
    }
    double s = nice_step(hi - lo, 6);
    if (s < min_step)
        s = min_step;
    /* The small slack keeps a value that is already a multiple of s from
     * being pushed a whole step out by rounding in the division. */
    *a = floor(lo / s + 1e-9) * s;
    *b = ceil(hi / s - 1e-9) * s;
    *step = s;
}

/* Digits after the point for tick labels at this step. */
static int decimals(double step)
{
    return step >= 1 ? 0 : (int)ceil(-log10(step) - 1e-9);
}

static void draw_ticks(draw_canvas *c, const fig_panel *p, double xstep, double ystep)
{
    char buf[32];
    int nx = (int)lround((p->xmax - p->xmin) / xstep), ny = (int)lround((p->ymax - p->ymin) / ystep);
    for (int i = 0; i <= nx; i++) {
        double v = p->xmin + i * xstep;
        int x = fig_panel_x(p, v);
        if (i > 0)
            draw_fill(c, x, p->y0, 1, p->y1 - p->y0, grid_rgb);
        draw_fill(c, x, p->y1 + 1, 1, 4, fig_axis_rgb);
        snprintf(buf, sizeof buf, "%.*f", decimals(xstep), fabs(v) < xstep * 1e-6 ? 0.0 : v);
        draw_text(c, x - draw_text_width(buf, 1) / 2, p->y1 + 8, buf, 1, ink);
    }
    for (int i = 0; i <= ny; i++) {
        double v = p->ymin + i * ystep;
        int y = fig_panel_y(p, v);
        if (i > 0)
            draw_fill(c, p->x0 + 1, y, p->x1 - p->x0, 1, grid_rgb);
        draw_fill(c, p->x0 - 4, y, 4, 1, fig_axis_rgb);
        snprintf(buf, sizeof buf, "%.*f", decimals(ystep), fabs(v) < ystep * 1e-6 ? 0.0 : v);
        draw_text(c, p->x0 - 7 - draw_text_width(buf, 1), y - DRAW_CAP_H / 2, buf, 1, ink);
    }
}

static void draw_series(draw_canvas *c, const fig_panel *p, const double *x, const double *y,
                        int n, draw_rgb col)
{
    int px = fig_panel_x(p, x[0]), py = fig_panel_y(p, y[0]);
    for (int i = 0; i < n; i++) {
        int qx = fig_panel_x(p, x[i]), qy = fig_panel_y(p, y[i]);
        draw_line(c, px, py, qx, qy, 2, col);
        /* Markers while they do not crowd each other: 6 x 6 squares
         * centred on the 2-pixel line (whose top-left pixel is the point). */
        if (n <= 40)
            draw_fill(c, qx - 2, qy - 2, 6, 6, col);
        px = qx;
        py = qy;
    }
}

/* Axis lines, axis labels and the panel's heading with its legend. */
static void draw_frame_labels(draw_canvas *c, const fig_panel *p, const char *heading,
                              const char *ylabel, const char *const *names, const draw_rgb *cols,
                              int nseries)
{
    draw_fill(c, p->x0, p->y0, 1, p->y1 - p->y0 + 1, fig_axis_rgb);
    draw_fill(c, p->x0, p->y1, p->x1 - p->x0 + 1, 1, fig_axis_rgb);
    const char *xl = "epoch";
    draw_text(c, (p->x0 + p->x1 - draw_text_width(xl, 1)) / 2, p->y1 + 22, xl, 1, ink);
    int yl_w = draw_text_width(ylabel, 1);
    draw_text_up(c, 14, (p->y0 + p->y1 + yl_w) / 2, ylabel, 1, ink);
    int hy = p->y0 - 16;
    draw_text(c, p->x0, hy, heading, 1, ink);
    /* Legend, right-aligned on the heading line: a line sample, then the name. */
    int x = p->x1;
    for (int k = nseries - 1; k >= 0; k--) {
        x -= draw_text_width(names[k], 1);
        draw_text(c, x, hy, names[k], 1, ink);
        x -= 6 + 18;
        draw_fill(c, x, hy + 2, 18, 3, cols[k]);
        x -= 16;
    }
}

int fig_curves_draw(const vit_metrics_table *m, const char *title, draw_canvas *out,
                    fig_curves_layout *lay)
{
    memset(out, 0, sizeof *out);
    memset(lay, 0, sizeof *lay);
    if (!m || m->rows <= 0 || !m->epoch || !m->train_loss || !m->test_loss || !m->test_acc)
        return vit_set_error(VIT_EINVAL, "training curves: no metrics rows to plot");
    int n = m->rows;
    double e_lo = m->epoch[0], e_hi = m->epoch[0], l_hi = 0, l_lo = 0, a_lo = m->test_acc[0],
           a_hi = m->test_acc[0], best = m->test_acc[0];
    for (int i = 0; i < n; i++) {
        double v[4] = {m->epoch[i], m->train_loss[i], m->test_loss[i], m->test_acc[i]};
        for (int k = 0; k < 4; k++)
            if (!isfinite(v[k]))
                return vit_set_error(VIT_EINVAL, "training curves: row %d has a non-finite value",
                                     i + 1);
        e_lo = fmin(e_lo, v[0]);
        e_hi = fmax(e_hi, v[0]);
        l_lo = fmin(l_lo, fmin(v[1], v[2]));
        l_hi = fmax(l_hi, fmax(v[1], v[2]));
        a_lo = fmin(a_lo, v[3]);
        a_hi = fmax(a_hi, v[3]);
        best = fmax(best, v[3]);
    }
    lay->width = FIG_W;
    lay->height = 560;
    /* Epochs from 0 in whole steps, running on at least half a step past
     * the last epoch so that its points sit inside the panel (one epoch:
     * 0..2, two: 0..3); loss from 0 (or below, if a loss is negative);
     * accuracy in its own range, kept inside [0, 1] when the data are.  The
     * 5% pads keep the extreme points off the axes. */
    double xs, ls, as;
    fig_panel *L = &lay->loss, *A = &lay->acc;
    *L = (fig_panel){PLOT_LEFT, 56, PLOT_RIGHT, 250, 0, 0, 0, 0};
    *A = (fig_panel){PLOT_LEFT, 318, PLOT_RIGHT, 512, 0, 0, 0, 0};
    nice_range(fmin(e_lo, 0), e_hi, 1, &L->xmin, &L->xmax, &xs);
    if (L->xmax - e_hi < 0.5 * xs)
        L->xmax += xs;
    A->xmin = L->xmin;
    A->xmax = L->xmax;
    nice_range(l_lo - 0.05 * (l_hi - l_lo), l_hi + 0.05 * (l_hi - l_lo), 0, &L->ymin, &L->ymax, &ls);
    if (l_lo >= 0 && L->ymin < 0)
        L->ymin = 0;
    nice_range(a_lo - 0.05 * (a_hi - a_lo), a_hi + 0.05 * (a_hi - a_lo), 0, &A->ymin, &A->ymax, &as);
    if (a_lo >= 0 && A->ymin < 0)
        A->ymin = 0;
    if (a_hi <= 1 && A->ymax > 1)
        A->ymax = 1;

    int rc = draw_canvas_init(out, lay->width, lay->height, white);
    if (rc != VIT_OK)
        return rc;
    if (title)
        draw_text(out, PLOT_LEFT, 12, title, 2, ink);
    draw_ticks(out, L, xs, ls);
    draw_ticks(out, A, xs, as);
    draw_series(out, L, m->epoch, m->train_loss, n, fig_train_loss_rgb);
    draw_series(out, L, m->epoch, m->test_loss, n, fig_test_loss_rgb);
    draw_series(out, A, m->epoch, m->test_acc, n, fig_test_acc_rgb);

    char acc_name[64], loss_head[64];
    snprintf(acc_name, sizeof acc_name, "test accuracy (last %.4f, best %.4f)", m->test_acc[n - 1],
             best);
    snprintf(loss_head, sizeof loss_head, "Cross-entropy, %d epoch%s", n, n == 1 ? "" : "s");
    const char *loss_names[2] = {"train loss", "test loss"};
    const draw_rgb loss_cols[2] = {fig_train_loss_rgb, fig_test_loss_rgb};
    const char *acc_names[1] = {acc_name};
    draw_frame_labels(out, L, loss_head, "loss", loss_names, loss_cols, 2);
    draw_frame_labels(out, A, "Fraction correct", "accuracy", acc_names, &fig_test_acc_rgb, 1);
    return VIT_OK;
}
