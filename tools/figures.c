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
 *   [image]  [colour bar] 1     notes...
 *                          0
 *   L0 H0  0.001-0.410  L0 H1  0.010-0.220  ...   one row per layer,
 *   [map over image] [map over image]          one column per head
 * ==================================================================== */

/* LABEL_H: a line of text (DRAW_GLYPH_H with descenders) and its gap. */
enum { MARGIN = 10, LABEL_H = 13, NOTE_PITCH = 13, GAP = 16, BAR_W = 12 };

/* "L0 H1  0.012-0.873": the map's smallest and largest weight. */
static void map_label(char *buf, size_t cap, int layer, int head, double min, double max)
{
    snprintf(buf, cap, "L%d H%d  %.3f-%.3f", layer, head, min, max);
}

/* Smallest and largest weight of the n weights at w. */
static void map_range(const vit_real *w, int n, double *min, double *max)
{
    *min = *max = (double)w[0];
    for (int i = 1; i < n; i++) {
        *min = fmin(*min, (double)w[i]);
        *max = fmax(*max, (double)w[i]);
    }
}

void fig_attn_grid(const fig_attn *f, int layer, int *grid_h, int *grid_w)
{
    *grid_h = f->layer_grid_h ? f->layer_grid_h[layer] : f->grid_h;
    *grid_w = f->layer_grid_w ? f->layer_grid_w[layer] : f->grid_w;
}

int fig_attn_heads(const fig_attn *f, int layer)
{
    return f->layer_heads ? f->layer_heads[layer] : f->heads;
}

int fig_attn_query(const fig_attn *f, int layer)
{
    return f->layer_query ? f->layer_query[layer] : f->query;
}

/* Patches of layer l's grid. */
static int layer_cells(const fig_attn *f, int layer)
{
    int gh, gw;
    fig_attn_grid(f, layer, &gh, &gw);
    return gh * gw;
}

const vit_real *fig_attn_map(const fig_attn *f, int layer, int head)
{
    size_t at = 0;
    for (int l = 0; l < layer; l++)
        at += (size_t)fig_attn_heads(f, l) * (size_t)layer_cells(f, l);
    return f->maps + at + (size_t)head * (size_t)layer_cells(f, layer);
}

double fig_attn_top(const fig_attn *f, int layer, int head)
{
    double lo, hi, top = 0;
    if (f->scale == FIG_SCALE_MAP) {
        map_range(fig_attn_map(f, layer, head), layer_cells(f, layer), &lo, &top);
    } else if (f->scale == FIG_SCALE_FIGURE) {
        for (int l = 0; l < f->layers; l++)
            for (int h = 0; h < fig_attn_heads(f, l); h++) {
                map_range(fig_attn_map(f, l, h), layer_cells(f, l), &lo, &hi);
                top = fmax(top, hi);
            }
    } else {
        top = 1;
    }
    return top > 0 ? top : 1;
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
    if (f->scale < FIG_SCALE_ABSOLUTE || f->scale > FIG_SCALE_MAP)
        return vit_set_error(VIT_EINVAL, "%s: unknown colour scale %d", what, f->scale);
    if (f->channels != 1 && f->channels != 3)
        return vit_set_error(VIT_EINVAL, "%s: channels must be 1 or 3, got %d", what, f->channels);
    if (f->query < -1 || f->query >= f->grid_h * f->grid_w)
        return vit_set_error(VIT_EINVAL, "%s: query patch %d is outside the %dx%d grid", what,
                             f->query, f->grid_h, f->grid_w);
    if (f->layers > 1000 || f->heads > 1000 || f->grid_h > 4096 || f->grid_w > 4096)
        return vit_set_error(VIT_EINVAL, "%s: too large (%d layers, %d heads, %dx%d grid)", what,
                             f->layers, f->heads, f->grid_h, f->grid_w);
    for (int l = 0; l < f->layers; l++) {
        int gh, gw, nh = fig_attn_heads(f, l), q = fig_attn_query(f, l);
        fig_attn_grid(f, l, &gh, &gw);
        if (gh <= 0 || gw <= 0 || gh > 4096 || gw > 4096 || f->height % gh || f->width % gw ||
            f->height / gh != f->width / gw)
            return vit_set_error(VIT_EINVAL, "%s: layer %d's %dx%d grid does not cut the %dx%d "
                                 "image into square patches", what, l, gh, gw, f->height,
                                 f->width);
        if (nh < 1 || nh > f->heads)
            return vit_set_error(VIT_EINVAL, "%s: layer %d has %d maps (1..%d)", what, l, nh,
                                 f->heads);
        if (q < -1 || q >= gh * gw)
            return vit_set_error(VIT_EINVAL, "%s: layer %d's query patch %d is outside its "
                                 "%dx%d grid", what, l, q, gh, gw);
    }
    lay->names = 0;
    for (int l = 0; f->layer_names && l < f->layers; l++)
        lay->names |= f->layer_names[l] != NULL;

    /* Nearest-neighbour upsampling of the image by a whole factor keeps
     * every patch one square of whole image pixels, at least
     * FIG_MAP_MIN_PX across in total. */
    lay->map_scale = ceil_div(FIG_MAP_MIN_PX, f->height < f->width ? f->height : f->width);
    lay->cell = f->height / f->grid_h * lay->map_scale;
    int map_w = lay->cell * f->grid_w, map_h = lay->cell * f->grid_h;
    char label[64];
    map_label(label, sizeof label, f->layers - 1, f->heads - 1, 0.999, 0.999);
    lay->pitch_x = imax(map_w, draw_text_width(label, 1)) + GAP;
    lay->pitch_y = (lay->names ? 2 : 1) * LABEL_H + map_h + GAP;

    int top = MARGIN + (f->title ? DRAW_GLYPH_H + 8 : 0);
    lay->image_scale = ceil_div(FIG_MAP_MIN_PX, imax(f->height, f->width));
    lay->image_x = MARGIN;
    lay->image_y = top + LABEL_H;
    int img_w = f->width * lay->image_scale, img_h = f->height * lay->image_scale;
    int notes_x = lay->image_x + img_w + GAP + BAR_W + 4 + draw_text_width("0.000", 1) + GAP;
    int right = notes_x;
    for (int i = 0; i < FIG_NOTES && f->notes[i]; i++)
        right = imax(right, notes_x + draw_text_width(f->notes[i], 1));
    if (f->title)
        right = imax(right, MARGIN + draw_text_width(f->title, 1));

    lay->maps_x = MARGIN + 1; /* + 1: room for the map's frame */
    lay->maps_y = lay->image_y + img_h + GAP + (lay->names ? 2 : 1) * LABEL_H;
    right = imax(right, lay->maps_x + f->heads * lay->pitch_x - GAP);
    for (int l = 0; lay->names && l < f->layers; l++)
        if (f->layer_names[l])
            right = imax(right, lay->maps_x + draw_text_width(f->layer_names[l], 1));
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
    /* Colour bar: weight 0 at the bottom, the scale's top weight at the top. */
    int bx = lay->image_x + img_w + GAP;
    for (int j = 0; j < img_h; j++)
        draw_fill(c, bx, lay->image_y + j, BAR_W, 1,
                  draw_colormap(img_h > 1 ? 1.0 - (double)j / (img_h - 1) : 1.0));
    draw_frame(c, bx - 1, lay->image_y - 1, BAR_W + 2, img_h + 2, grey);
    char top[32];
    if (f->scale == FIG_SCALE_MAP)
        snprintf(top, sizeof top, "max");
    else if (f->scale == FIG_SCALE_FIGURE)
        snprintf(top, sizeof top, "%.3f", fig_attn_top(f, 0, 0));
    else
        snprintf(top, sizeof top, "1");
    draw_text(c, bx + BAR_W + 4, lay->image_y, top, 1, ink);
    draw_text(c, bx + BAR_W + 4, lay->image_y + img_h - DRAW_CAP_H, "0", 1, ink);
    int nx = bx + BAR_W + 4 + draw_text_width("0.000", 1) + GAP;
    for (int i = 0; i < FIG_NOTES && f->notes[i]; i++)
        draw_text(c, nx, lay->image_y + i * NOTE_PITCH, f->notes[i], 1, ink);
}

/* One heat map over the image: each image pixel a map_scale square of its
 * colour blended with draw_colormap(w / top) of its patch (FIG_ATTN_ALPHA). */
static void draw_attn_map(draw_canvas *c, const fig_attn *f, const fig_attn_layout *lay,
                          int layer, int head)
{
    int gh, gw, x, y, q = fig_attn_query(f, layer);
    fig_attn_grid(f, layer, &gh, &gw);
    int n = gh * gw, cell = f->height / gh * lay->map_scale;
    const vit_real *w = fig_attn_map(f, layer, head);
    double min, max, top = fig_attn_top(f, layer, head);
    map_range(w, n, &min, &max);
    fig_attn_map_origin(lay, layer, head, &x, &y);
    char label[64];
    map_label(label, sizeof label, layer, head, min, max);
    draw_text(c, x, y - LABEL_H, label, 1, ink);
    int patch = f->height / gh, s = lay->map_scale;
    for (int i = 0; i < f->height; i++)
        for (int j = 0; j < f->width; j++) {
            int k = (i / patch) * gw + j / patch;
            double t = (double)w[k] / top;
            draw_rgb col = draw_blend(draw_image_rgb(f->image, f->width, f->channels, i, j),
                                      draw_colormap(t), FIG_ATTN_ALPHA);
            draw_fill(c, x + j * s, y + i * s, s, s, col);
        }
    draw_frame(c, x - 1, y - 1, gw * cell + 2, gh * cell + 2, grey);
    if (q >= 0)
        draw_frame(c, x + (q % gw) * cell, y + (q / gw) * cell, cell, cell, white);
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
    for (int l = 0; l < f->layers; l++) {
        if (lay->names && f->layer_names[l]) {
            int x, y;
            fig_attn_map_origin(lay, l, 0, &x, &y);
            draw_text(out, x, y - 2 * LABEL_H, f->layer_names[l], 1, ink);
        }
        for (int h = 0; h < fig_attn_heads(f, l); h++)
            draw_attn_map(out, f, lay, l, h);
    }
    return VIT_OK;
}

/* ======================================================================
 * Training curves
 *
 *   title
 *   heading    legend ...                      (legend wraps onto more lines)
 *   [loss panel: every *loss column]
 *   heading    legend ... [final mark]
 *   [accuracy panel: every *acc column, the final figures ringed]
 *   heading    legend
 *   [learning-rate panel: lr, when the file has it]
 * ==================================================================== */

enum { FIG_W = 720, PLOT_LEFT = 84, PLOT_RIGHT = FIG_W - 28, PANEL_H = 180, LINE_H = 14,
       SAMPLE_W = 18, RING = 9 };

const draw_rgb fig_train_acc_rgb = {31, 100, 200};
const draw_rgb fig_val_acc_rgb = {150, 50, 180};
const draw_rgb fig_val_loss_rgb = {150, 50, 180}; /* as train: one colour a set */
const draw_rgb fig_lr_rgb = {120, 80, 30};
const draw_rgb fig_final_rgb = {215, 25, 25};
static const draw_rgb other_rgb[3] = {{200, 40, 120}, {0, 140, 140}, {100, 100, 100}};

int fig_curves_panel_of(const char *name)
{
    size_t n = strlen(name);
    if (n >= 4 && strcmp(name + n - 4, "loss") == 0)
        return FIG_PANEL_LOSS;
    if (n >= 3 && strcmp(name + n - 3, "acc") == 0)
        return FIG_PANEL_ACC;
    if (strcmp(name, "lr") == 0)
        return FIG_PANEL_LR;
    return FIG_PANEL_NONE;
}

/* Colour and legend name of a column; k counts the columns that have no
 * colour of their own so far. */
static draw_rgb series_rgb(const char *name, int *k)
{
    static const struct { const char *name; const draw_rgb *rgb; } known[] = {
        {"train_loss", &fig_train_loss_rgb}, {"test_loss", &fig_test_loss_rgb},
        {"train_acc", &fig_train_acc_rgb},   {"test_acc", &fig_test_acc_rgb},
        {"val_acc", &fig_val_acc_rgb},       {"val_loss", &fig_val_loss_rgb},
        {"lr", &fig_lr_rgb}};
    for (size_t i = 0; i < sizeof known / sizeof known[0]; i++)
        if (strcmp(name, known[i].name) == 0)
            return *known[i].rgb;
    return other_rgb[(*k)++ % 3];
}

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
static void nice_range(double lo, double hi, double min_step, int target, double *a, double *b,
                       double *step)
{
    if (!(hi > lo)) {
        double pad = lo == 0 ? 1 : fabs(lo) * 0.1;
        lo -= pad;
        hi += pad;
    }
    double s = nice_step(hi - lo, target);
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

/* Ticks at the multiples of the steps inside the panel's range (the x
 * range may end between two ticks). */
static void draw_ticks(draw_canvas *c, const fig_panel *p, double xstep, double ystep)
{
    char buf[32];
    for (double v = ceil(p->xmin / xstep - 1e-9) * xstep; v <= p->xmax + xstep * 1e-9; v += xstep) {
        int x = fig_panel_x(p, v);
        if (x > p->x0)
            draw_fill(c, x, p->y0, 1, p->y1 - p->y0, grid_rgb);
        draw_fill(c, x, p->y1 + 1, 1, 4, fig_axis_rgb);
        snprintf(buf, sizeof buf, "%.*f", decimals(xstep), fabs(v) < xstep * 1e-6 ? 0.0 : v);
        draw_text(c, x - draw_text_width(buf, 1) / 2, p->y1 + 8, buf, 1, ink);
    }
    int ny = (int)lround((p->ymax - p->ymin) / ystep);
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
    int px = 0, py = 0, joined = 0;
    for (int i = 0; i < n; i++) {
        if (isnan(y[i])) { /* not measured (an empty field): a gap */
            joined = 0;
            continue;
        }
        int qx = fig_panel_x(p, x[i]), qy = fig_panel_y(p, y[i]);
        if (joined)
            draw_line(c, px, py, qx, qy, 2, col);
        else
            draw_line(c, qx, qy, qx, qy, 2, col);
        joined = 1;
        /* Markers while they do not crowd each other: 6 x 6 squares
         * centred on the 2-pixel line (whose top-left pixel is the point). */
        if (n <= 40)
            draw_fill(c, qx - 2, qy - 2, 6, 6, col);
        px = qx;
        py = qy;
    }
}

/* The ring that marks a final figure: a RING x RING square outline, 2
 * pixels thick, centred on the 2-pixel line's point (cx, cy) .. +1. */
static void draw_ring(draw_canvas *c, int cx, int cy, draw_rgb col)
{
    int x = cx - RING / 2, y = cy - RING / 2;
    draw_frame(c, x, y, RING + 1, RING + 1, col);
    draw_frame(c, x - 1, y - 1, RING + 3, RING + 3, col);
}

/* One legend entry: a line sample (or a ring) and its name. */
typedef struct legend_entry {
    const char *name;
    draw_rgb rgb;
    int ring;
} legend_entry;

/* The heading at (x0, y) and the legend after it, left to right, wrapping
 * onto further lines (LINE_H apart) at x1.  Returns the lines used; draws
 * only when c is not NULL. */
static int draw_legend(draw_canvas *c, int x0, int x1, int y, const char *heading,
                       const legend_entry *e, int n)
{
    int x = x0 + draw_text_width(heading, 1) + 24, lines = 1;
    if (c)
        draw_text(c, x0, y, heading, 1, ink);
    for (int k = 0; k < n; k++) {
        int w = SAMPLE_W + 6 + draw_text_width(e[k].name, 1);
        if (x + w > x1 && x > x0) {
            x = x0;
            y += LINE_H;
            lines++;
        }
        if (c && e[k].ring)
            draw_ring(c, x + SAMPLE_W / 2, y + 3, e[k].rgb);
        else if (c)
            draw_fill(c, x, y + 2, SAMPLE_W, 3, e[k].rgb);
        if (c)
            draw_text(c, x + SAMPLE_W + 6, y, e[k].name, 1, ink);
        x += w + 16;
    }
    return lines;
}

/* Axis lines and axis labels of a panel. */
static void draw_axes(draw_canvas *c, const fig_panel *p, const char *ylabel)
{
    draw_fill(c, p->x0, p->y0, 1, p->y1 - p->y0 + 1, fig_axis_rgb);
    draw_fill(c, p->x0, p->y1, p->x1 - p->x0 + 1, 1, fig_axis_rgb);
    const char *xl = "epoch";
    draw_text(c, (p->x0 + p->x1 - draw_text_width(xl, 1)) / 2, p->y1 + 22, xl, 1, ink);
    int yl_w = draw_text_width(ylabel, 1);
    draw_text_up(c, 14, (p->y0 + p->y1 + yl_w) / 2, ylabel, 1, ink);
}

enum { MAX_SERIES = 16 };

/* What one panel shows: its columns, in file order. */
typedef struct panel_plan {
    int col[MAX_SERIES], n;
    legend_entry legend[MAX_SERIES + 1];
    char names[MAX_SERIES + 1][96];
    int nlegend;
} panel_plan;

int fig_curves_draw(const vit_metrics_table *m, const vit_metrics_table *final, const char *title,
                    draw_canvas *out, fig_curves_layout *lay)
{
    memset(out, 0, sizeof *out);
    memset(lay, 0, sizeof *lay);
    lay->final_x = lay->final_y = lay->final_val_y = -1;
    if (!m || m->rows <= 0 || !m->epoch || !m->train_loss || !m->test_loss || !m->test_acc)
        return vit_set_error(VIT_EINVAL, "training curves: no metrics rows to plot");
    int n = m->rows;
    /* NaN is a figure not measured (an empty field: with a validation set
     * the test columns); an epoch is always there. */
    for (int c = 0; c < m->cols; c++)
        for (int i = 0; i < n; i++) {
            double v = m->values[(size_t)c * (size_t)n + (size_t)i];
            if (isinf(v) || (isnan(v) && m->values + (size_t)c * (size_t)n == m->epoch))
                return vit_set_error(VIT_EINVAL, "training curves: row %d has a non-finite value",
                                     i + 1);
        }
    /* The final figures: those of the last epoch's run (an older final.csv
     * beside a longer history is not this run's end). */
    const double *f_ep = final ? vit_metrics_column(final, "epoch") : NULL;
    const double *f_acc = final ? vit_metrics_column(final, "test_acc") : NULL;
    const double *f_val = final ? vit_metrics_column(final, "val_acc") : NULL;
    const double *f_tta = final ? vit_metrics_column(final, "tta") : NULL;
    const double *f_ema = final ? vit_metrics_column(final, "ema") : NULL;
    const double *f_best = final ? vit_metrics_column(final, "best_epoch") : NULL;
    /* An empty field (NaN) says nothing. */
    f_val = f_val && !isnan(f_val[0]) ? f_val : NULL;
    f_tta = f_tta && !isnan(f_tta[0]) ? f_tta : NULL;
    int has_final = f_ep && f_acc && final->rows == 1 && f_ep[0] == m->epoch[n - 1] &&
                    isfinite(f_acc[0]);
    /* The epoch of the model the final figures score: best.ckpt's, or the last. */
    double f_at = has_final && f_best && f_best[0] > 0 && f_best[0] <= f_ep[0] ? f_best[0]
                  : has_final                                                 ? f_ep[0]
                                                                              : 0;

    /* Which columns go where. */
    panel_plan plan[3] = {{.n = 0}};
    int other = 0;
    for (int c = 0; c < m->cols; c++) {
        int k = fig_curves_panel_of(m->names[c]);
        if (k == FIG_PANEL_NONE || plan[k].n == MAX_SERIES)
            continue;
        panel_plan *pp = &plan[k];
        pp->col[pp->n] = c;
        const char *nm = m->names[c];
        char *label = pp->names[pp->n];
        const double *v = m->values + (size_t)c * (size_t)n;
        double best = NAN, last = NAN;
        for (int i = 0; i < n; i++) {
            best = fmax(best, v[i]); /* fmax passes over NaN */
            last = isnan(v[i]) ? last : v[i];
        }
        if (isnan(last)) /* never measured: nothing to draw */
            continue;
        /* The test curve has no "best": a model is chosen on the
         * validation set, never on the test set. */
        if (strcmp(nm, "test_acc") == 0)
            snprintf(label, 96, "test acc, one pass (last %.4f)", last);
        else if (strcmp(nm, "val_acc") == 0)
            snprintf(label, 96, "val acc, one pass (last %.4f, best %.4f)", last, best);
        else if (strcmp(nm, "lr") == 0)
            snprintf(label, 96, "learning rate (peak %.3g)", best);
        else {
            snprintf(label, 96, "%s", nm);
            for (char *q = label; *q; q++)
                *q = *q == '_' ? ' ' : *q;
        }
        pp->legend[pp->nlegend++] = (legend_entry){label, series_rgb(nm, &other), 0};
        pp->n++;
    }
    if (has_final) {
        panel_plan *pa = &plan[FIG_PANEL_ACC];
        char how[48] = "";
        int tta = f_tta && f_tta[0] != 0;
        const char *tname = tta ? vit_tta_name((int)f_tta[0]) : "";
        double ema = f_ema ? f_ema[0] : 0;
        if (tta && ema > 0)
            snprintf(how, sizeof how, " (tta %s, ema %g)", tname, ema);
        else if (tta)
            snprintf(how, sizeof how, " (tta %s)", tname);
        else if (ema > 0)
            snprintf(how, sizeof how, " (ema %g)", ema);
        char *label = pa->names[MAX_SERIES];
        if (f_val && f_at != f_ep[0])
            snprintf(label, 96, "final: test %.4f, val %.4f%s, best.ckpt (epoch %.0f)", f_acc[0],
                     f_val[0], how, f_at);
        else if (f_val)
            snprintf(label, 96, "final: test %.4f, val %.4f%s", f_acc[0], f_val[0], how);
        else
            snprintf(label, 96, "final test acc %.4f%s", f_acc[0], how);
        pa->legend[pa->nlegend++] = (legend_entry){label, fig_final_rgb, 1};
    }

    /* Ranges: epochs from 0 (or below) to just past the last one: half a
     * step of whole epochs, at least one epoch (one epoch: 0..2, two:
     * 0..3); ticks at nice whole steps inside.  Loss from 0 (or below,
     * if a loss is negative); accuracy in its own range, kept inside
     * [0, 1] when the data are; lr from 0.  The 5% pads keep the extreme
     * points off the axes. */
    double e_lo = m->epoch[0], e_hi = m->epoch[0];
    for (int i = 0; i < n; i++) {
        e_lo = fmin(e_lo, m->epoch[i]);
        e_hi = fmax(e_hi, m->epoch[i]);
    }
    double lo[3], hi[3];
    for (int k = 0; k < 3; k++) {
        lo[k] = k == FIG_PANEL_ACC ? INFINITY : 0;
        hi[k] = k == FIG_PANEL_ACC ? -INFINITY : 0;
        for (int s = 0; s < plan[k].n; s++)
            for (int i = 0; i < n; i++) {
                double v = m->values[(size_t)plan[k].col[s] * (size_t)n + (size_t)i];
                lo[k] = fmin(lo[k], v);
                hi[k] = fmax(hi[k], v);
            }
    }
    if (has_final) {
        lo[FIG_PANEL_ACC] = fmin(lo[FIG_PANEL_ACC], f_acc[0]);
        hi[FIG_PANEL_ACC] = fmax(hi[FIG_PANEL_ACC], f_acc[0]);
        if (f_val && isfinite(f_val[0])) {
            lo[FIG_PANEL_ACC] = fmin(lo[FIG_PANEL_ACC], f_val[0]);
            hi[FIG_PANEL_ACC] = fmax(hi[FIG_PANEL_ACC], f_val[0]);
        }
    }
    fig_panel *panel[3] = {&lay->loss, &lay->acc, &lay->lr};
    lay->has_lr = plan[FIG_PANEL_LR].n > 0;
    double xmin, xmax, xs, ys[3];
    nice_range(fmin(e_lo, 0), e_hi, 1, 8, &xmin, &xmax, &xs);
    xmin = fmin(xmin, 0);
    xmax = e_hi + fmax(1, ceil(0.04 * (e_hi - xmin)));

    /* Heading and legend lines first, then each panel under its own. */
    char loss_head[64], secs[32] = "";
    const double *sec = vit_metrics_column(m, "seconds");
    if (sec)
        snprintf(secs, sizeof secs, ", %.1f s", sec[n - 1]);
    snprintf(loss_head, sizeof loss_head, "Cross-entropy, %d epoch%s%s", n, n == 1 ? "" : "s",
             secs);
    const char *heading[3] = {loss_head, "Fraction correct", "Learning rate"};
    const char *ylabel[3] = {"loss", "accuracy", "lr"};
    int top = 44, npanels = lay->has_lr ? 3 : 2, hy[3];
    for (int k = 0; k < npanels; k++) {
        hy[k] = top;
        int lines = draw_legend(NULL, PLOT_LEFT, PLOT_RIGHT, top, heading[k], plan[k].legend,
                                plan[k].nlegend);
        fig_panel *p = panel[k];
        p->x0 = PLOT_LEFT;
        p->x1 = PLOT_RIGHT;
        p->y0 = top + lines * LINE_H + 4;
        p->y1 = p->y0 + (k == FIG_PANEL_LR ? PANEL_H / 2 : PANEL_H);
        p->xmin = xmin;
        p->xmax = xmax;
        double l = lo[k], h = hi[k];
        if (!(l <= h))
            l = h = 0;
        nice_range(l - 0.05 * (h - l), h + 0.05 * (h - l), 0, k == FIG_PANEL_LR ? 3 : 6, &p->ymin,
                   &p->ymax, &ys[k]);
        if (l >= 0 && p->ymin < 0)
            p->ymin = 0;
        if (k == FIG_PANEL_ACC && h <= 1 && p->ymax > 1)
            p->ymax = 1;
        top = p->y1 + 48;
    }
    lay->width = FIG_W;
    lay->height = top - 8;

    int rc = draw_canvas_init(out, lay->width, lay->height, white);
    if (rc != VIT_OK)
        return rc;
    if (title)
        draw_text(out, PLOT_LEFT, 12, title, 2, ink);
    for (int k = 0; k < npanels; k++) {
        draw_ticks(out, panel[k], xs, ys[k]);
        for (int s = 0; s < plan[k].n; s++)
            draw_series(out, panel[k], m->epoch,
                        m->values + (size_t)plan[k].col[s] * (size_t)n, n,
                        plan[k].legend[s].rgb);
        draw_axes(out, panel[k], ylabel[k]);
        draw_legend(out, PLOT_LEFT, PLOT_RIGHT, hy[k], heading[k], plan[k].legend,
                    plan[k].nlegend);
    }
    if (has_final) {
        const fig_panel *A = &lay->acc;
        lay->final_x = fig_panel_x(A, f_at);
        lay->final_y = fig_panel_y(A, f_acc[0]);
        draw_ring(out, lay->final_x, lay->final_y, fig_final_rgb);
        if (f_val && isfinite(f_val[0])) {
            lay->final_val_y = fig_panel_y(A, f_val[0]);
            draw_ring(out, lay->final_x, lay->final_val_y, fig_final_rgb);
        }
    }
    return VIT_OK;
}
