/*
 * make_photos - writes a folder of class folders as a person's own photos
 * look: PNG and JPEG files of different sizes, grayscale next to colour,
 * with a text file among them, for tests/test_photos.sh.
 *
 *   make_photos DIR [--bad]
 *
 * Classes circle/, square/ and stripes/, 8 images each, the shape drawn
 * over a background that varies with the image; image i of a class is, by
 * i mod 4: a grayscale PNG of 120x96 (HxW), an RGB JPEG of 80x64, an RGB
 * PNG of 64x64, a grayscale JPEG of 100x90.  circle/ also holds notes.txt,
 * "my circle, v2.png" (a comma and spaces) and "say \"hi\".jpg" (a quote).
 * --bad adds square/broken.png, which is not a PNG.  Exits 77 (skip) in a
 * build without libjpeg.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "vit/vit.h"

#ifdef VIT_HAVE_JPEG
#include <jpeglib.h>

/* The class's shape at (y, x) of an h x w image: 1 ink, 0 background. */
static int ink(int cls, int y, int x, int h, int w, int i)
{
    double u = (x + 0.5) / w - 0.5 - 0.04 * (i % 3 - 1), v = (y + 0.5) / h - 0.5;
    if (cls == 0)
        return u * u + v * v < 0.09;
    if (cls == 1)
        return u > -0.3 && u < 0.3 && v > -0.3 && v < 0.3;
    return ((int)((v + 0.5) * 6)) % 2 == 0;
}

/* The pixels of image i of class cls, h x w x c bytes. */
static unsigned char *draw(int cls, int i, int h, int w, int c)
{
    unsigned char *p = malloc((size_t)h * w * c);
    int paper = 20 + 9 * i, tint[3] = {200 + 5 * i, 120 + 11 * cls, 60 + 7 * i};
    for (int y = 0; p && y < h; y++)
        for (int x = 0; x < w; x++)
            for (int ch = 0; ch < c; ch++)
                p[((size_t)y * w + x) * c + ch] =
                    (unsigned char)(ink(cls, y, x, h, w, i) ? (c == 1 ? 230 : tint[ch])
                                                            : paper + 3 * ((x + y) % 5));
    return p;
}

static int write_jpeg(const char *path, const unsigned char *px, int h, int w, int c)
{
    struct jpeg_compress_struct j;
    struct jpeg_error_mgr err;
    FILE *fp = fopen(path, "wb");
    if (fp == NULL)
        return 1;
    j.err = jpeg_std_error(&err);
    jpeg_create_compress(&j);
    jpeg_stdio_dest(&j, fp);
    j.image_width = (JDIMENSION)w;
    j.image_height = (JDIMENSION)h;
    j.input_components = c;
    j.in_color_space = c == 1 ? JCS_GRAYSCALE : JCS_RGB;
    jpeg_set_defaults(&j);
    jpeg_set_quality(&j, 90, TRUE);
    jpeg_start_compress(&j, TRUE);
    while (j.next_scanline < j.image_height) {
        JSAMPROW rows[1] = {(JSAMPROW)(px + (size_t)j.next_scanline * w * c)};
        jpeg_write_scanlines(&j, rows, 1);
    }
    jpeg_finish_compress(&j);
    jpeg_destroy_compress(&j);
    return fclose(fp) != 0;
}

/* Image i of class cls at path, in the kind i mod 4 names (or kind). */
static int write_one(const char *path, int cls, int i, int kind)
{
    static const int hw[4][3] = {{120, 96, 1}, {80, 64, 3}, {64, 64, 3}, {100, 90, 1}};
    const int *s = hw[kind];
    unsigned char *px = draw(cls, i, s[0], s[1], s[2]);
    int rc = px == NULL || (kind % 2 == 0 ? vit_png_write(path, px, s[0], s[1], s[2]) != VIT_OK
                                          : write_jpeg(path, px, s[0], s[1], s[2]));
    free(px);
    if (rc)
        fprintf(stderr, "make_photos: cannot write %s\n", path);
    return rc;
}

int main(int argc, char **argv)
{
    static const char *classes[3] = {"circle", "square", "stripes"};
    static const char *ext[4] = {"png", "jpg", "png", "jpeg"};
    char path[4096];
    int rc = 0;
    if (argc < 2) {
        fprintf(stderr, "usage: make_photos DIR [--bad]\n");
        return 2;
    }
    mkdir(argv[1], 0755);
    for (int k = 0; k < 3 && !rc; k++) {
        snprintf(path, sizeof path, "%s/%s", argv[1], classes[k]);
        mkdir(path, 0755);
        for (int i = 0; i < 8 && !rc; i++) {
            snprintf(path, sizeof path, "%s/%s/%s_%03d.%s", argv[1], classes[k], classes[k], i,
                     ext[i % 4]);
            rc = write_one(path, k, i, i % 4);
        }
    }
    snprintf(path, sizeof path, "%s/circle/my circle, v2.png", argv[1]);
    rc = rc || write_one(path, 0, 8, 0);
    snprintf(path, sizeof path, "%s/circle/say \"hi\".jpg", argv[1]);
    rc = rc || write_one(path, 0, 9, 1);
    snprintf(path, sizeof path, "%s/circle/notes.txt", argv[1]);
    FILE *f = fopen(path, "w");
    rc = rc || f == NULL || fputs("shot on my phone\n", f) < 0 || fclose(f) != 0;
    if (argc > 2 && strcmp(argv[2], "--bad") == 0) {
        snprintf(path, sizeof path, "%s/square/broken.png", argv[1]);
        f = fopen(path, "w");
        rc = rc || f == NULL || fputs("not a picture\n", f) < 0 || fclose(f) != 0;
    }
    return rc;
}

#else

int main(void)
{
    fprintf(stderr, "make_photos: built without libjpeg\n");
    return 77;
}

#endif
