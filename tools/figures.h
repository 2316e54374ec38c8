/*
 * tools/figures.h - the two pictures the tools draw, kept out of the tools'
 * main() so that tests/test_pictures.c draws them with the same code:
 *
 *  - the attention figure of vit_attn: the input image and, per layer
 *    (rows) and head (columns), one query's attention over the patch grid
 *    (the layer's own, when layers differ: a Swin's stages) as a heat map
 *    laid over the input: the image upsampled by a whole factor (nearest
 *    neighbour), each patch a square of `cell` pixels whose heat colour is
 *    alpha-blended over the image pixels under it;
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
 *              draw_colormap(weight of the patch holding (i, j) / top),
 *              FIG_ATTN_ALPHA)
 * i.e. per channel lround((1 - alpha) * input + alpha * heat). */
#define FIG_ATTN_ALPHA 0.6

/* What weight the top of the colour ramp (draw_colormap(1)) stands for:
 *  FIG_SCALE_ABSOLUTE (0, the default of a zeroed fig_attn): weight 1, so a
 *    colour means the same weight on every map and in every figure, and
 *    near-uniform attention (1/64 over 64 patches) is dark everywhere;
 *  FIG_SCALE_FIGURE: the largest weight of any map in the figure;
 *  FIG_SCALE_MAP: each map's own largest weight (every map then has a
 *    patch at the top colour, however flat it is). */
enum { FIG_SCALE_ABSOLUTE = 0, FIG_SCALE_FIGURE = 1, FIG_SCALE_MAP = 2 };

typedef struct fig_attn {
    const vit_real *image;   /* [height, width, channels] in [0, 1]: the input */
    int height, width, channels; /* channels 1 or 3 */
    int grid_h, grid_w;      /* the patch grid; patches are numbered row by row */
    int layers, heads;
    /* [layers, heads, grid_h * grid_w]: the query's attention weights over
     * the patches (the class token's own column left out).  Each map is
     * coloured from 0 (draw_colormap(0)) to the weight `scale` picks
     * (draw_colormap(1)), blended over the input (FIG_ATTN_ALPHA); its
     * label prints the map's smallest and largest weight ("L0 H1
     * 0.012-0.873"), and the colour bar's top label the weight of its top
     * ("1", the figure's largest as "0.873", or "max" for FIG_SCALE_MAP). */
    const vit_real *maps;
    int scale;               /* FIG_SCALE_* */
    int query;               /* -1: the class token; else the patch index
                                (outlined on the image and on every map) */
    const char *title;       /* top line, drawn as given, or NULL */
    const char *notes[FIG_NOTES]; /* lines printed beside the image, NULL-ended */
    /* Optional, per layer (a Swin's stages: each row on its own grid).
     * NULL: every layer as above.  layer_grid_h, layer_grid_w: layer l's
     * grid (each cutting the image into square patches; grid_h x grid_w
     * above is the one the input image's query outline uses);
     * layer_heads: its maps (1 .. heads: its row's columns past them stay
     * empty); layer_query: its query patch on its own grid (or -1),
     * outlined on its maps.  With any of them, maps holds layer after
     * layer, layer l's layer_heads[l] maps of its grid's patches each
     * (fig_attn_map).  layer_names: a heading drawn above each row ("L2
     * stage 2 block 1"; NULL entries: none). */
    const int *layer_grid_h, *layer_grid_w, *layer_heads, *layer_query;
    const char *const *layer_names;
} fig_attn;

/* Layer l's grid, maps drawn and query under f's per-layer fields (or the
 * shared ones), and the first weight of map (layer, head). */
void fig_attn_grid(const fig_attn *f, int layer, int *grid_h, int *grid_w);
int fig_attn_heads(const fig_attn *f, int layer);
int fig_attn_query(const fig_attn *f, int layer);
const vit_real *fig_attn_map(const fig_attn *f, int layer, int head);

/* Where things are on the attention figure. */
typedef struct fig_attn_layout {
    int width, height;       /* of the canvas */
    int cell;                /* pixels per patch side on a map (of grid_h x
                                grid_w; another layer's: fig_attn_grid) */
    int map_scale;           /* pixels per image pixel side on a map (cell = patch * map_scale) */
    int image_x, image_y, image_scale; /* input image: corner and pixels per image pixel */
    int maps_x, maps_y;      /* top-left pixel of map (layer 0, head 0) */
    int names;               /* 1: each row has its heading (layer_names)
                                a line above its maps' labels */
    int pitch_x, pitch_y;    /* distance between neighbouring maps */
} fig_attn_layout;

/* Computes the layout of f (sizes checked: positive grid, layers, heads;
 * image size a multiple of the grid in square patches; channels 1 or 3;
 * non-NULL buffers). */
int fig_attn_layout_of(const fig_attn *f, fig_attn_layout *lay);

/* Top-left pixel of the heat map of (layer, head). */
void fig_attn_map_origin(const fig_attn_layout *lay, int layer, int head, int *x, int *y);

/* The weight that draw_colormap(1) stands for on map (layer, head) of f
 * under f->scale (1, the figure's largest or the map's largest; a largest
 * of 0 gives 1, so an all-zero map is drawn at the bottom colour). */
double fig_attn_top(const fig_attn *f, int layer, int head);

/* Draws f onto a new canvas *out (free with draw_canvas_free) and fills
 * *lay.  On error *out is zeroed. */
int fig_attn_draw(const fig_attn *f, draw_canvas *out, fig_attn_layout *lay);

/* ---- training curves -------------------------------------------------- */

/* One panel's plot area: x0..x1, y0..y1 are pixel columns and rows (inclusive);
 * the x axis is drawn along row y1 and the y axis along column x0. */
typedef struct fig_panel {
    int x0, y0, x1, y1;
    double xmin, xmax, ymin, ymax; /* data range shown: y in nice round
                                      numbers; x from 0 to just past the
                                      last epoch (at least one epoch, about
                                      4% of the run), ticks at nice steps */
} fig_panel;

/* The panel a metrics column goes to, by its name: FIG_PANEL_LOSS for a
 * name ending in "loss", FIG_PANEL_ACC for one ending in "acc",
 * FIG_PANEL_LR for "lr", else FIG_PANEL_NONE (epoch, seconds, which the
 * loss panel's heading gives as the run's time, and any other column). */
enum { FIG_PANEL_NONE = -1, FIG_PANEL_LOSS = 0, FIG_PANEL_ACC = 1, FIG_PANEL_LR = 2 };
int fig_curves_panel_of(const char *name);

typedef struct fig_curves_layout {
    int width, height;
    fig_panel loss;  /* every *loss column (train loss, test loss) */
    fig_panel acc;   /* every *acc column (train, test, val accuracy) */
    fig_panel lr;    /* the learning rate, when has_lr */
    int has_lr;
    /* The ring around the final figure (centre pixel; -1 without one):
     * test accuracy at (final_x, final_y), validation at (final_x,
     * final_val_y); final_x is the epoch of the model scored (final.csv's
     * best_epoch when it names one, else its last). */
    int final_x, final_y, final_val_y;
} fig_curves_layout;

/* Series colours (also used in the legend); columns without one of their
 * own cycle through three more. */
extern const draw_rgb fig_train_loss_rgb, fig_test_loss_rgb, fig_test_acc_rgb, fig_train_acc_rgb,
    fig_val_acc_rgb, fig_val_loss_rgb, fig_lr_rgb;
/* Colour of the ring around the final figures. */
extern const draw_rgb fig_final_rgb;
/* Colour of the axis lines and tick marks. */
extern const draw_rgb fig_axis_rgb;

/* Pixel column of x and row of y in panel p (rounded to nearest). */
int fig_panel_x(const fig_panel *p, double x);
int fig_panel_y(const fig_panel *p, double y);

/* Draws the curves of m (vit_metrics_read, vit/metrics.h; at least one row)
 * onto a new canvas *out: a panel per kind of column (fig_curves_panel_of),
 * each with axes, ticks with labels, axis labels, a heading and a legend
 * that wraps onto more lines when it must, and the title at the top (may
 * be NULL).  Points are joined by 2-pixel lines whose top-left pixel is
 * the exact point (see draw_line); a NaN (an empty field: a figure not
 * measured, as the test columns of a run with a validation set) is a gap,
 * and a column of nothing else is not drawn.  final (may be NULL) is the
 * run's final.csv (vit/train.h): when its one row's epoch is m's last, its
 * test_acc (and val_acc) are ringed in fig_final_rgb on the accuracy
 * panel at the epoch of the model they score (best_epoch, when final.csv
 * names one, else that last epoch) and named in the legend with how they
 * were scored (tta, ema) and, for best.ckpt, its epoch: the figure the
 * run reported, which with test-time augmentation is not on the one-pass
 * curve.  Fills *lay. */
int fig_curves_draw(const vit_metrics_table *m, const vit_metrics_table *final, const char *title,
                    draw_canvas *out, fig_curves_layout *lay);

#endif
