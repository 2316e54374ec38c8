/* A tiny RGB raster for the picture tools; see draw.h. */
#include "draw.h"

#include <ctype.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* ---- canvas ------------------------------------------------------------ */

int draw_canvas_init(draw_canvas *c, int width, int height, draw_rgb bg)
{
    memset(c, 0, sizeof *c);
    if (width <= 0 || height <= 0 || (size_t)width > SIZE_MAX / 3 / (size_t)height)
        return -1;
    size_t n = (size_t)width * (size_t)height;
    c->px = malloc(n * 3);
    if (!c->px)
        return -1;
    c->width = width;
    c->height = height;
    for (size_t i = 0; i < n; i++) {
        c->px[3 * i] = bg.r;
        c->px[3 * i + 1] = bg.g;
        c->px[3 * i + 2] = bg.b;
    }
    return 0;
}

void draw_canvas_free(draw_canvas *c)
{
    free(c->px);
    memset(c, 0, sizeof *c);
}

static int inside(const draw_canvas *c, int x, int y)
{
    return x >= 0 && y >= 0 && x < c->width && y < c->height;
}

draw_rgb draw_get(const draw_canvas *c, int x, int y)
{
    if (!inside(c, x, y))
        return (draw_rgb){0, 0, 0};
    const unsigned char *p = c->px + 3 * ((size_t)y * (size_t)c->width + (size_t)x);
    return (draw_rgb){p[0], p[1], p[2]};
}

void draw_pixel(draw_canvas *c, int x, int y, draw_rgb col)
{
    if (!inside(c, x, y))
        return;
    unsigned char *p = c->px + 3 * ((size_t)y * (size_t)c->width + (size_t)x);
    p[0] = col.r;
    p[1] = col.g;
    p[2] = col.b;
}

void draw_fill(draw_canvas *c, int x, int y, int w, int h, draw_rgb col)
{
    /* Clip once so huge rectangles cost only their visible part. */
    int xa = x < 0 ? 0 : x, ya = y < 0 ? 0 : y;
    int xb = x + w > c->width ? c->width : x + w, yb = y + h > c->height ? c->height : y + h;
    for (int j = ya; j < yb; j++)
        for (int i = xa; i < xb; i++)
            draw_pixel(c, i, j, col);
}

void draw_frame(draw_canvas *c, int x, int y, int w, int h, draw_rgb col)
{
    if (w <= 0 || h <= 0)
        return;
    draw_fill(c, x, y, w, 1, col);
    draw_fill(c, x, y + h - 1, w, 1, col);
    draw_fill(c, x, y, 1, h, col);
    draw_fill(c, x + w - 1, y, 1, h, col);
}

void draw_line(draw_canvas *c, int x0, int y0, int x1, int y1, int t, draw_rgb col)
{
    if (t < 1)
        t = 1;
    int dx = abs(x1 - x0), dy = -abs(y1 - y0);
    int sx = x0 < x1 ? 1 : -1, sy = y0 < y1 ? 1 : -1;
    int err = dx + dy;
    for (;;) {
        draw_fill(c, x0, y0, t, t, col);
        if (x0 == x1 && y0 == y1)
            break;
        int e2 = 2 * err;
        if (e2 >= dy) {
            err += dy;
            x0 += sx;
        }
        if (e2 <= dx) {
            err += dx;
            y0 += sy;
        }
    }
}

/* ---- font -------------------------------------------------------------- */

/* Each glyph is 7 rows of 5 columns, '#' for ink, written row after row. */
typedef struct glyph {
    char ch;
    const char *rows;
} glyph;

static const glyph font[] = {
    {' ', "....." "....." "....." "....." "....." "....." "....."},
    {'0', ".###." "#...#" "#..##" "#.#.#" "##..#" "#...#" ".###."},
    {'1', "..#.." ".##.." "..#.." "..#.." "..#.." "..#.." ".###."},
    {'2', ".###." "#...#" "....#" "...#." "..#.." ".#..." "#####"},
    {'3', "#####" "...#." "..#.." "...#." "....#" "#...#" ".###."},
    {'4', "...#." "..##." ".#.#." "#..#." "#####" "...#." "...#."},
    {'5', "#####" "#...." "####." "....#" "....#" "#...#" ".###."},
    {'6', "..##." ".#..." "#...." "####." "#...#" "#...#" ".###."},
    {'7', "#####" "....#" "...#." "..#.." ".#..." ".#..." ".#..."},
    {'8', ".###." "#...#" "#...#" ".###." "#...#" "#...#" ".###."},
    {'9', ".###." "#...#" "#...#" ".####" "....#" "...#." ".##.."},
    {'A', ".###." "#...#" "#...#" "#####" "#...#" "#...#" "#...#"},
    {'B', "####." "#...#" "#...#" "####." "#...#" "#...#" "####."},
    {'C', ".###." "#...#" "#...." "#...." "#...." "#...#" ".###."},
    {'D', "###.." "#..#." "#...#" "#...#" "#...#" "#..#." "###.."},
    {'E', "#####" "#...." "#...." "####." "#...." "#...." "#####"},
    {'F', "#####" "#...." "#...." "####." "#...." "#...." "#...."},
    {'G', ".###." "#...#" "#...." "#.###" "#...#" "#...#" ".####"},
    {'H', "#...#" "#...#" "#...#" "#####" "#...#" "#...#" "#...#"},
    {'I', ".###." "..#.." "..#.." "..#.." "..#.." "..#.." ".###."},
    {'J', "..###" "...#." "...#." "...#." "...#." "#..#." ".##.."},
    {'K', "#...#" "#..#." "#.#.." "##..." "#.#.." "#..#." "#...#"},
    {'L', "#...." "#...." "#...." "#...." "#...." "#...." "#####"},
    {'M', "#...#" "##.##" "#.#.#" "#.#.#" "#...#" "#...#" "#...#"},
    {'N', "#...#" "#...#" "##..#" "#.#.#" "#..##" "#...#" "#...#"},
    {'O', ".###." "#...#" "#...#" "#...#" "#...#" "#...#" ".###."},
    {'P', "####." "#...#" "#...#" "####." "#...." "#...." "#...."},
    {'Q', ".###." "#...#" "#...#" "#...#" "#.#.#" "#..#." ".##.#"},
    {'R', "####." "#...#" "#...#" "####." "#.#.." "#..#." "#...#"},
    {'S', ".####" "#...." "#...." ".###." "....#" "....#" "####."},
    {'T', "#####" "..#.." "..#.." "..#.." "..#.." "..#.." "..#.."},
    {'U', "#...#" "#...#" "#...#" "#...#" "#...#" "#...#" ".###."},
    {'V', "#...#" "#...#" "#...#" "#...#" "#...#" ".#.#." "..#.."},
    {'W', "#...#" "#...#" "#...#" "#.#.#" "#.#.#" "#.#.#" ".#.#."},
    {'X', "#...#" "#...#" ".#.#." "..#.." ".#.#." "#...#" "#...#"},
    {'Y', "#...#" "#...#" ".#.#." "..#.." "..#.." "..#.." "..#.."},
    {'Z', "#####" "....#" "...#." "..#.." ".#..." "#...." "#####"},
    {'.', "....." "....." "....." "....." "....." ".##.." ".##.."},
    {',', "....." "....." "....." "....." ".##.." "..#.." ".#..."},
    {':', "....." ".##.." ".##.." "....." ".##.." ".##.." "....."},
    {'-', "....." "....." "....." "#####" "....." "....." "....."},
    {'+', "....." "..#.." "..#.." "#####" "..#.." "..#.." "....."},
    {'=', "....." "....." "#####" "....." "#####" "....." "....."},
    {'_', "....." "....." "....." "....." "....." "....." "#####"},
    {'/', "....." "....#" "...#." "..#.." ".#..." "#...." "....."},
    {'%', "##..." "##..#" "...#." "..#.." ".#..." "#..##" "...##"},
    {'(', "...#." "..#.." ".#..." ".#..." ".#..." "..#.." "...#."},
    {')', ".#..." "..#.." "...#." "...#." "...#." "..#.." ".#..."},
    {'[', ".###." ".#..." ".#..." ".#..." ".#..." ".#..." ".###."},
    {']', ".###." "...#." "...#." "...#." "...#." "...#." ".###."},
    {'#', ".#.#." ".#.#." "#####" ".#.#." "#####" ".#.#." ".#.#."},
    {'*', "....." "..#.." "#.#.#" ".###." "#.#.#" "..#.." "....."},
    {'!', "..#.." "..#.." "..#.." "..#.." "..#.." "....." "..#.."},
    {'\'', "..#.." "..#.." ".#..." "....." "....." "....." "....."},
    {'?', ".###." "#...#" "....#" "...#." "..#.." "....." "..#.."},
};

static const char *glyph_rows(char ch)
{
    char up = (char)toupper((unsigned char)ch);
    for (size_t i = 0; i < sizeof font / sizeof font[0]; i++)
        if (font[i].ch == up)
            return font[i].rows;
    return glyph_rows('?');
}

int draw_text_width(const char *s, int scale)
{
    size_t n = strlen(s);
    return n ? (int)n * DRAW_ADVANCE * scale - (DRAW_ADVANCE - DRAW_GLYPH_W) * scale : 0;
}

/* Paints every ink pixel of s: at (x + tx, y + ty) for the pixel's text
 * coordinates (tx to the right, ty down, scale applied), or turned a
 * quarter counter-clockwise about (x, y) when up is set. */
static void text_pixels(draw_canvas *c, int x, int y, const char *s, int scale, draw_rgb col,
                        int up)
{
    for (int k = 0; s[k]; k++) {
        const char *rows = glyph_rows(s[k]);
        for (int gy = 0; gy < DRAW_GLYPH_H; gy++)
            for (int gx = 0; gx < DRAW_GLYPH_W; gx++) {
                if (rows[gy * DRAW_GLYPH_W + gx] != '#')
                    continue;
                int tx = (k * DRAW_ADVANCE + gx) * scale, ty = gy * scale;
                /* Rotating a quarter turn counter-clockwise maps the text's
                 * (right, down) to the canvas's (up, right). */
                if (up)
                    draw_fill(c, x + ty, y - tx - scale, scale, scale, col);
                else
                    draw_fill(c, x + tx, y + ty, scale, scale, col);
            }
    }
}

int draw_text(draw_canvas *c, int x, int y, const char *s, int scale, draw_rgb col)
{
    text_pixels(c, x, y, s, scale, col, 0);
    return draw_text_width(s, scale);
}

void draw_text_up(draw_canvas *c, int x, int y, const char *s, int scale, draw_rgb col)
{
    text_pixels(c, x, y + 1, s, scale, col, 1);
}

/* ---- colours and images ------------------------------------------------ */

draw_rgb draw_colormap(double t)
{
    /* Five hand-picked stops; luminance (0.21 R + 0.72 G + 0.07 B) is about
     * 18, 73, 122, 184 and 222, so the ramp reads dark to light and is
     * linear in between. */
    static const double stop[5][3] = {
        {20, 14, 54}, {46, 72, 160}, {28, 148, 140}, {150, 205, 70}, {250, 232, 40},
    };
    if (!(t > 0))
        t = 0;
    if (t > 1)
        t = 1;
    double s = t * 4;
    int i = (int)s;
    if (i > 3)
        i = 3;
    double f = s - i;
    unsigned char v[3];
    for (int k = 0; k < 3; k++)
        v[k] = (unsigned char)lround(stop[i][k] + f * (stop[i + 1][k] - stop[i][k]));
    return (draw_rgb){v[0], v[1], v[2]};
}

static unsigned char byte_of(vit_real v)
{
    double d = (double)v;
    if (!(d > 0))
        return 0;
    return d >= 1 ? 255 : (unsigned char)lround(d * 255);
}

void draw_image(draw_canvas *c, int x, int y, const vit_real *image, int h, int w, int ch,
                int scale)
{
    for (int i = 0; i < h; i++)
        for (int j = 0; j < w; j++) {
            const vit_real *p = image + ((size_t)i * (size_t)w + (size_t)j) * (size_t)ch;
            draw_rgb col = ch == 3 ? (draw_rgb){byte_of(p[0]), byte_of(p[1]), byte_of(p[2])}
                                   : (draw_rgb){byte_of(p[0]), byte_of(p[0]), byte_of(p[0])};
            draw_fill(c, x + j * scale, y + i * scale, scale, scale, col);
        }
}

int draw_save_png(const draw_canvas *c, const char *path)
{
    return vit_png_write(path, c->px, c->height, c->width, 3);
}
