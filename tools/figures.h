/*
 * tools/figures.h - the two pictures the tools draw, kept out of the tools'
 * main() so that tests/test_pictures.c draws them with the same code:
 *
 *  - the attention figure of vit_attn: the input image and, per layer
 *    (rows) and head (columns), one query's attention over the patch grid
 *    as a heat map laid over the input: the image upsampled by a whole
 *    factor (nearest neighbour), each patch a square of `cell` pixels whose
 *    heat colour is alpha-blended over the image pixels under it;
 *  - the training curves of vit_plot: train and test loss in one panel and
 *    test accuracy in a second, against the epoch, from the metrics.csv
 *    that vit_train writes (read by the library: vit_metrics_read).
 *
 * Errors are the library's (vit/core.h): VIT_OK, or VIT_EINVAL (bad
 * figure) or VIT_ENOMEM with the message in vit_last_error().
 */
#ifndef VIT_TOOLS_FIGURES_H
#define VIT_TOOLS_FIGURES_H

#include <stddef.h>

#include "draw.h"

/* ---- attention figure ------------------------------------------------- */

enum { FIG_MAP_MIN_PX = 96, /* each heat map is at least this many pixels wide and tall */
       FIG_NOTES = 4 };

/* Opacity of the heat colour over the input image on every map: the pixel
 * at image pixel (i, j) of map (layer, head) is
 *   draw_blend(draw_image_rgb(image, width, channels, i, j),
 *              draw_colormap(weight of the patch holding (i, j) / the map's largest),
 *              FIG_ATTN_ALPHA)
 * i.e. per channel lround((1 - alpha) * input + alpha * heat). */
#define FIG_ATTN_ALPHA 0.6

typedef struct fig_attn {
    const vit_real *image;   /* [height, width, channels] in [0, 1]: the input */
    int height, width, channels; /* channels 1 or 3 */
    int grid_h, grid_w;      /* the patch grid; patches are numbered row by row */
    int layers, heads;
    /* [layers, heads, grid_h * grid_w]: the query's attention weights over
     * the patches (the class token's own column left out).  Each map is
     * coloured from 0 (draw_colormap(0)) to its own largest weight
     * (draw_colormap(1)), blended over the input (FIG_ATTN_ALPHA); the
     * label prints that largest weight. */
    const vit_real *maps;
    int query;               /* -1: the class token; else the patch index
                                (outlined on the image and on every map) */
    const char *title;       /* top line, drawn as given, or NULL */
    const char *notes[FIG_NOTES]; /* lines printed beside the image, NULL-ended */
} fig_attn;

/* Where things are on the attention figure. */
typedef struct fig_attn_layout {
    int width, height;       /* of the canvas */
    int cell;                /* pixels per patch side on a map */
    int map_scale;           /* pixels per image pixel side on a map (cell = patch * map_scale) */
    int image_x, image_y, image_scale; /* input image: corner and pixels per image pixel */
    int maps_x, maps_y;      /* top-left pixel of map (layer 0, head 0) */
    int pitch_x, pitch_y;    /* distance between neighbouring maps */
} fig_attn_layout;

/* Computes the layout of f (sizes checked: positive grid, layers, heads;
 * image size a multiple of the grid in square patches; channels 1 or 3;
 * non-NULL buffers). */
int fig_attn_layout_of(const fig_attn *f, fig_attn_layout *lay);

/* Top-left pixel of the heat map of (layer, head). */
void fig_attn_map_origin(const fig_attn_layout *lay, int layer, int head, int *x, int *y);

/* Draws f onto a new canvas *out (free with draw_canvas_free) and fills
 * *lay.  On error *out is zeroed. */
int fig_attn_draw(const fig_attn *f, draw_canvas *out, fig_attn_layout *lay);

/* ---- training curves -------------------------------------------------- */

/* One panel's plot area: x0..x1, y0..y1 are pixel columns and rows (inclusive);
 * the x axis is drawn along row y1 and the y axis along column x0. */
typedef struct fig_panel {
    int x0, y0, x1, y1;
    double xmin, xmax, ymin, ymax; /* data range shown (nice round numbers) */
} fig_panel;

typedef struct fig_curves_layout {
    int width, height;
    fig_panel loss;  /* train loss and test loss */
    fig_panel acc;   /* test accuracy */
} fig_curves_layout;

/* Series colours (also used in the legend). */
extern const draw_rgb fig_train_loss_rgb, fig_test_loss_rgb, fig_test_acc_rgb;
/* Colour of the axis lines and tick marks. */
extern const draw_rgb fig_axis_rgb;

/* Pixel column of x and row of y in panel p (rounded to nearest). */
int fig_panel_x(const fig_panel *p, double x);
int fig_panel_y(const fig_panel *p, double y);

/* Draws the curves of m (vit_metrics_read, vit/metrics.h; at least one row) onto a new canvas *out: axes,
 * ticks with labels, axis labels, a legend per panel, and title at the top
 * (may be NULL).  Points are joined by 2-pixel lines whose top-left pixel
 * is the exact point (see draw_line).  Fills *lay. */
int fig_curves_draw(const vit_metrics_table *m, const char *title, draw_canvas *out,
                    fig_curves_layout *lay);

#endif
