/*
 * tools/draw.h - a tiny RGB raster for the picture tools (vit_attn,
 * vit_plot): filled rectangles, lines, a built-in 5x7 bitmap font, a colour
 * ramp for heat maps, and saving through vit_png_write.
 *
 * Coordinates are pixels, x to the right and y down, (0, 0) the top-left
 * pixel.  Every drawing call clips to the canvas, so shapes may run off it.
 * The canvas owns its pixel buffer (draw_canvas_free releases it).
 * Not thread-safe per canvas; separate canvases are independent.
 */
#ifndef VIT_TOOLS_DRAW_H
#define VIT_TOOLS_DRAW_H

#include "vit/vit.h"

typedef struct draw_rgb {
    unsigned char r, g, b;
} draw_rgb;

typedef struct draw_canvas {
    int width, height;
    unsigned char *px; /* [height, width, 3] RGB, row-major, malloc'd */
} draw_canvas;

/* The font: mixed case, every printable ASCII character; text is drawn as
 * given (never upper-cased) and a character without a glyph (control
 * characters, bytes of UTF-8 sequences) prints as '?'.  Glyphs are
 * DRAW_GLYPH_W x DRAW_GLYPH_H pixels at scale 1 and advance DRAW_ADVANCE
 * pixels.  Capitals, digits and ascenders fill the top DRAW_CAP_H rows;
 * the baseline is under them and descenders (g j p q y , ; _) use the rows
 * below. */
enum { DRAW_GLYPH_W = 5, DRAW_GLYPH_H = 9, DRAW_CAP_H = 7, DRAW_ADVANCE = 6 };

/* The bitmap of ch: DRAW_GLYPH_H rows of DRAW_GLYPH_W characters, '#' for
 * ink and '.' for none, row after row (that of '?' when ch has no glyph).
 * Static storage. */
const char *draw_glyph(char ch);

/* Allocates a width x height canvas filled with bg.  Returns VIT_OK;
 * VIT_EINVAL for a non-positive or too large size, VIT_ENOMEM (canvas
 * zeroed, message in vit_last_error()). */
int draw_canvas_init(draw_canvas *c, int width, int height, draw_rgb bg);

/* Frees the pixels and zeroes the struct; safe on a zeroed canvas. */
void draw_canvas_free(draw_canvas *c);

/* Colour of pixel (x, y); black outside the canvas. */
draw_rgb draw_get(const draw_canvas *c, int x, int y);

void draw_pixel(draw_canvas *c, int x, int y, draw_rgb col);

/* Filled w x h rectangle with top-left corner (x, y). */
void draw_fill(draw_canvas *c, int x, int y, int w, int h, draw_rgb col);

/* One-pixel outline of the w x h rectangle at (x, y) (inside its bounds). */
void draw_frame(draw_canvas *c, int x, int y, int w, int h, draw_rgb col);

/* Line from (x0, y0) to (x1, y1), both ends included (Bresenham).  With
 * thickness t > 1 every point becomes a t x t square whose top-left corner
 * is the point, so the exact line pixels are always painted. */
void draw_line(draw_canvas *c, int x0, int y0, int x1, int y1, int t, draw_rgb col);

/* Text with its top-left corner at (x, y), each font pixel a scale x scale
 * square.  '\n' is not special.  Returns the width drawn, as
 * draw_text_width. */
int draw_text(draw_canvas *c, int x, int y, const char *s, int scale, draw_rgb col);

/* Width in pixels of s at the scale: strlen * DRAW_ADVANCE * scale minus the
 * trailing gap (0 for ""). */
int draw_text_width(const char *s, int scale);

/* Text rotated a quarter turn counter-clockwise (reads bottom to top), for
 * y-axis labels.  (x, y) is the bottom-left corner of the rotated text box,
 * which is DRAW_GLYPH_H*scale wide and draw_text_width(s, scale) tall. */
void draw_text_up(draw_canvas *c, int x, int y, const char *s, int scale, draw_rgb col);

/* Heat-map colour of t in [0, 1] (clamped; NaN gives the colour of 0): a ramp
 * from dark indigo through blue, teal and green to yellow whose luminance
 * rises with t, so grey-scale prints keep the order. */
draw_rgb draw_colormap(double t);

/* Colour of pixel (row, col) of image [h, w, ch] as draw_image paints it:
 * each value in [0, 1] becomes the byte lround(255 * value) (clamped; NaN
 * gives 0); ch 1 is grey (r = g = b), ch 3 is RGB. */
draw_rgb draw_image_rgb(const vit_real *image, int w, int ch, int row, int col);

/* over laid on under with opacity alpha in [0, 1] (clamped): each channel
 * lround((1 - alpha) * under + alpha * over). */
draw_rgb draw_blend(draw_rgb under, draw_rgb over, double alpha);

/* Draws image [h, w, ch] (values in [0, 1], ch 1 = grey or 3 = RGB) with its
 * top-left corner at (x, y), each image pixel a scale x scale square. */
void draw_image(draw_canvas *c, int x, int y, const vit_real *image, int h, int w, int ch,
                int scale);

/* Writes the canvas as an RGB PNG with vit_png_write (atomic).  Returns
 * VIT_OK or its error code (message in vit_last_error). */
int draw_save_png(const draw_canvas *c, const char *path);

#endif
