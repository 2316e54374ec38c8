/* tests/test_pictures.c - the pictures of vit_attn and vit_plot (float32
 * build), drawn with the tools' own code (tools/draw.c, tools/figures.c),
 * written as PNG, read back with vit_png_read and checked pixel by pixel
 * where the expected pixel follows from the layout: a one-hot attention map
 * lights exactly one patch cell, axis lines are dark, a curve passes through
 * the pixel its data point maps to.  Files go to a mkdtemp folder. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../tools/draw.h"
#include "../tools/figures.h"
#include "file_util.h"
#include "vit/vit.h"

static void write_text(const char *rel, const char *text)
{
    FILE *f = fopen(fu_path(rel), "w");
    ck_assert_ptr_nonnull(f);
    ck_assert_int_eq(fputs(text, f) >= 0, 1);
    ck_assert_int_eq(fclose(f), 0);
}

/* A PNG read back as bytes [h, w, 3]. */
typedef struct picture {
    int h, w;
    unsigned char *px;
} picture;

static picture save_and_read(const draw_canvas *c, const char *rel)
{
    ck_assert_int_eq(draw_save_png(c, fu_path(rel)), VIT_OK);
    vit_real *v = NULL;
    int h, w, ch;
    ck_assert_int_eq(vit_png_read(fu_path(rel), &v, &h, &w, &ch), VIT_OK);
    ck_assert_int_eq(ch, 3);
    picture p = {h, w, malloc((size_t)h * w * 3)};
    ck_assert_ptr_nonnull(p.px);
    for (size_t i = 0; i < (size_t)h * w * 3; i++)
        p.px[i] = (unsigned char)lround((double)v[i] * 255);
    free(v);
    return p;
}

static draw_rgb at(const picture *p, int x, int y)
{
    ck_assert_msg(x >= 0 && y >= 0 && x < p->w && y < p->h, "pixel (%d,%d) outside %dx%d", x, y,
                  p->w, p->h);
    const unsigned char *q = p->px + 3 * ((size_t)y * p->w + x);
    return (draw_rgb){q[0], q[1], q[2]};
}

static int same(draw_rgb a, draw_rgb b) { return a.r == b.r && a.g == b.g && a.b == b.b; }

static double luminance(draw_rgb c) { return 0.2126 * c.r + 0.7152 * c.g + 0.0722 * c.b; }

static int dark(draw_rgb c) { return c.r < 80 && c.g < 80 && c.b < 80; }

/* ------------------------------------------------------------ primitives */

START_TEST(font_and_text)
{
    draw_canvas c;
    const draw_rgb white = {255, 255, 255}, black = {0, 0, 0};
    ck_assert_int_eq(draw_canvas_init(&c, 40, 30, white), 0);
    ck_assert_int_eq(draw_text_width("", 1), 0);
    ck_assert_int_eq(draw_text_width("AB", 1), 11);  /* 5 + 1 + 5 */
    ck_assert_int_eq(draw_text_width("AB", 2), 22);
    /* A minus sign is the middle row of the glyph: 5 pixels in row y + 3. */
    ck_assert_int_eq(draw_text(&c, 10, 10, "-", 1, black), 5);
    for (int y = 0; y < 30; y++)
        for (int x = 0; x < 40; x++)
            ck_assert_msg(same(draw_get(&c, x, y), black) == (y == 13 && x >= 10 && x <= 14),
                          "minus sign pixel (%d,%d)", x, y);
    /* Turned a quarter counter-clockwise, with (20, 25) the bottom-left
     * corner, the minus becomes a vertical bar in column 23, rows 21..25. */
    draw_fill(&c, 0, 0, 40, 30, white);
    draw_text_up(&c, 20, 25, "-", 1, black);
    for (int y = 0; y < 30; y++)
        for (int x = 0; x < 40; x++)
            ck_assert_msg(same(draw_get(&c, x, y), black) == (x == 23 && y >= 21 && y <= 25),
                          "upward minus pixel (%d,%d)", x, y);
    /* A character without a glyph prints as '?'; lower case does not print
     * as upper case. */
    draw_canvas d;
    ck_assert_int_eq(draw_canvas_init(&d, 40, 30, white), 0);
    draw_fill(&c, 0, 0, 40, 30, white);
    draw_text(&c, 1, 1, "q\x01\xc3", 1, black);
    draw_text(&d, 1, 1, "q??", 1, black);
    ck_assert_int_eq(memcmp(c.px, d.px, 40 * 30 * 3), 0);
    draw_fill(&d, 0, 0, 40, 30, white);
    draw_text(&d, 1, 1, "Q??", 1, black);
    ck_assert_int_ne(memcmp(c.px, d.px, 40 * 30 * 3), 0);
    draw_canvas_free(&c);
    draw_canvas_free(&d);
}
END_TEST

/* Ink rows of a glyph: bit r set when row r has ink. */
static unsigned ink_rows(const char *rows)
{
    unsigned bits = 0;
    for (int r = 0; r < DRAW_GLYPH_H; r++)
        for (int x = 0; x < DRAW_GLYPH_W; x++)
            if (rows[r * DRAW_GLYPH_W + x] == '#')
                bits |= 1u << r;
    return bits;
}

START_TEST(font_glyph_set)
{
    /* Every printable ASCII character has its own well-formed glyph, no two
     * alike (so none falls back to '?' and no letter borrows its capital). */
    for (int a = 32; a < 127; a++) {
        const char *g = draw_glyph((char)a);
        ck_assert_int_eq(strlen(g), DRAW_GLYPH_W * DRAW_GLYPH_H);
        ck_assert_msg(strspn(g, "#.") == strlen(g), "glyph '%c' has other characters", a);
        ck_assert_msg((a == ' ') == (ink_rows(g) == 0), "glyph '%c': ink", a);
        for (int b = 32; b < a; b++)
            ck_assert_msg(strcmp(g, draw_glyph((char)b)) != 0, "glyphs '%c' and '%c' are alike",
                          a, b);
    }
    ck_assert_ptr_eq(draw_glyph('\n'), draw_glyph('?'));
    ck_assert_ptr_eq(draw_glyph((char)0xe9), draw_glyph('?'));
    /* Capitals and digits stand on the baseline (rows 0..DRAW_CAP_H-1);
     * lower case without ascenders starts at row 2, descenders go below. */
    const unsigned below = ~0u << DRAW_CAP_H, top = 3u;
    for (const char *p = "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789bdfhiklt"; *p; p++)
        ck_assert_msg((ink_rows(draw_glyph(*p)) & below) == 0, "'%c' below the baseline", *p);
    for (const char *p = "acegmnopqrsuvwxyz"; *p; p++)
        ck_assert_msg((ink_rows(draw_glyph(*p)) & top) == 0, "'%c' above the x-height", *p);
    for (const char *p = "bdfhklt"; *p; p++)
        ck_assert_msg(ink_rows(draw_glyph(*p)) & 1u, "'%c' has no ascender", *p);
    for (const char *p = "gjpqy,;_"; *p; p++)
        ck_assert_msg(ink_rows(draw_glyph(*p)) & below, "'%c' has no descender", *p);
}
END_TEST

START_TEST(text_drawn_as_given)
{
    /* A path and a title in mixed case, at scale 2, written and read back:
     * every pixel of every glyph cell is ink exactly where the bitmap of the
     * character as given (not its capital) has '#', and the gaps are blank. */
    const char *s = "runs/Pic_1: a,A (5%) = 0.9+x";
    const int scale = 2, x0 = 3, y0 = 4, n = (int)strlen(s);
    const draw_rgb white = {255, 255, 255}, ink = {20, 30, 40};
    draw_canvas c;
    int w = draw_text_width(s, scale) + 2 * x0, h = DRAW_GLYPH_H * scale + 2 * y0;
    ck_assert_int_eq(draw_canvas_init(&c, w, h, white), 0);
    ck_assert_int_eq(draw_text(&c, x0, y0, s, scale, ink), draw_text_width(s, scale));
    picture p = save_and_read(&c, "text.png");
    for (int y = 0; y < h; y++)
        for (int x = 0; x < w; x++) {
            int tx = (x - x0) / scale, ty = (y - y0) / scale, k = tx / DRAW_ADVANCE;
            int gx = tx % DRAW_ADVANCE, want = 0;
            if (x >= x0 && y >= y0 && k < n && gx < DRAW_GLYPH_W && ty < DRAW_GLYPH_H)
                want = draw_glyph(s[k])[ty * DRAW_GLYPH_W + gx] == '#';
            ck_assert_msg(same(at(&p, x, y), want ? ink : white), "pixel (%d,%d), char %d '%c'", x,
                          y, k, k < n ? s[k] : ' ');
        }
    /* The 'a' (character 12) and the 'A' (14) differ on the picture. */
    int differ = 0;
    for (int y = y0; y < y0 + DRAW_GLYPH_H * scale; y++)
        for (int x = 0; x < DRAW_GLYPH_W * scale; x++)
            differ += !same(at(&p, x0 + 12 * DRAW_ADVANCE * scale + x, y),
                            at(&p, x0 + 14 * DRAW_ADVANCE * scale + x, y));
    ck_assert_int_gt(differ, 8);
    free(p.px);
    /* Upward text keeps the case and the descender: 'g' turned a quarter
     * counter-clockwise about its bottom-left corner (20, 25). */
    draw_canvas_free(&c);
    ck_assert_int_eq(draw_canvas_init(&c, 40, 30, white), 0);
    draw_text_up(&c, 20, 25, "g", 1, ink);
    const char *g = draw_glyph('g');
    for (int y = 0; y < 30; y++)
        for (int x = 0; x < 40; x++) {
            int gy = x - 20, gx = 25 - y;
            int want = gy >= 0 && gy < DRAW_GLYPH_H && gx >= 0 && gx < DRAW_GLYPH_W &&
                       g[gy * DRAW_GLYPH_W + gx] == '#';
            ck_assert_msg(same(draw_get(&c, x, y), want ? ink : white), "upward g (%d,%d)", x, y);
        }
    draw_canvas_free(&c);
}
END_TEST

START_TEST(lines_and_clipping)
{
    draw_canvas c;
    const draw_rgb white = {255, 255, 255}, red = {255, 0, 0};
    ck_assert_int_eq(draw_canvas_init(&c, 20, 20, white), 0);
    draw_line(&c, 0, 0, 9, 9, 1, red);
    for (int i = 0; i < 10; i++)
        ck_assert(same(draw_get(&c, i, i), red));
    ck_assert(same(draw_get(&c, 1, 0), white));
    /* A 2-pixel line paints the 1-pixel line plus the pixel right and below. */
    draw_line(&c, 2, 15, 12, 15, 2, red);
    for (int x = 2; x <= 13; x++)
        ck_assert(same(draw_get(&c, x, 15), red) && same(draw_get(&c, x, 16), red));
    ck_assert(same(draw_get(&c, 2, 14), white) && same(draw_get(&c, 14, 15), white));
    /* Off-canvas drawing is clipped, not a crash. */
    draw_line(&c, -50, -7, 70, 40, 3, red);
    draw_fill(&c, -100, -1, 1000, 2, red); /* only row 0 is on the canvas */
    draw_text(&c, 15, 18, "WIDE TEXT", 3, red);
    ck_assert(same(draw_get(&c, 5, 0), red) && same(draw_get(&c, 19, 0), red));
    ck_assert(same(draw_get(&c, 5, 1), white));
    draw_canvas_free(&c);
    ck_assert_int_eq(draw_canvas_init(&c, 0, 5, white), VIT_EINVAL);
    ck_assert_ptr_null(c.px);
    draw_canvas_free(&c);
}
END_TEST

START_TEST(colormap_ramp)
{
    double prev = -1;
    for (int i = 0; i <= 256; i++) {
        double l = luminance(draw_colormap(i / 256.0));
        ck_assert_msg(l >= prev, "luminance falls at t = %d/256", i);
        prev = l;
    }
    ck_assert(luminance(draw_colormap(0)) < 40);
    ck_assert(luminance(draw_colormap(1)) > 200);
    ck_assert(same(draw_colormap(-3), draw_colormap(0)));
    ck_assert(same(draw_colormap(7), draw_colormap(1)));
    ck_assert(same(draw_colormap(NAN), draw_colormap(0)));
}
END_TEST

/* ------------------------------------------------------ attention figure */

enum { GH = 4, GW = 4, LAYERS = 2, HEADS = 3, IMG = 8 };

/* The hot patch of map (layer, head) in the one-hot test. */
static int hot_cell(int l, int h) { return (l * HEADS + h) * 5 % (GH * GW); }

static void one_hot_maps(vit_real *maps)
{
    for (int l = 0; l < LAYERS; l++)
        for (int h = 0; h < HEADS; h++)
            for (int i = 0; i < GH * GW; i++)
                maps[(l * HEADS + h) * GH * GW + i] = i == hot_cell(l, h) ? (vit_real)0.9 : 0;
}

/* The documented overlay, computed here: per channel
 * lround((1 - FIG_ATTN_ALPHA) * input + FIG_ATTN_ALPHA * heat). */
static draw_rgb overlay(draw_rgb in, draw_rgb heat)
{
    const double a = FIG_ATTN_ALPHA;
    return (draw_rgb){(unsigned char)lround((1 - a) * in.r + a * heat.r),
                      (unsigned char)lround((1 - a) * in.g + a * heat.g),
                      (unsigned char)lround((1 - a) * in.b + a * heat.b)};
}

START_TEST(attention_one_hot_cells)
{
    vit_real image[IMG * IMG] = {0}, maps[LAYERS * HEADS * GH * GW];
    image[3 * IMG + 5] = 1; /* one white pixel: row 3, column 5 */
    one_hot_maps(maps);
    fig_attn f = {.image = image, .height = IMG, .width = IMG, .channels = 1, .grid_h = GH,
                  .grid_w = GW, .layers = LAYERS, .heads = HEADS, .maps = maps, .query = -1,
                  .title = "TEST", .notes = {"A NOTE", NULL}};
    draw_canvas c;
    fig_attn_layout lay;
    ck_assert_msg(fig_attn_draw(&f, &c, &lay) == VIT_OK, "%s", vit_last_error());
    picture p = save_and_read(&c, "attn.png");
    ck_assert_int_eq(p.w, lay.width);
    ck_assert_int_eq(p.h, lay.height);
    ck_assert_int_ge(lay.cell * GW, FIG_MAP_MIN_PX);
    ck_assert_int_ge(lay.cell * GH, FIG_MAP_MIN_PX);

    /* The map is the image upsampled by a whole factor, a patch a cell.
     * The default scale is absolute: weight 0.9 is 0.9 of the ramp. */
    ck_assert_int_eq(lay.cell, IMG / GH * lay.map_scale);
    draw_rgb hot = draw_colormap(0.9), cold = draw_colormap(0), white = {255, 255, 255},
             black = {0, 0, 0};
    ck_assert(FIG_ATTN_ALPHA > 0.3 && FIG_ATTN_ALPHA < 0.9);
    for (int l = 0; l < LAYERS; l++)
        for (int h = 0; h < HEADS; h++) {
            int x0, y0;
            fig_attn_map_origin(&lay, l, h, &x0, &y0);
            /* Every pixel of every cell: the heat colour, hot only inside
             * the one patch, blended over the input's pixel (white only at
             * row 3, column 5). */
            for (int y = 0; y < GH * lay.cell; y++)
                for (int x = 0; x < GW * lay.cell; x++) {
                    int cell = (y / lay.cell) * GW + x / lay.cell;
                    int lit = y / lay.map_scale == 3 && x / lay.map_scale == 5;
                    draw_rgb want = overlay(lit ? white : black, cell == hot_cell(l, h) ? hot : cold);
                    ck_assert_msg(same(at(&p, x0 + x, y0 + y), want),
                                  "L%d H%d pixel (%d,%d) of cell %d", l, h, x, y, cell);
                }
            /* Maps do not overlap: the next one starts past this one. */
            ck_assert_int_gt(lay.pitch_x, GW * lay.cell);
            ck_assert_int_gt(lay.pitch_y, GH * lay.cell);
        }
    /* The input image, upsampled: its white pixel and a black one. */
    int s = lay.image_scale;
    ck_assert_int_ge(s * IMG, FIG_MAP_MIN_PX);
    draw_rgb w = at(&p, lay.image_x + 5 * s + s / 2, lay.image_y + 3 * s + s / 2);
    draw_rgb b = at(&p, lay.image_x + 2 * s + s / 2, lay.image_y + 6 * s + s / 2);
    ck_assert(w.r == 255 && w.g == 255 && w.b == 255);
    ck_assert(b.r == 0 && b.g == 0 && b.b == 0);
    free(p.px);
    draw_canvas_free(&c);
}
END_TEST

START_TEST(attention_scale_and_query_outline)
{
    /* Weights 0, 1/3, 2/3 of the map's largest weight get those colours,
     * blended over an RGB input of many colours; a patch query is outlined
     * in white on every map. */
    vit_real image[IMG * IMG * 3], maps[GH * GW];
    for (int i = 0; i < IMG * IMG * 3; i++)
        image[i] = (vit_real)((i * 5 + i / 3) % 7) / 6;
    for (int i = 0; i < GH * GW; i++)
        maps[i] = (vit_real)(0.125 * (i % 4)); /* exact in binary */
    int query = 1 * GW + 2;
    fig_attn f = {.image = image, .height = IMG, .width = IMG, .channels = 3, .grid_h = GH,
                  .grid_w = GW, .layers = 1, .heads = 1, .maps = maps, .query = query,
                  .scale = FIG_SCALE_MAP};
    draw_canvas c;
    fig_attn_layout lay;
    ck_assert_msg(fig_attn_draw(&f, &c, &lay) == VIT_OK, "%s", vit_last_error());
    picture p = save_and_read(&c, "attn_q.png");
    int x0, y0, k = lay.cell, ms = lay.map_scale;
    fig_attn_map_origin(&lay, 0, 0, &x0, &y0);
    ck_assert_int_eq(k, IMG / GH * ms);
    int qx = x0 + 2 * k, qy = y0 + 1 * k;
    for (int y = 0; y < GH * k; y++)
        for (int x = 0; x < GW * k; x++) {
            if (x0 + x >= qx && x0 + x < qx + k && y0 + y >= qy && y0 + y < qy + k &&
                (x % k == 0 || x % k == k - 1 || y % k == 0 || y % k == k - 1))
                continue; /* the query's outline */
            int i = y / ms, j = x / ms, cell = (y / k) * GW + x / k;
            const vit_real *v = image + (i * IMG + j) * 3;
            draw_rgb in = {(unsigned char)lround((double)v[0] * 255),
                           (unsigned char)lround((double)v[1] * 255),
                           (unsigned char)lround((double)v[2] * 255)};
            draw_rgb want = overlay(in, draw_colormap((cell % 4) / 3.0)), got = at(&p, x0 + x, y0 + y);
            ck_assert_msg(same(got, want), "map pixel (%d,%d): (%d,%d,%d), want (%d,%d,%d)", x, y,
                          got.r, got.g, got.b, want.r, want.g, want.b);
        }
    draw_rgb white = {255, 255, 255};
    ck_assert(same(at(&p, qx, qy + k / 2), white));
    ck_assert(same(at(&p, qx + k - 1, qy + k / 2), white));
    ck_assert(same(at(&p, qx + k / 2, qy), white));
    ck_assert(!same(at(&p, qx + 1, qy + k / 2), white));
    /* RGB input shown in colour beside the maps: pixel (0,2) is
     * (4/6, 2/6, 0) of 255, rounded. */
    int s = lay.image_scale;
    draw_rgb px = at(&p, lay.image_x + 2 * s + s / 2, lay.image_y + s / 2);
    ck_assert_msg(px.r == 170 && px.g == 85 && px.b == 0, "(%d,%d,%d)", px.r, px.g, px.b);
    free(p.px);
    draw_canvas_free(&c);
}
END_TEST

/* Every pixel of map (l, h) on p, over the black input of the test, is
 * overlay(black, draw_colormap(t)); its colour returned. */
static draw_rgb expect_flat_map(const picture *p, const fig_attn_layout *lay, int l, int h, double t)
{
    int x0, y0;
    fig_attn_map_origin(lay, l, h, &x0, &y0);
    draw_rgb want = overlay((draw_rgb){0, 0, 0}, draw_colormap(t));
    for (int y = 0; y < GH * lay->cell; y++)
        for (int x = 0; x < GW * lay->cell; x++) {
            draw_rgb got = at(p, x0 + x, y0 + y);
            ck_assert_msg(same(got, want), "L%d H%d pixel (%d,%d): (%d,%d,%d), want (%d,%d,%d)",
                          l, h, x, y, got.r, got.g, got.b, want.r, want.g, want.b);
        }
    return want;
}

START_TEST(attention_shared_scale)
{
    /* Map 0 uniform (1/16 on each of 16 patches), map 1 peaked (0.5 on one
     * patch); a black input.  The default absolute scale draws the uniform
     * map flat and dark, at 1/16 of the ramp, so it does not look like
     * structure; FIG_SCALE_FIGURE draws it at (1/16)/0.5, the figure's
     * largest; FIG_SCALE_MAP (asked for) at the top colour, as before. */
    vit_real image[IMG * IMG] = {0}, maps[2 * GH * GW];
    for (int i = 0; i < GH * GW; i++) {
        maps[i] = (vit_real)(1.0 / (GH * GW));
        maps[GH * GW + i] = i == 5 ? (vit_real)0.5 : (vit_real)(0.5 / (GH * GW - 1));
    }
    fig_attn f = {.image = image, .height = IMG, .width = IMG, .channels = 1, .grid_h = GH,
                  .grid_w = GW, .layers = 1, .heads = 2, .maps = maps, .query = -1};
    draw_canvas c;
    fig_attn_layout lay;
    const double t[3] = {1.0 / 16, 1.0 / 16 / 0.5, 1}; /* absolute, figure, map */
    const char *name[3] = {"abs.png", "fig.png", "map.png"};
    for (int scale = FIG_SCALE_ABSOLUTE; scale <= FIG_SCALE_MAP; scale++) {
        f.scale = scale;
        ck_assert_msg(fig_attn_draw(&f, &c, &lay) == VIT_OK, "%s", vit_last_error());
        picture p = save_and_read(&c, name[scale]);
        draw_rgb flat = expect_flat_map(&p, &lay, 0, 0, t[scale]);
        if (scale == FIG_SCALE_ABSOLUTE)
            ck_assert_msg(luminance(flat) < 60, "uniform map at luminance %.0f", luminance(flat));
        else if (scale == FIG_SCALE_MAP)
            ck_assert(luminance(flat) > 120);
        /* The peaked map's hot patch: 0.5 of the ramp, or its top. */
        int x0, y0;
        fig_attn_map_origin(&lay, 0, 1, &x0, &y0);
        draw_rgb hot = at(&p, x0 + 1 * lay.cell + lay.cell / 2, y0 + 1 * lay.cell + lay.cell / 2);
        draw_rgb want = overlay((draw_rgb){0, 0, 0},
                                draw_colormap(scale == FIG_SCALE_ABSOLUTE ? 0.5 : 1));
        ck_assert_msg(same(hot, want), "scale %d: hot patch (%d,%d,%d)", scale, hot.r, hot.g,
                      hot.b);
        const double top[3] = {1, 0.5, 1.0 / 16};
        ck_assert(fabs(fig_attn_top(&f, 0, 0) - top[scale]) < 1e-7);
        free(p.px);
        draw_canvas_free(&c);
    }
    f.scale = 3;
    ck_assert_int_eq(fig_attn_draw(&f, &c, &lay), VIT_EINVAL);
    ck_assert_msg(strstr(vit_last_error(), "colour scale 3") != NULL, "%s", vit_last_error());
}
END_TEST

/* Layers of their own grids (a Swin's stages): layer 0 on 4x4 with 2
 * heads, layer 1 on 2x2 with 1 (its second column left empty), the maps
 * packed layer after layer; each map one-hot, every pixel checked on its
 * own grid's cells; the row headings move the maps down a line; the query
 * frame on layer 1's own cell. */
START_TEST(attention_layers_of_their_own)
{
    vit_real image[IMG * IMG] = {0}, maps[2 * 16 + 4] = {0};
    const int gh[2] = {4, 2}, gw[2] = {4, 2}, heads[2] = {2, 1}, query[2] = {5, 0};
    const int hot[2][2] = {{6, 9}, {3, -1}};
    maps[hot[0][0]] = maps[16 + hot[0][1]] = maps[32 + hot[1][0]] = (vit_real)0.9;
    const char *const names[2] = {"L0 STAGE 1", "L1 STAGE 2"};
    fig_attn f = {.image = image, .height = IMG, .width = IMG, .channels = 1, .grid_h = 4,
                  .grid_w = 4, .layers = 2, .heads = 2, .maps = maps, .query = 5,
                  .layer_grid_h = gh, .layer_grid_w = gw, .layer_heads = heads,
                  .layer_query = query};
    draw_canvas c;
    fig_attn_layout plain, lay;
    ck_assert_msg(fig_attn_layout_of(&f, &plain) == VIT_OK, "%s", vit_last_error());
    f.layer_names = names;
    ck_assert_msg(fig_attn_draw(&f, &c, &lay) == VIT_OK, "%s", vit_last_error());
    ck_assert_int_eq(lay.names, 1);
    ck_assert_int_eq(lay.maps_y, plain.maps_y + 13);
    ck_assert_int_eq(lay.pitch_y, plain.pitch_y + 13);
    ck_assert_ptr_eq(fig_attn_map(&f, 1, 0), maps + 32);
    picture p = save_and_read(&c, "attn_layers.png");
    draw_rgb hotc = draw_colormap(0.9), cold = draw_colormap(0), black = {0, 0, 0},
             white = {255, 255, 255};
    for (int l = 0; l < 2; l++)
        for (int h = 0; h < 2; h++) {
            int x0, y0, cell = IMG / gh[l] * lay.map_scale, n = IMG * lay.map_scale;
            fig_attn_map_origin(&lay, l, h, &x0, &y0);
            for (int y = 1; y < n - 1; y++)
                for (int x = 1; x < n - 1; x++) {
                    int k = (y / cell) * gw[l] + x / cell;
                    int edge = y % cell == 0 || x % cell == 0 || y % cell == cell - 1 ||
                               x % cell == cell - 1; /* the query frame may lie there */
                    draw_rgb got = at(&p, x0 + x, y0 + y);
                    if (h >= heads[l])
                        ck_assert_msg(same(got, white), "L%d H%d (%d,%d): not empty", l, h, x, y);
                    else if (!(edge && k == query[l]))
                        ck_assert_msg(same(got, overlay(black, k == hot[l][h] ? hotc : cold)),
                                      "L%d H%d pixel (%d,%d) of cell %d", l, h, x, y, k);
                }
            if (h < heads[l]) { /* the query's frame: its own cell's corner, white */
                int cx = x0 + (query[l] % gw[l]) * cell, cy = y0 + (query[l] / gw[l]) * cell;
                ck_assert(same(at(&p, cx, cy), white));
            }
        }
    free(p.px);
    draw_canvas_free(&c);
    /* a layer's grid that does not cut the image, more maps than columns */
    const int bad_gw[2] = {4, 3}, many[2] = {2, 3};
    fig_attn g = f;
    g.layer_grid_w = bad_gw;
    ck_assert_int_eq(fig_attn_draw(&g, &c, &lay), VIT_EINVAL);
    ck_assert_msg(strstr(vit_last_error(), "layer 1's 2x3 grid") != NULL, "%s", vit_last_error());
    g = f;
    g.layer_heads = many;
    ck_assert_int_eq(fig_attn_draw(&g, &c, &lay), VIT_EINVAL);
    ck_assert_msg(strstr(vit_last_error(), "layer 1 has 3 maps (1..2)") != NULL, "%s",
                  vit_last_error());
}
END_TEST

START_TEST(attention_bad_input)
{
    vit_real image[IMG * IMG] = {0}, maps[GH * GW] = {0};
    fig_attn f = {.image = image, .height = IMG, .width = IMG, .channels = 1, .grid_h = GH,
                  .grid_w = GW, .layers = 1, .heads = 1, .maps = maps, .query = -1};
    draw_canvas c;
    fig_attn_layout lay;
    fig_attn g = f;
    g.grid_w = 3; /* 8 is not a multiple of 3 */
    ck_assert_int_eq(fig_attn_draw(&g, &c, &lay), VIT_EINVAL);
    ck_assert_msg(strstr(vit_last_error(), "8x8") != NULL, "%s", vit_last_error());
    ck_assert_ptr_null(c.px);
    g = f;
    g.grid_w = 2; /* patches of 2x4 pixels */
    ck_assert_int_eq(fig_attn_draw(&g, &c, &lay), VIT_EINVAL);
    ck_assert_msg(strstr(vit_last_error(), "2x4 pixels are not square") != NULL, "%s",
                  vit_last_error());
    g = f;
    g.query = GH * GW;
    ck_assert_int_eq(fig_attn_draw(&g, &c, &lay), VIT_EINVAL);
    ck_assert_msg(strstr(vit_last_error(), "query patch 16") != NULL, "%s", vit_last_error());
    g = f;
    g.maps = NULL;
    ck_assert_int_eq(fig_attn_draw(&g, &c, &lay), VIT_EINVAL);
    ck_assert_msg(strstr(vit_last_error(), "maps is NULL") != NULL, "%s", vit_last_error());
    g = f;
    g.channels = 2;
    ck_assert_int_eq(fig_attn_draw(&g, &c, &lay), VIT_EINVAL);
    ck_assert_msg(strstr(vit_last_error(), "channels") != NULL, "%s", vit_last_error());
    g = f;
    g.heads = 0;
    ck_assert_int_eq(fig_attn_draw(&g, &c, &lay), VIT_EINVAL);
    ck_assert_msg(strstr(vit_last_error(), "0 heads") != NULL, "%s", vit_last_error());
}
END_TEST

/* -------------------------------------------------------- training curves */

/* The metrics of a made-up 10-epoch run, in vit_train's column order. */
static void write_metrics(const char *rel)
{
    char text[2048] = "epoch,train_loss,train_acc,test_loss,test_acc,lr,seconds\n";
    for (int e = 1; e <= 10; e++) {
        char row[128];
        snprintf(row, sizeof row, "%d,%.3f,0.5,%.3f,%.3f,0.001,%d.5\n", e, 2.0 - 0.15 * e,
                 1.3 - 0.08 * e, 0.5 + 0.04 * e, e);
        strcat(text, row);
    }
    write_text(rel, text);
}

/* Pixel column and row of a data point, computed here from the panel's
 * rectangle and range (not with fig_panel_x / fig_panel_y). */
static void expect_point(const picture *p, const fig_panel *pn, double x, double y, draw_rgb col)
{
    int px = pn->x0 + (int)lround((x - pn->xmin) / (pn->xmax - pn->xmin) * (pn->x1 - pn->x0));
    int py = pn->y1 - (int)lround((y - pn->ymin) / (pn->ymax - pn->ymin) * (pn->y1 - pn->y0));
    draw_rgb got = at(p, px, py);
    ck_assert_msg(same(got, col), "point (%g, %g) -> pixel (%d,%d) is (%d,%d,%d)", x, y, px, py,
                  got.r, got.g, got.b);
}

/* True if colour col appears within r pixels of the point. */
static int near_point(const picture *p, const fig_panel *pn, double x, double y, int r, draw_rgb col)
{
    int px = pn->x0 + (int)lround((x - pn->xmin) / (pn->xmax - pn->xmin) * (pn->x1 - pn->x0));
    int py = pn->y1 - (int)lround((y - pn->ymin) / (pn->ymax - pn->ymin) * (pn->y1 - pn->y0));
    for (int dy = -r; dy <= r; dy++)
        for (int dx = -r; dx <= r; dx++)
            if (same(at(p, px + dx, py + dy), col))
                return 1;
    return 0;
}

static void check_panel_axes(const picture *p, const fig_panel *pn)
{
    ck_assert_int_lt(pn->x0 + 100, pn->x1);
    ck_assert_int_lt(pn->y0 + 100, pn->y1);
    for (int y = pn->y0; y <= pn->y1; y++)
        ck_assert_msg(dark(at(p, pn->x0, y)), "y axis pixel (%d,%d) not dark", pn->x0, y);
    for (int x = pn->x0; x <= pn->x1; x++)
        ck_assert_msg(dark(at(p, x, pn->y1)), "x axis pixel (%d,%d) not dark", x, pn->y1);
    /* Tick labels: ink left of the y axis and below the x axis. */
    int ink_left = 0, ink_below = 0;
    for (int y = pn->y0 - 4; y <= pn->y1 + 4; y++)
        for (int x = pn->x0 - 40; x < pn->x0 - 6; x++)
            ink_left += dark(at(p, x, y));
    for (int y = pn->y1 + 6; y < pn->y1 + 16; y++)
        for (int x = pn->x0 - 5; x <= pn->x1; x++)
            ink_below += dark(at(p, x, y));
    ck_assert_int_gt(ink_left, 20);
    ck_assert_int_gt(ink_below, 20);
}

START_TEST(curves_axes_and_points)
{
    write_metrics("metrics.csv");
    vit_metrics_table m;
    ck_assert_msg(vit_metrics_read(fu_path("metrics.csv"), &m) == VIT_OK, "%s",
                  vit_last_error());
    ck_assert_int_eq(m.rows, 10);
    ck_assert(m.epoch[3] == 4 && fabs(m.train_loss[3] - 1.4) < 1e-12 &&
              fabs(m.test_loss[3] - 0.98) < 1e-12 && fabs(m.test_acc[3] - 0.66) < 1e-12);

    draw_canvas c;
    fig_curves_layout lay;
    ck_assert_msg(fig_curves_draw(&m, NULL, "RUN", &c, &lay) == VIT_OK, "%s", vit_last_error());
    picture p = save_and_read(&c, "curves.png");
    ck_assert_int_eq(p.w, lay.width);
    ck_assert_int_eq(p.h, lay.height);

    /* Every data value is inside its panel's range. */
    const fig_panel *L = &lay.loss, *A = &lay.acc;
    ck_assert(L->xmin <= 1 && L->xmax >= 10 && A->xmin <= 1 && A->xmax >= 10);
    ck_assert(L->ymin <= 0.5 && L->ymax >= 1.85 && A->ymin <= 0.54 && A->ymax >= 0.9);
    ck_assert(A->ymax <= 1 && L->ymin >= 0);
    /* Panels one above the other. */
    ck_assert_int_lt(L->y1, A->y0);

    check_panel_axes(&p, L);
    check_panel_axes(&p, A);
    /* Known points lie on their curves: the exact pixel of each epoch. */
    for (int e = 2; e <= 9; e += 3) {
        expect_point(&p, L, e, 2.0 - 0.15 * e, fig_train_loss_rgb);
        expect_point(&p, L, e, 1.3 - 0.08 * e, fig_test_loss_rgb);
        expect_point(&p, A, e, 0.5 + 0.04 * e, fig_test_acc_rgb);
    }
    /* Halfway between two epochs the line passes within a pixel of the
     * midpoint, and nowhere near a value it does not have. */
    ck_assert(near_point(&p, A, 6.5, 0.76, 1, fig_test_acc_rgb));
    ck_assert(near_point(&p, L, 6.5, 1.025, 1, fig_train_loss_rgb));
    ck_assert(!near_point(&p, A, 6.5, 0.6, 3, fig_test_acc_rgb));
    ck_assert(!near_point(&p, L, 6.5, 1.5, 3, fig_train_loss_rgb));
    free(p.px);
    draw_canvas_free(&c);
    vit_metrics_free(&m);
}
END_TEST

START_TEST(curves_long_run_without_markers)
{
    /* 60 epochs: no point markers, so only the 2-pixel line, whose top-left
     * pixel is the data point, can paint the expected pixel. */
    char text[8192] = "epoch,train_loss,test_loss,test_acc\n";
    for (int e = 1; e <= 60; e++) {
        char row[96];
        snprintf(row, sizeof row, "%d,%.4f,%.4f,%.4f\n", e, 2.5 * exp(-e / 15.0) + 0.3,
                 2.0 * exp(-e / 20.0) + 0.1, 0.95 - 0.6 * exp(-e / 10.0));
        strcat(text, row);
    }
    write_text("long.csv", text);
    vit_metrics_table m;
    ck_assert_msg(vit_metrics_read(fu_path("long.csv"), &m) == VIT_OK, "%s",
                  vit_last_error());
    draw_canvas c;
    fig_curves_layout lay;
    ck_assert_msg(fig_curves_draw(&m, NULL, "LONG", &c, &lay) == VIT_OK, "%s", vit_last_error());
    picture p = save_and_read(&c, "long.png");
    for (int e = 5; e <= 55; e += 10) {
        expect_point(&p, &lay.loss, e, m.train_loss[e - 1], fig_train_loss_rgb);
        expect_point(&p, &lay.loss, e, m.test_loss[e - 1], fig_test_loss_rgb);
        expect_point(&p, &lay.acc, e, m.test_acc[e - 1], fig_test_acc_rgb);
    }
    free(p.px);
    draw_canvas_free(&c);
    vit_metrics_free(&m);
}
END_TEST

/* A short run's points: every pixel of colour col in and around panel pn
 * (8 pixels beyond it on each side) lies strictly inside the plot area,
 * off the axes and the panel's edges, and there are at least `want` of them
 * (the 6 x 6 markers).  The axes stay intact. */
static void expect_points_inside(const picture *p, const fig_panel *pn, draw_rgb col, int want)
{
    int count = 0;
    for (int y = pn->y0 - 8; y <= pn->y1 + 8; y++)
        for (int x = pn->x0 - 8; x <= pn->x1 + 8; x++)
            if (same(at(p, x, y), col)) {
                ck_assert_msg(x > pn->x0 + 2 && x < pn->x1 - 2 && y > pn->y0 + 2 && y < pn->y1 - 2,
                              "point pixel (%d,%d) on or next to the panel's edge (%d..%d, %d..%d)",
                              x, y, pn->x0, pn->x1, pn->y0, pn->y1);
                count++;
            }
    ck_assert_msg(count >= want, "%d pixels of the points, expected at least %d", count, want);
    for (int y = pn->y0; y <= pn->y1; y++)
        ck_assert(dark(at(p, pn->x0, y)));
    for (int x = pn->x0; x <= pn->x1; x++)
        ck_assert(dark(at(p, x, pn->y1)));
}

/* expect_points_inside for the three series, each with `want` pixels. */
static void expect_series_inside(const picture *p, const fig_curves_layout *lay, int want)
{
    expect_points_inside(p, &lay->acc, fig_test_acc_rgb, want);
    expect_points_inside(p, &lay->loss, fig_train_loss_rgb, want);
    expect_points_inside(p, &lay->loss, fig_test_loss_rgb, want);
}

START_TEST(curves_single_epoch_and_column_order)
{
    /* Columns in another order, an extra one, CRLF and a trailing blank line. */
    write_text("one.csv", "test_acc, epoch ,note,test_loss,train_loss\r\n0.25,1,7,1.5,2.5\r\n\r\n");
    vit_metrics_table m;
    ck_assert_msg(vit_metrics_read(fu_path("one.csv"), &m) == VIT_OK, "%s",
                  vit_last_error());
    ck_assert_int_eq(m.rows, 1);
    ck_assert(m.epoch[0] == 1 && m.train_loss[0] == 2.5 && m.test_loss[0] == 1.5 &&
              m.test_acc[0] == 0.25);
    draw_canvas c;
    fig_curves_layout lay;
    ck_assert_msg(fig_curves_draw(&m, NULL, NULL, &c, &lay) == VIT_OK, "%s", vit_last_error());
    picture p = save_and_read(&c, "one.png");
    ck_assert(lay.acc.ymin < 0.25 && lay.acc.ymax > 0.25);
    /* The epoch axis runs 0..2: the one epoch sits in the middle. */
    ck_assert(lay.loss.xmin == 0 && lay.loss.xmax == 2 && lay.acc.xmax == 2);
    expect_point(&p, &lay.acc, 1, 0.25, fig_test_acc_rgb);
    expect_point(&p, &lay.loss, 1, 2.5, fig_train_loss_rgb);
    expect_point(&p, &lay.loss, 1, 1.5, fig_test_loss_rgb);
    ck_assert_int_eq(fig_panel_x(&lay.acc, 1), (lay.acc.x0 + lay.acc.x1 + 1) / 2);
    expect_series_inside(&p, &lay, 36);
    free(p.px);
    draw_canvas_free(&c);
    vit_metrics_free(&m);
}
END_TEST

START_TEST(curves_two_epochs)
{
    /* Two epochs: both markers of every series inside the panels, the last
     * one not on the right edge (the axis runs 0..3). */
    write_text("two.csv", "epoch,train_loss,test_loss,test_acc\n1,2.0,1.8,0.5\n2,0.6,0.9,0.75\n");
    vit_metrics_table m;
    ck_assert_msg(vit_metrics_read(fu_path("two.csv"), &m) == VIT_OK, "%s",
                  vit_last_error());
    draw_canvas c;
    fig_curves_layout lay;
    ck_assert_msg(fig_curves_draw(&m, NULL, "runs/two/metrics.csv", &c, &lay) == VIT_OK, "%s",
                  vit_last_error());
    picture p = save_and_read(&c, "two.png");
    ck_assert(lay.loss.xmin == 0 && lay.loss.xmax == 3);
    for (int e = 1; e <= 2; e++) {
        expect_point(&p, &lay.loss, e, m.train_loss[e - 1], fig_train_loss_rgb);
        expect_point(&p, &lay.acc, e, m.test_acc[e - 1], fig_test_acc_rgb);
    }
    expect_series_inside(&p, &lay, 72);
    free(p.px);
    draw_canvas_free(&c);
    vit_metrics_free(&m);
}
END_TEST

/* Pixels of colour col anywhere on p. */
static int count_colour(const picture *p, draw_rgb col)
{
    int n = 0;
    for (int y = 0; y < p->h; y++)
        for (int x = 0; x < p->w; x++)
            n += same(at(p, x, y), col);
    return n;
}

START_TEST(curves_every_column_and_the_final_figure)
{
    /* vit_train's columns with --val, plus one the plot does not know
     * (note) and one more accuracy (top5_acc): every loss and accuracy
     * column is drawn through its points, lr in a panel of its own, and
     * final.csv's test and validation figures (with tta) ringed at the
     * last epoch, off the one-pass curve. */
    char text[4096] = "epoch,train_loss,train_acc,test_loss,test_acc,lr,seconds,note,top5_acc,val_acc\n";
    for (int e = 1; e <= 12; e++) {
        char row[160];
        snprintf(row, sizeof row, "%d,%.3f,%.3f,%.3f,%.3f,%.6f,%d.5,7,%.3f,%.3f\n", e,
                 2.0 - 0.12 * e, 0.3 + 0.05 * e, 1.2 - 0.03 * e, 0.2 + 0.04 * e,
                 0.001 * (e < 3 ? e / 3.0 : 1 - (e - 3) / 10.0), e, 0.6 + 0.02 * e, 0.1 + 0.03 * e);
        strcat(text, row);
    }
    write_text("all.csv", text);
    write_text("final.csv", "epoch,train_loss,test_loss,test_acc,tta,ema,test_acc_one_pass,"
                            "test_loss_one_pass,val_acc,val_acc_one_pass\n"
                            "12,0.56,0.7,0.9,1,0,0.68,0.76,0.3,0.46\n");
    vit_metrics_table m, fin;
    ck_assert_msg(vit_metrics_read(fu_path("all.csv"), &m) == VIT_OK, "%s", vit_last_error());
    ck_assert_msg(vit_metrics_read(fu_path("final.csv"), &fin) == VIT_OK, "%s", vit_last_error());
    draw_canvas c;
    fig_curves_layout lay;
    ck_assert_msg(fig_curves_draw(&m, &fin, "ALL", &c, &lay) == VIT_OK, "%s", vit_last_error());
    picture p = save_and_read(&c, "all.png");
    ck_assert_int_eq(lay.has_lr, 1);
    ck_assert_int_lt(lay.loss.y1, lay.acc.y0);
    ck_assert_int_lt(lay.acc.y1, lay.lr.y0);
    ck_assert_int_le(lay.lr.y1, p.h);
    check_panel_axes(&p, &lay.loss);
    check_panel_axes(&p, &lay.acc);
    const double *lr = vit_metrics_column(&m, "lr"), *tr = vit_metrics_column(&m, "train_acc"),
                 *va = vit_metrics_column(&m, "val_acc");
    for (int e = 2; e <= 11; e += 3) {
        expect_point(&p, &lay.loss, e, m.train_loss[e - 1], fig_train_loss_rgb);
        expect_point(&p, &lay.loss, e, m.test_loss[e - 1], fig_test_loss_rgb);
        expect_point(&p, &lay.acc, e, m.test_acc[e - 1], fig_test_acc_rgb);
        expect_point(&p, &lay.acc, e, tr[e - 1], fig_train_acc_rgb);
        expect_point(&p, &lay.acc, e, va[e - 1], fig_val_acc_rgb);
        expect_point(&p, &lay.lr, e, lr[e - 1], fig_lr_rgb);
    }
    /* top5_acc, a column without a colour of its own, is drawn too: the
     * pixel of its point is none of the known series' colours nor white. */
    for (int e = 2; e <= 11; e += 3) {
        int px = fig_panel_x(&lay.acc, e), py = fig_panel_y(&lay.acc, 0.6 + 0.02 * e);
        draw_rgb got = at(&p, px, py), white = {255, 255, 255};
        ck_assert(!same(got, white) && !same(got, fig_test_acc_rgb) &&
                  !same(got, fig_train_acc_rgb) && !same(got, fig_val_acc_rgb));
    }
    /* The rings: centred at the last epoch on 0.9 and 0.3; their left
     * edges are red, their insides show what is under them. */
    ck_assert_int_eq(lay.final_x, fig_panel_x(&lay.acc, 12));
    ck_assert_int_eq(lay.final_y, fig_panel_y(&lay.acc, 0.9));
    ck_assert_int_eq(lay.final_val_y, fig_panel_y(&lay.acc, 0.3));
    ck_assert(lay.acc.ymax >= 0.9);
    for (int dy = -3; dy <= 3; dy++) {
        ck_assert(same(at(&p, lay.final_x - 4, lay.final_y + dy), fig_final_rgb));
        ck_assert(same(at(&p, lay.final_x - 5, lay.final_y + dy), fig_final_rgb));
        ck_assert(same(at(&p, lay.final_x + 5, lay.final_y + dy), fig_final_rgb));
        ck_assert(same(at(&p, lay.final_x - 4, lay.final_val_y + dy), fig_final_rgb));
    }
    ck_assert(!same(at(&p, lay.final_x, lay.final_y), fig_final_rgb));
    /* Nowhere else near the curves: the one-pass point at 12 is 0.68. */
    ck_assert(!near_point(&p, &lay.acc, 12, 0.68, 3, fig_final_rgb));
    free(p.px);
    draw_canvas_free(&c);

    /* A final.csv of an earlier epoch (a resumed run that went on) is not
     * this history's end: no ring, no red anywhere. */
    vit_metrics_free(&fin);
    write_text("final.csv", "epoch,train_loss,test_loss,test_acc,tta\n10,0.5,0.7,0.9,1\n");
    ck_assert_msg(vit_metrics_read(fu_path("final.csv"), &fin) == VIT_OK, "%s", vit_last_error());
    ck_assert_msg(fig_curves_draw(&m, &fin, "ALL", &c, &lay) == VIT_OK, "%s", vit_last_error());
    p = save_and_read(&c, "stale.png");
    ck_assert_int_eq(lay.final_x, -1);
    ck_assert_int_eq(count_colour(&p, fig_final_rgb), 0);
    free(p.px);
    draw_canvas_free(&c);
    vit_metrics_free(&fin);
    vit_metrics_free(&m);
}
END_TEST

START_TEST(curves_of_a_validation_run)
{
    /* A run with a validation set since 0.3.0: the test columns empty (NaN)
     * in every row but the first (a row of an older run it resumed), val_acc
     * and val_loss drawn; final.csv's figures scored best.ckpt of epoch 5,
     * ringed there, not at the last epoch. */
    char text[4096] = "epoch,train_loss,train_acc,test_loss,test_acc,lr,seconds,val_acc,val_loss\n"
                      "1,1.9,0.3,1.5,0.35,0.001,1.5,0.4,\n";
    for (int e = 2; e <= 8; e++) {
        char row[160];
        snprintf(row, sizeof row, "%d,%.3f,%.3f,,,0.001,%d.5,%.3f,%.3f\n", e, 2.0 - 0.12 * e,
                 0.3 + 0.05 * e, e, 0.4 + 0.05 * e, 1.4 - 0.1 * e);
        strcat(text, row);
    }
    write_text("val.csv", text);
    write_text("final.csv", "epoch,train_loss,test_loss,test_acc,tta,ema,test_acc_one_pass,"
                            "test_loss_one_pass,val_acc,val_acc_one_pass,best_epoch\n"
                            "8,1.04,0.8,0.2,0,0,0.2,0.8,0.65,0.65,5\n");
    vit_metrics_table m, fin;
    ck_assert_msg(vit_metrics_read(fu_path("val.csv"), &m) == VIT_OK, "%s", vit_last_error());
    ck_assert_msg(vit_metrics_read(fu_path("final.csv"), &fin) == VIT_OK, "%s", vit_last_error());
    draw_canvas c;
    fig_curves_layout lay;
    ck_assert_msg(fig_curves_draw(&m, &fin, "VAL", &c, &lay) == VIT_OK, "%s", vit_last_error());
    picture p = save_and_read(&c, "val.png");
    const double *va = vit_metrics_column(&m, "val_acc"), *vl = vit_metrics_column(&m, "val_loss");
    for (int e = 2; e <= 8; e += 2) {
        expect_point(&p, &lay.acc, e, va[e - 1], fig_val_acc_rgb);
        expect_point(&p, &lay.loss, e, vl[e - 1], fig_val_loss_rgb);
        /* No test point where the test set was not scored. */
        ck_assert(!near_point(&p, &lay.acc, e, 0.35, 3, fig_test_acc_rgb));
    }
    /* Epoch 1's test figures, from the older run, are points of their own. */
    expect_point(&p, &lay.acc, 1, 0.35, fig_test_acc_rgb);
    expect_point(&p, &lay.loss, 1, 1.5, fig_test_loss_rgb);
    /* The rings at epoch 5, the model the final figures score. */
    ck_assert_int_eq(lay.final_x, fig_panel_x(&lay.acc, 5));
    ck_assert_int_eq(lay.final_y, fig_panel_y(&lay.acc, 0.2));
    ck_assert_int_eq(lay.final_val_y, fig_panel_y(&lay.acc, 0.65));
    for (int dy = -3; dy <= 3; dy++)
        ck_assert(same(at(&p, lay.final_x - 4, lay.final_y + dy), fig_final_rgb));
    free(p.px);
    draw_canvas_free(&c);
    vit_metrics_free(&fin);
    vit_metrics_free(&m);
}
END_TEST

START_TEST(curves_epoch_axis_fits_the_run)
{
    /* 140 epochs: the axis ends a few epochs past 140 (not at 200), with a
     * tick label at 140's nice neighbours and none past the end. */
    static char text[16384];
    strcpy(text, "epoch,train_loss,test_loss,test_acc\n");
    for (int e = 1; e <= 140; e++) {
        char row[96];
        snprintf(row, sizeof row, "%d,%.4f,%.4f,%.4f\n", e, 2.0 * exp(-e / 40.0) + 0.2,
                 1.8 * exp(-e / 50.0) + 0.3, 0.95 - 0.7 * exp(-e / 30.0));
        strcat(text, row);
    }
    write_text("e140.csv", text);
    vit_metrics_table m;
    ck_assert_msg(vit_metrics_read(fu_path("e140.csv"), &m) == VIT_OK, "%s", vit_last_error());
    draw_canvas c;
    fig_curves_layout lay;
    ck_assert_msg(fig_curves_draw(&m, NULL, "E140", &c, &lay) == VIT_OK, "%s", vit_last_error());
    picture p = save_and_read(&c, "e140.png");
    ck_assert_msg(lay.loss.xmin == 0 && lay.loss.xmax > 140 && lay.loss.xmax <= 147,
                  "epoch axis %g..%g", lay.loss.xmin, lay.loss.xmax);
    ck_assert(lay.acc.xmax == lay.loss.xmax && !lay.has_lr);
    /* The last epoch's point sits near the right end of the panel. */
    ck_assert_int_ge(fig_panel_x(&lay.acc, 140), lay.acc.x1 - 30);
    expect_point(&p, &lay.acc, 140, m.test_acc[139], fig_test_acc_rgb);
    /* Nothing (tick, label) right of the panel's end below the axis. */
    for (int y = lay.acc.y1 + 1; y < lay.acc.y1 + 18; y++)
        for (int x = lay.acc.x1 + 8; x < p.w; x++)
            ck_assert_msg(!dark(at(&p, x, y)), "ink at (%d,%d) past the axis' end", x, y);
    free(p.px);
    draw_canvas_free(&c);
    vit_metrics_free(&m);
}
END_TEST

/* ------------------------------------------------------------------ main */

static Suite *pictures_suite(void)
{
    Suite *s = suite_create("pictures");
    TCase *tc = tcase_create("pictures");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, font_and_text);
    tcase_add_test(tc, font_glyph_set);
    tcase_add_test(tc, text_drawn_as_given);
    tcase_add_test(tc, lines_and_clipping);
    tcase_add_test(tc, colormap_ramp);
    tcase_add_test(tc, attention_one_hot_cells);
    tcase_add_test(tc, attention_layers_of_their_own);
    tcase_add_test(tc, attention_scale_and_query_outline);
    tcase_add_test(tc, attention_shared_scale);
    tcase_add_test(tc, attention_bad_input);
    tcase_add_test(tc, curves_axes_and_points);
    tcase_add_test(tc, curves_long_run_without_markers);
    tcase_add_test(tc, curves_single_epoch_and_column_order);
    tcase_add_test(tc, curves_two_epochs);
    tcase_add_test(tc, curves_every_column_and_the_final_figure);
    tcase_add_test(tc, curves_of_a_validation_run);
    tcase_add_test(tc, curves_epoch_axis_fits_the_run);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) { return fu_run_suite(pictures_suite, "/tmp/vit-pictures-XXXXXX"); }
