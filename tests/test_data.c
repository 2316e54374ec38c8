/* tests/test_data.c - the data loaders (float32 build).
 *
 * Inputs are written here with zlib and libpng directly (not with the code
 * under test), into a temporary folder under /tmp removed at the end.  The
 * working directory is tests/, so the shipped digits are ../data/. */
#include <check.h>
#include <math.h>
#include <png.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "file_util.h"
#include "vit/data.h"

#define DIGITS "../data/digits.csv.gz"
#define PIX_TOL 1e-6 /* float rounding of byte/255 */

/* ------------------------------------------------------------- helpers */

static void mkdir_rel(const char *rel)
{
    ck_assert_msg(mkdir(fu_path(rel), 0755) == 0, "mkdir %s", fu_path(rel));
}

static void write_bytes(const char *rel, const void *data, size_t n, int gz)
{
    if (gz) {
        gzFile g = gzopen(fu_path(rel), "wb");
        ck_assert_ptr_nonnull(g);
        ck_assert_int_eq(gzwrite(g, data, (unsigned)n), (int)n);
        ck_assert_int_eq(gzclose(g), Z_OK);
    } else {
        FILE *f = fopen(fu_path(rel), "wb");
        ck_assert_ptr_nonnull(f);
        ck_assert_uint_eq(fwrite(data, 1, n, f), n);
        ck_assert_int_eq(fclose(f), 0);
    }
}

static void write_text(const char *rel, const char *text)
{
    write_bytes(rel, text, strlen(text), 0);
}

/* Writes a PNG with libpng's simplified API; format is PNG_FORMAT_GRAY,
 * PNG_FORMAT_RGB or PNG_FORMAT_RGBA. */
static void write_png(const char *rel, const unsigned char *px, int h, int w, unsigned format)
{
    png_image im;
    memset(&im, 0, sizeof im);
    im.version = PNG_IMAGE_VERSION;
    im.width = (png_uint_32)w;
    im.height = (png_uint_32)h;
    im.format = format;
    ck_assert_msg(png_image_write_to_file(&im, fu_path(rel), 0, px, 0, NULL), "write %s: %s",
                  fu_path(rel), im.message);
}

/* A deterministic byte pattern distinct per seed. */
static void pattern(unsigned char *px, size_t n, int seed)
{
    for (size_t i = 0; i < n; i++)
        px[i] = (unsigned char)((i * 37u + (size_t)seed * 101u + 11u) % 256u);
}

/* Checks the error code and that the message names `name`. */
static void expect_error(int rc, int code, const char *name)
{
    const char *msg = vit_last_error();
    ck_assert_msg(rc == code, "expected %s, got %s (%s)", vit_status_name(code),
                  vit_status_name(rc), msg);
    ck_assert_msg(strstr(msg, name) != NULL, "message '%s' does not name '%s'", msg, name);
}

static void expect_zeroed(const vit_dataset *ds)
{
    ck_assert_int_eq(ds->count, 0);
    ck_assert_ptr_null(ds->images);
    ck_assert_ptr_null(ds->labels);
}

/* -------------------------------------------------------------- digits */

/* Parses a CSV line of ints with strtol; returns the field count. */
static int parse_ints(char *line, long *out, int max)
{
    int n = 0;
    for (char *tok = strtok(line, ",\n"); tok != NULL && n < max; tok = strtok(NULL, ",\n"))
        out[n++] = strtol(tok, NULL, 10);
    return n;
}

START_TEST(digits_shipped)
{
    vit_dataset tr = {0}, te = {0};
    int rc = vit_data_load_digits(DIGITS, 1437, &tr, &te);
    ck_assert_msg(rc == VIT_OK, "%s", vit_last_error());
    ck_assert_int_eq(tr.count, 1437);
    ck_assert_int_eq(te.count, 360);
    ck_assert_int_eq(tr.height, 8);
    ck_assert_int_eq(tr.width, 8);
    ck_assert_int_eq(tr.channels, 1);
    ck_assert_int_eq(tr.classes, 10);
    ck_assert_int_eq(te.height, 8);
    ck_assert_int_eq(te.width, 8);
    ck_assert_int_eq(te.channels, 1);
    ck_assert_int_eq(te.classes, 10);
    /* The digits are the class names. */
    for (int k = 0; k < 10; k++) {
        char num[2] = {(char)('0' + k), 0};
        ck_assert_str_eq(tr.class_names[k], num);
        ck_assert_str_eq(te.class_names[k], num);
    }

    /* First and last lines read independently with zlib. */
    char line[1024], last[1024] = "";
    long v[80];
    int lines = 0;
    gzFile g = gzopen(DIGITS, "rb");
    ck_assert_ptr_nonnull(g);
    ck_assert_ptr_nonnull(gzgets(g, line, sizeof line));
    lines = 1;
    while (gzgets(g, last, sizeof last) != NULL)
        lines++;
    gzclose(g);
    ck_assert_int_eq(lines, 1797);
    ck_assert_int_eq(parse_ints(line, v, 80), 65);
    for (int x = 0; x < 8; x++)
        ck_assert_float_eq(tr.images[x], (float)v[x] / 16.0f);
    ck_assert_int_eq(tr.labels[0], (int)v[64]);
    ck_assert_int_eq(parse_ints(last, v, 80), 65);
    for (int x = 0; x < 64; x++)
        ck_assert_float_eq(te.images[359 * 64 + x], (float)v[x] / 16.0f);
    ck_assert_int_eq(te.labels[359], (int)v[64]);

    for (int s = 0; s < 2; s++) {
        const vit_dataset *d = s ? &te : &tr;
        for (int i = 0; i < d->count * 64; i++)
            ck_assert(d->images[i] >= 0.0f && d->images[i] <= 1.0f);
        for (int i = 0; i < d->count; i++)
            ck_assert(d->labels[i] >= 0 && d->labels[i] < 10);
    }
    vit_dataset_free(&tr);
    vit_dataset_free(&te);
    expect_zeroed(&tr);
    vit_dataset_free(&tr); /* twice is harmless */
}
END_TEST

/* n lines of the digits format; line i has pixels (i + j) % 17, label i % 10. */
static char *digits_csv(int n)
{
    const size_t cap = (size_t)n * 300 + 1;
    char *s = malloc(cap), *p = s;
    ck_assert_ptr_nonnull(s);
    /* snprintf with the room left: with -O3 and the sanitizers gcc 12 reads
     * these sprintf calls as writing through a null pointer (-Werror). */
    for (int i = 0; i < n; i++) {
        for (int j = 0; j < 64; j++)
            p += snprintf(p, cap - (size_t)(p - s), "%d,", (i + j) % 17);
        p += snprintf(p, cap - (size_t)(p - s), "%d\n", i % 10);
    }
    *p = '\0';
    return s;
}

START_TEST(digits_small_plain_and_gz)
{
    char *csv = digits_csv(5);
    size_t len = strlen(csv);
    char *csv_blank = malloc(len + 8);
    ck_assert_ptr_nonnull(csv_blank);
    snprintf(csv_blank, len + 8, "%s\n\n", csv); /* trailing blank lines are allowed */
    write_bytes("d5.csv", csv, len, 0);
    write_bytes("d5.csv.gz", csv_blank, strlen(csv_blank), 1);
    for (int gz = 0; gz < 2; gz++) {
        vit_dataset tr = {0}, te = {0};
        int rc = vit_data_load_digits(fu_path(gz ? "d5.csv.gz" : "d5.csv"), 3, &tr, &te);
        ck_assert_msg(rc == VIT_OK, "%s", vit_last_error());
        ck_assert_int_eq(tr.count, 3);
        ck_assert_int_eq(te.count, 2);
        for (int i = 0; i < 5; i++) {
            const vit_dataset *d = i < 3 ? &tr : &te;
            int k = i < 3 ? i : i - 3;
            ck_assert_int_eq(d->labels[k], i % 10);
            for (int j = 0; j < 64; j++)
                ck_assert_float_eq(d->images[k * 64 + j], (float)((i + j) % 17) / 16.0f);
        }
        vit_dataset_free(&tr);
        vit_dataset_free(&te);
    }
    free(csv);
    free(csv_blank);
}
END_TEST

/* Writes 4 good lines with line `bad` (1-based) replaced by text. */
static void digits_with_bad_line(const char *rel, int bad, const char *text)
{
    char *csv = digits_csv(4), *out = malloc(strlen(csv) + strlen(text) + 4), *p = out;
    char *line = csv;
    for (int i = 1; i <= 4; i++) {
        char *nl = strchr(line, '\n');
        if (i == bad)
            p += sprintf(p, "%s\n", text);
        else
            p += sprintf(p, "%.*s\n", (int)(nl - line), line);
        line = nl + 1;
    }
    write_bytes(rel, out, (size_t)(p - out), 0);
    free(csv);
    free(out);
}

START_TEST(digits_errors)
{
    vit_dataset tr = {0}, te = {0};
    char good[300], *p = good, bad[400];
    for (int j = 0; j < 64; j++) /* snprintf: as in digits_csv */
        p += snprintf(p, sizeof good - (size_t)(p - good), "%d,", j % 17);
    p[-1] = '\0'; /* 64 pixels, no label yet */

    tr.count = 77; /* outputs must be zeroed on failure */
    expect_error(vit_data_load_digits(fu_path("nope.csv.gz"), 3, &tr, &te), VIT_EIO, "nope.csv.gz");
    expect_zeroed(&tr);
    expect_zeroed(&te);

    digits_with_bad_line("short.csv", 3, "0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,0,1,2,3");
    expect_error(vit_data_load_digits(fu_path("short.csv"), 2, &tr, &te), VIT_EFORMAT, "short.csv:3");
    expect_zeroed(&tr);

    snprintf(bad, sizeof bad, "%s,10", good);
    digits_with_bad_line("label.csv", 2, bad);
    expect_error(vit_data_load_digits(fu_path("label.csv"), 2, &tr, &te), VIT_EFORMAT, "label.csv:2");
    snprintf(bad, sizeof bad, "%s,-1", good);
    digits_with_bad_line("label2.csv", 4, bad);
    expect_error(vit_data_load_digits(fu_path("label2.csv"), 2, &tr, &te), VIT_EFORMAT, "label2.csv:4");

    snprintf(bad, sizeof bad, "17,%s", good + 2); /* first pixel 0 -> 17, then label-less: */
    snprintf(bad + strlen(bad), sizeof bad - strlen(bad), ",3");
    digits_with_bad_line("pixel.csv", 1, bad);
    expect_error(vit_data_load_digits(fu_path("pixel.csv"), 2, &tr, &te), VIT_EFORMAT, "pixel.csv:1");

    snprintf(bad, sizeof bad, "%s,x7", good);
    digits_with_bad_line("nonint.csv", 2, bad);
    expect_error(vit_data_load_digits(fu_path("nonint.csv"), 2, &tr, &te), VIT_EFORMAT, "nonint.csv:2");
    snprintf(bad, sizeof bad, "%s,1.5", good);
    digits_with_bad_line("float.csv", 3, bad);
    expect_error(vit_data_load_digits(fu_path("float.csv"), 2, &tr, &te), VIT_EFORMAT, "float.csv:3");

    char *csv = digits_csv(3);
    write_bytes("three.csv", csv, strlen(csv), 0);
    expect_error(vit_data_load_digits(fu_path("three.csv"), 3, &tr, &te), VIT_EFORMAT, "three.csv");
    expect_zeroed(&tr);
    free(csv);

    /* A gzip stream cut in the middle. */
    csv = digits_csv(400);
    write_bytes("long.csv.gz", csv, strlen(csv), 1);
    free(csv);
    FILE *f = fopen(fu_path("long.csv.gz"), "rb");
    ck_assert_ptr_nonnull(f);
    unsigned char buf[1 << 16];
    size_t n = fread(buf, 1, sizeof buf, f);
    fclose(f);
    ck_assert(n > 200 && n < sizeof buf);
    write_bytes("cut.csv.gz", buf, n / 2, 0);
    expect_error(vit_data_load_digits(fu_path("cut.csv.gz"), 3, &tr, &te), VIT_EFORMAT, "cut.csv.gz:");
    expect_zeroed(&tr);
    expect_zeroed(&te);

    /* Bad arguments. */
    ck_assert_int_eq(vit_data_load_digits(NULL, 3, &tr, &te), VIT_EINVAL);
    ck_assert_int_eq(vit_data_load_digits(DIGITS, 0, &tr, &te), VIT_EINVAL);
    ck_assert_int_eq(vit_data_load_digits(DIGITS, 3, &tr, &tr), VIT_EINVAL);
    ck_assert_int_eq(vit_data_load_digits(DIGITS, 3, NULL, &te), VIT_EINVAL);
}
END_TEST

/* ----------------------------------------------------------------- IDX */

static void put_be32(unsigned char *p, uint32_t v)
{
    p[0] = (unsigned char)(v >> 24);
    p[1] = (unsigned char)(v >> 16);
    p[2] = (unsigned char)(v >> 8);
    p[3] = (unsigned char)v;
}

/* Writes an IDX image file (count x rows x cols bytes from pattern(seed))
 * with the given magic and header sizes; data_count images are actually
 * written, so a header can claim more than the file holds. */
static void write_idx_images(const char *rel, int gz, uint32_t magic, uint32_t count,
                             uint32_t rows, uint32_t cols, size_t data_bytes, int seed)
{
    unsigned char *b = malloc(16 + data_bytes);
    ck_assert_ptr_nonnull(b);
    put_be32(b, magic);
    put_be32(b + 4, count);
    put_be32(b + 8, rows);
    put_be32(b + 12, cols);
    pattern(b + 16, data_bytes, seed);
    write_bytes(rel, b, 16 + data_bytes, gz);
    free(b);
}

static void write_idx_labels(const char *rel, int gz, const unsigned char *labels, uint32_t n)
{
    unsigned char *b = malloc(8 + n);
    ck_assert_ptr_nonnull(b);
    put_be32(b, 0x00000801);
    put_be32(b + 4, n);
    memcpy(b + 8, labels, n);
    write_bytes(rel, b, 8 + n, gz);
    free(b);
}

/* A valid IDX set in folder rel: 6 train and 3 test images of 5x4. */
static const unsigned char idx_train_labels[6] = {3, 0, 6, 1, 3, 2};
static const unsigned char idx_test_labels[3] = {4, 0, 5};
static void make_idx(const char *rel, int gz)
{
    char p[4][256];
    const char *sfx = gz ? ".gz" : "";
    mkdir_rel(rel);
    snprintf(p[0], sizeof p[0], "%s/train-images-idx3-ubyte%s", rel, sfx);
    snprintf(p[1], sizeof p[1], "%s/train-labels-idx1-ubyte%s", rel, sfx);
    snprintf(p[2], sizeof p[2], "%s/t10k-images-idx3-ubyte%s", rel, sfx);
    snprintf(p[3], sizeof p[3], "%s/t10k-labels-idx1-ubyte%s", rel, sfx);
    write_idx_images(p[0], gz, 0x00000803, 6, 5, 4, 6 * 20, 1);
    write_idx_labels(p[1], gz, idx_train_labels, 6);
    write_idx_images(p[2], gz, 0x00000803, 3, 5, 4, 3 * 20, 2);
    write_idx_labels(p[3], gz, idx_test_labels, 3);
}

static void check_idx(const vit_dataset *tr, const vit_dataset *te)
{
    unsigned char px[6 * 20];
    ck_assert_int_eq(tr->count, 6);
    ck_assert_int_eq(te->count, 3);
    ck_assert_int_eq(tr->height, 5);
    ck_assert_int_eq(tr->width, 4);
    ck_assert_int_eq(tr->channels, 1);
    ck_assert_int_eq(te->height, 5);
    ck_assert_int_eq(te->width, 4);
    ck_assert_int_eq(tr->classes, 7); /* largest label 6 */
    ck_assert_int_eq(te->classes, 7);
    pattern(px, 6 * 20, 1);
    for (int i = 0; i < 6 * 20; i++)
        ck_assert_double_eq_tol(tr->images[i], px[i] / 255.0, PIX_TOL);
    pattern(px, 3 * 20, 2);
    for (int i = 0; i < 3 * 20; i++)
        ck_assert_double_eq_tol(te->images[i], px[i] / 255.0, PIX_TOL);
    for (int i = 0; i < 6; i++)
        ck_assert_int_eq(tr->labels[i], idx_train_labels[i]);
    for (int i = 0; i < 3; i++)
        ck_assert_int_eq(te->labels[i], idx_test_labels[i]);
}

START_TEST(idx_plain_and_gz)
{
    for (int gz = 0; gz < 2; gz++) {
        vit_dataset tr = {0}, te = {0};
        const char *dir = gz ? "idx_gz" : "idx_plain";
        make_idx(dir, gz);
        int rc = vit_data_load_idx(fu_path(dir), &tr, &te);
        ck_assert_msg(rc == VIT_OK, "%s", vit_last_error());
        check_idx(&tr, &te);
        /* IDX classes are named by their labels. */
        for (int k = 0; k < tr.classes; k++) {
            char num[16];
            snprintf(num, sizeof num, "%d", k);
            ck_assert_str_eq(tr.class_names[k], num);
            ck_assert_str_eq(te.class_names[k], num);
        }
        vit_dataset_free(&tr);
        vit_dataset_free(&te);
        ck_assert_ptr_null(tr.class_names);
        /* the same through vit_data_load */
        rc = vit_data_load(fu_path(dir), NULL, &tr, &te);
        ck_assert_msg(rc == VIT_OK, "%s", vit_last_error());
        check_idx(&tr, &te);
        vit_dataset_free(&tr);
        vit_dataset_free(&te);
    }
}
END_TEST

START_TEST(idx_errors)
{
    vit_dataset tr = {0}, te = {0};
    const char *img = "train-images-idx3-ubyte";

    make_idx("idx_magic", 0);
    write_idx_images("idx_magic/train-images-idx3-ubyte", 0, 0x00000D03, 6, 5, 4, 120, 1);
    expect_error(vit_data_load_idx(fu_path("idx_magic"), &tr, &te), VIT_EFORMAT, img);
    expect_zeroed(&tr);
    expect_zeroed(&te);

    /* Labels file where the images file should be: wrong magic too. */
    make_idx("idx_swap", 1);
    write_idx_labels("idx_swap/train-images-idx3-ubyte.gz", 1, idx_train_labels, 6);
    expect_error(vit_data_load_idx(fu_path("idx_swap"), &tr, &te), VIT_EFORMAT, img);

    /* 2^31 x 2^31 pixels: rejected from the header.  A loader that trusted
     * the header would fail with VIT_ENOMEM (or worse) instead. */
    make_idx("idx_huge", 0);
    write_idx_images("idx_huge/train-images-idx3-ubyte", 0, 0x00000803, 1, 1u << 31, 1u << 31,
                     64, 1);
    expect_error(vit_data_load_idx(fu_path("idx_huge"), &tr, &te), VIT_EFORMAT, img);
    /* 2^20 images of 2^20 x 2^20 (each size plausible, 2^60 bytes in all),
     * gzip so that the file size says nothing: truncated, not ENOMEM. */
    make_idx("idx_huge2", 1);
    write_idx_images("idx_huge2/train-images-idx3-ubyte.gz", 1, 0x00000803, 1u << 20, 1u << 20,
                     1u << 20, 1000, 1);
    expect_error(vit_data_load_idx(fu_path("idx_huge2"), &tr, &te), VIT_EFORMAT, img);
    expect_zeroed(&tr);

    /* Header says 6 images, file holds 5. */
    make_idx("idx_short", 0);
    write_idx_images("idx_short/train-images-idx3-ubyte", 0, 0x00000803, 6, 5, 4, 100, 1);
    expect_error(vit_data_load_idx(fu_path("idx_short"), &tr, &te), VIT_EFORMAT, img);

    /* 6 images, 5 labels. */
    make_idx("idx_count", 0);
    write_idx_labels("idx_count/train-labels-idx1-ubyte", 0, idx_train_labels, 5);
    expect_error(vit_data_load_idx(fu_path("idx_count"), &tr, &te), VIT_EFORMAT,
                 "train-labels-idx1-ubyte");

    /* Test images of another size. */
    make_idx("idx_size", 0);
    write_idx_images("idx_size/t10k-images-idx3-ubyte", 0, 0x00000803, 3, 4, 5, 60, 2);
    expect_error(vit_data_load_idx(fu_path("idx_size"), &tr, &te), VIT_EFORMAT,
                 "t10k-images-idx3-ubyte");

    /* Missing test labels. */
    make_idx("idx_missing", 0);
    ck_assert_int_eq(unlink(fu_path("idx_missing/t10k-labels-idx1-ubyte")), 0);
    expect_error(vit_data_load_idx(fu_path("idx_missing"), &tr, &te), VIT_EIO, "t10k-labels-idx1-ubyte");
    expect_zeroed(&tr);
    expect_zeroed(&te);

    ck_assert_int_eq(vit_data_load_idx(NULL, &tr, &te), VIT_EINVAL);
    ck_assert_int_eq(vit_data_load_idx(fu_path("idx_plain"), &tr, &tr), VIT_EINVAL);
}
END_TEST

/* ----------------------------------------------------------------- PNG */

/* Class folders b/ and a/ (a sorts first, so it is class 0), files named so
 * that strcmp order differs from numeric order, plus a file to ignore. */
static const char *png_classes[2] = {"a", "b"};
static const char *png_files[3] = {"10.png", "2.png", "3.PNG"};

static void make_png_dir(const char *rel, int h, int w, unsigned format, int seed)
{
    int c = format == PNG_FORMAT_GRAY ? 1 : format == PNG_FORMAT_RGB ? 3 : 4;
    unsigned char *px = malloc((size_t)h * w * c);
    char p[256];
    mkdir_rel(rel);
    for (int k = 1; k >= 0; k--) { /* create b first: readdir order is not relied on */
        snprintf(p, sizeof p, "%s/%s", rel, png_classes[k]);
        mkdir_rel(p);
        for (int f = 0; f < 3; f++) {
            snprintf(p, sizeof p, "%s/%s/%s", rel, png_classes[k], png_files[f]);
            pattern(px, (size_t)h * w * c, seed + 10 * k + f);
            write_png(p, px, h, w, format);
        }
        snprintf(p, sizeof p, "%s/%s/notes.txt", rel, png_classes[k]);
        write_text(p, "not an image");
    }
    free(px);
}

/* Image i of the folder: class i / 3, file i % 3 in the (strcmp) order
 * "10.png" < "2.png" < "3.PNG" of png_files. */
static void check_png_dir(const vit_dataset *d, int h, int w, int c, int file_c, int seed)
{
    unsigned char *px = malloc((size_t)h * w * file_c);
    ck_assert_int_eq(d->count, 6);
    ck_assert_int_eq(d->classes, 2);
    ck_assert_int_eq(d->height, h);
    ck_assert_int_eq(d->width, w);
    ck_assert_int_eq(d->channels, c);
    for (int i = 0; i < 6; i++) {
        int k = i / 3, f = i % 3;
        ck_assert_int_eq(d->labels[i], k);
        pattern(px, (size_t)h * w * file_c, seed + 10 * k + f);
        for (int p = 0; p < h * w; p++)
            for (int ch = 0; ch < c; ch++) /* file_c > c: alpha dropped */
                ck_assert_double_eq_tol(d->images[((size_t)i * h * w + p) * c + ch],
                                        px[p * file_c + ch] / 255.0, PIX_TOL);
    }
    free(px);
}

START_TEST(png_dirs)
{
    vit_dataset ds = {0};
    make_png_dir("png_gray", 6, 5, PNG_FORMAT_GRAY, 1);
    int rc = vit_data_load_png_dir(fu_path("png_gray"), &ds);
    ck_assert_msg(rc == VIT_OK, "%s", vit_last_error());
    check_png_dir(&ds, 6, 5, 1, 1, 1);
    vit_dataset_free(&ds);

    make_png_dir("png_rgb", 3, 7, PNG_FORMAT_RGB, 2);
    rc = vit_data_load_png_dir(fu_path("png_rgb"), &ds);
    ck_assert_msg(rc == VIT_OK, "%s", vit_last_error());
    check_png_dir(&ds, 3, 7, 3, 3, 2);
    vit_dataset_free(&ds);

    /* RGBA files load as RGB with the colour values untouched. */
    make_png_dir("png_rgba", 4, 4, PNG_FORMAT_RGBA, 3);
    rc = vit_data_load_png_dir(fu_path("png_rgba"), &ds);
    ck_assert_msg(rc == VIT_OK, "%s", vit_last_error());
    check_png_dir(&ds, 4, 4, 3, 4, 3);
    vit_dataset_free(&ds);
}
END_TEST

START_TEST(png_train_test)
{
    vit_dataset tr = {0}, te = {0};
    mkdir_rel("pngset");
    make_png_dir("pngset/train", 4, 3, PNG_FORMAT_RGB, 5);
    make_png_dir("pngset/test", 4, 3, PNG_FORMAT_RGB, 6);
    int rc = vit_data_load(fu_path("pngset"), NULL, &tr, &te);
    ck_assert_msg(rc == VIT_OK, "%s", vit_last_error());
    check_png_dir(&tr, 4, 3, 3, 3, 5);
    check_png_dir(&te, 4, 3, 3, 3, 6);
    /* The class folder names, in label order. */
    ck_assert_str_eq(tr.class_names[0], "a");
    ck_assert_str_eq(tr.class_names[1], "b");
    ck_assert_str_eq(te.class_names[1], "b");
    vit_dataset_free(&tr);
    vit_dataset_free(&te);

    /* test/ with a differently named class */
    mkdir_rel("pngset2");
    make_png_dir("pngset2/train", 4, 3, PNG_FORMAT_RGB, 5);
    make_png_dir("pngset2/test", 4, 3, PNG_FORMAT_RGB, 6);
    ck_assert_int_eq(rename(fu_path("pngset2/test/b"), fu_path("pngset2/test/c")), 0);
    expect_error(vit_data_load(fu_path("pngset2"), NULL, &tr, &te), VIT_EFORMAT, "pngset2/test");
    expect_zeroed(&tr);
    expect_zeroed(&te);

    /* test/ images gray while train/ is RGB */
    mkdir_rel("pngset3");
    make_png_dir("pngset3/train", 4, 3, PNG_FORMAT_RGB, 5);
    make_png_dir("pngset3/test", 4, 3, PNG_FORMAT_GRAY, 6);
    expect_error(vit_data_load(fu_path("pngset3"), NULL, &tr, &te), VIT_EFORMAT, "pngset3/test");
    expect_zeroed(&tr);
}
END_TEST

START_TEST(png_errors)
{
    vit_dataset ds = {0};
    unsigned char px[5 * 5 * 3];
    pattern(px, sizeof px, 9);

    /* A .png that is not a PNG. */
    make_png_dir("bad_sig", 2, 2, PNG_FORMAT_GRAY, 1);
    write_text("bad_sig/b/2.png", "hello, I am text");
    ds.count = 5;
    expect_error(vit_data_load_png_dir(fu_path("bad_sig"), &ds), VIT_EFORMAT, "bad_sig/b/2.png");
    expect_zeroed(&ds);
    /* A PNG cut short after its signature. */
    make_png_dir("bad_cut", 2, 2, PNG_FORMAT_GRAY, 1);
    write_bytes("bad_cut/a/3.PNG", "\x89PNG\r\n\x1a\n\0\0\0", 11, 0);
    expect_error(vit_data_load_png_dir(fu_path("bad_cut"), &ds), VIT_EFORMAT, "bad_cut/a/3.PNG");

    /* Sizes differ: the message names the first file that differs. */
    make_png_dir("bad_size", 4, 4, PNG_FORMAT_GRAY, 1);
    write_png("bad_size/a/2.png", px, 4, 5, PNG_FORMAT_GRAY);
    write_png("bad_size/b/10.png", px, 5, 4, PNG_FORMAT_GRAY);
    expect_error(vit_data_load_png_dir(fu_path("bad_size"), &ds), VIT_EFORMAT, "bad_size/a/2.png");
    ck_assert_ptr_null(strstr(vit_last_error(), "b/10.png"));
    /* Channel counts differ. */
    make_png_dir("bad_chan", 4, 4, PNG_FORMAT_GRAY, 1);
    write_png("bad_chan/b/10.png", px, 4, 4, PNG_FORMAT_RGB);
    expect_error(vit_data_load_png_dir(fu_path("bad_chan"), &ds), VIT_EFORMAT, "bad_chan/b/10.png");
    expect_zeroed(&ds);

    /* Empty class folder (only a non-PNG file in it). */
    make_png_dir("empty_class", 2, 2, PNG_FORMAT_GRAY, 1);
    mkdir_rel("empty_class/c");
    write_text("empty_class/c/readme.txt", "x");
    expect_error(vit_data_load_png_dir(fu_path("empty_class"), &ds), VIT_EFORMAT, "empty_class/c");

    /* No subfolders at all. */
    mkdir_rel("flat");
    write_png("flat/1.png", px, 2, 2, PNG_FORMAT_GRAY);
    expect_error(vit_data_load_png_dir(fu_path("flat"), &ds), VIT_EFORMAT, "flat");
    expect_error(vit_data_load_png_dir(fu_path("no_such_dir"), &ds), VIT_EIO, "no_such_dir");
    ck_assert_int_eq(vit_data_load_png_dir(NULL, &ds), VIT_EINVAL);
    ck_assert_int_eq(vit_data_load_png_dir(fu_path("flat"), NULL), VIT_EINVAL);
}
END_TEST

START_TEST(png_write_read)
{
    static const int shapes[2][3] = {{5, 7, 1}, {4, 6, 3}};
    mkdir_rel("rw");
    for (int s = 0; s < 2; s++) {
        int h = shapes[s][0], w = shapes[s][1], c = shapes[s][2];
        unsigned char px[5 * 7 * 3];
        vit_real *got = NULL;
        int gh = 0, gw = 0, gc = 0;
        pattern(px, (size_t)h * w * c, s);
        ck_assert_int_eq(vit_png_write(fu_path("rw/img.png"), px, h, w, c), VIT_OK);
        ck_assert_int_eq(fu_count_entries(fu_path("rw")), 1); /* no temporary left behind */
        int rc = vit_png_read(fu_path("rw/img.png"), &got, &gh, &gw, &gc);
        ck_assert_msg(rc == VIT_OK, "%s", vit_last_error());
        ck_assert_int_eq(gh, h);
        ck_assert_int_eq(gw, w);
        ck_assert_int_eq(gc, c);
        for (int i = 0; i < h * w * c; i++)
            ck_assert_double_eq_tol(got[i], px[i] / 255.0, PIX_TOL);
        free(got);

        /* Read back independently with libpng as well. */
        png_image im;
        unsigned char back[5 * 7 * 3];
        memset(&im, 0, sizeof im);
        im.version = PNG_IMAGE_VERSION;
        ck_assert(png_image_begin_read_from_file(&im, fu_path("rw/img.png")));
        ck_assert_uint_eq(im.width, (unsigned)w);
        ck_assert_uint_eq(im.height, (unsigned)h);
        ck_assert_uint_eq(im.format & PNG_FORMAT_FLAG_COLOR, c == 3 ? PNG_FORMAT_FLAG_COLOR : 0);
        im.format = c == 3 ? PNG_FORMAT_RGB : PNG_FORMAT_GRAY;
        ck_assert(png_image_finish_read(&im, NULL, back, 0, NULL));
        ck_assert_mem_eq(back, px, (size_t)h * w * c);
    }

    /* Failures: nothing is left behind, outputs are zeroed. */
    unsigned char px[4] = {0};
    vit_real *got = (vit_real *)px;
    int gh = 9, gw = 9, gc = 9;
    expect_error(vit_png_write(fu_path("rw/nodir/x.png"), px, 2, 2, 1), VIT_EIO, "rw/nodir/x.png");
    ck_assert_int_eq(fu_count_entries(fu_path("rw")), 1);
    ck_assert_int_eq(vit_png_write(fu_path("rw/x.png"), px, 2, 2, 2), VIT_EINVAL);
    ck_assert_int_eq(vit_png_write(fu_path("rw/x.png"), px, 0, 2, 1), VIT_EINVAL);
    ck_assert_int_eq(vit_png_write(fu_path("rw/x.png"), NULL, 2, 2, 1), VIT_EINVAL);
    ck_assert_int_eq(fu_count_entries(fu_path("rw")), 1);
    expect_error(vit_png_read(fu_path("rw/missing.png"), &got, &gh, &gw, &gc), VIT_EIO, "rw/missing.png");
    ck_assert_ptr_null(got);
    ck_assert_int_eq(gh + gw + gc, 0);
    write_text("rw/text.png", "plain text");
    expect_error(vit_png_read(fu_path("rw/text.png"), &got, &gh, &gw, &gc), VIT_EFORMAT, "rw/text.png");
    ck_assert_int_eq(vit_png_read(NULL, &got, &gh, &gw, &gc), VIT_EINVAL);
}
END_TEST

/* A 16-bit grayscale file (linear, as the simplified API writes it) reads
 * as sample / 65535: no gamma re-encoding on the way to [0, 1]. */
START_TEST(png_16bit)
{
    png_uint_16 px[3 * 4];
    png_image im;
    vit_real *got = NULL;
    int h = 0, w = 0, c = 0;
    for (int i = 0; i < 12; i++)
        px[i] = (png_uint_16)(i * 5957 + 13);
    mkdir_rel("p16");
    memset(&im, 0, sizeof im);
    im.version = PNG_IMAGE_VERSION;
    im.width = 4;
    im.height = 3;
    im.format = PNG_FORMAT_LINEAR_Y;
    ck_assert(png_image_write_to_file(&im, fu_path("p16/g.png"), 0, px, 0, NULL));
    int rc = vit_png_read(fu_path("p16/g.png"), &got, &h, &w, &c);
    ck_assert_msg(rc == VIT_OK, "%s", vit_last_error());
    ck_assert_int_eq(h, 3);
    ck_assert_int_eq(w, 4);
    ck_assert_int_eq(c, 1);
    for (int i = 0; i < 12; i++)
        ck_assert_double_eq_tol(got[i], px[i] / 65535.0, PIX_TOL);
    free(got);
}
END_TEST

START_TEST(load_dispatch)
{
    vit_dataset tr = {0}, te = {0};
    int rc = vit_data_load("digits", DIGITS, &tr, &te);
    ck_assert_msg(rc == VIT_OK, "%s", vit_last_error());
    ck_assert_int_eq(tr.count, 1437);
    ck_assert_int_eq(te.count, 360);
    vit_dataset_free(&tr);
    vit_dataset_free(&te);

    ck_assert_int_eq(vit_data_load("digits", NULL, &tr, &te), VIT_EINVAL);
    mkdir_rel("not_a_set");
    rc = vit_data_load(fu_path("not_a_set"), DIGITS, &tr, &te);
    ck_assert_int_eq(rc, VIT_EINVAL);
    char want[600];
    snprintf(want, sizeof want, "%s: not a data set (expected digits, a folder of IDX files, "
             "a folder of CIFAR-10/100 binary batches, or a folder of class folders of PNG or JPEG "
             "images, with or without train/ and test/); found an empty folder", fu_path("not_a_set"));
    ck_assert_str_eq(vit_last_error(), want);
    expect_error(vit_data_load("mnist-typo", DIGITS, &tr, &te), VIT_EIO,
                 "mnist-typo: no such file or folder");
    expect_zeroed(&tr);
    expect_zeroed(&te);
    ck_assert_int_eq(vit_data_load(NULL, DIGITS, &tr, &te), VIT_EINVAL);
}
END_TEST


/* A train/ and test/ set whose class a holds 6x5 grayscale PNGs and class
 * b 10x9 RGB ones (make_png_dir's files, notes.txt in each class). */
static void make_mixed_set(const char *rel)
{
    char p[256];
    mkdir_rel(rel);
    for (int s = 0; s < 2; s++) {
        snprintf(p, sizeof p, "%s/%s", rel, s ? "test" : "train");
        make_png_dir(p, 6, 5, PNG_FORMAT_GRAY, 1 + s);
        /* class b again, RGB and larger */
        for (int f = 0; f < 3; f++) {
            unsigned char px[10 * 9 * 3];
            pattern(px, sizeof px, 50 + f + s);
            snprintf(p, sizeof p, "%s/%s/b/%s", rel, s ? "test" : "train", png_files[f]);
            write_png(p, px, 10, 9, PNG_FORMAT_RGB);
        }
    }
}

/* Image i of ds equals the file at rel fitted by vit_image_fit. */
static void expect_fitted(const vit_dataset *ds, int i, const char *rel)
{
    vit_real *px = NULL, *want;
    int h, w, c;
    ck_assert_int_eq(vit_image_read(fu_path(rel), &px, &h, &w, &c), VIT_OK);
    size_t n = (size_t)ds->height * ds->width * ds->channels;
    want = malloc(n * sizeof *want);
    ck_assert_int_eq(vit_image_fit(px, h, w, c, want, ds->height, ds->width, ds->channels),
                     VIT_OK);
    for (size_t j = 0; j < n; j++)
        ck_assert_double_eq_tol(ds->images[(size_t)i * n + j], want[j], PIX_TOL);
    free(px);
    free(want);
}

START_TEST(load_opts_fit)
{
    vit_dataset tr = {0}, te = {0};
    vit_data_report rep;
    make_mixed_set("mixed");
    /* The strict loader keeps refusing mixed images. */
    expect_error(vit_data_load(fu_path("mixed"), NULL, &tr, &te), VIT_EFORMAT, "mixed/train/b");
    /* The rule: upper medians 10x9, each rounded to a multiple of 8 (8x8);
     * RGB as some images are colour. */
    int val = -1;
    int rc = vit_data_load_opts(fu_path("mixed"), NULL, NULL, &tr, &te, &val, &rep);
    ck_assert_msg(rc == VIT_OK, "%s", vit_last_error());
    ck_assert_int_eq(val, 0);
    ck_assert_int_eq(tr.count, 6);
    ck_assert_int_eq(te.count, 6);
    ck_assert_int_eq(tr.height, 8);
    ck_assert_int_eq(tr.width, 8);
    ck_assert_int_eq(tr.channels, 3);
    ck_assert_int_eq(te.height * 100 + te.width * 10 + te.channels, 883);
    ck_assert_int_eq(rep.fit.height * 100 + rep.fit.width * 10 + rep.fit.channels, 883);
    ck_assert_int_eq(rep.ruled, 3);
    ck_assert_int_eq(rep.min_h * 1000 + rep.max_h, 6010);
    ck_assert_int_eq(rep.min_w * 1000 + rep.max_w, 5009);
    ck_assert_int_eq(rep.gray, 6);
    ck_assert_int_eq(rep.colour, 6);
    ck_assert_int_eq(rep.resized, 12);
    ck_assert_int_eq(rep.converted, 6);
    ck_assert_int_eq(rep.ignored, 4); /* notes.txt in each class folder */
    ck_assert_int_eq(rep.skipped, 0);
    expect_fitted(&tr, 0, "mixed/train/a/10.png");
    expect_fitted(&tr, 4, "mixed/train/b/2.png");
    expect_fitted(&te, 2, "mixed/test/a/3.PNG");
    /* a gray image made RGB: three equal channels */
    ck_assert_double_eq(tr.images[0], tr.images[1]);
    ck_assert_double_eq(tr.images[0], tr.images[2]);
    vit_dataset_free(&tr);
    vit_dataset_free(&te);

    /* A fit given: every image made 4x3 grayscale, nothing ruled. */
    vit_data_opts o = {{0, 0, 0}, {4, 3, 1}, 0};
    rc = vit_data_load_opts(fu_path("mixed"), NULL, &o, &tr, &te, NULL, &rep);
    ck_assert_msg(rc == VIT_OK, "%s", vit_last_error());
    ck_assert_int_eq(tr.height * 100 + tr.width * 10 + tr.channels, 431);
    ck_assert_int_eq(rep.ruled, 0);
    ck_assert_int_eq(rep.converted, 6);
    expect_fitted(&tr, 5, "mixed/train/b/3.PNG");
    vit_dataset_free(&tr);
    vit_dataset_free(&te);

    /* A broken file: refused (unreadable set), or skipped and named. */
    write_text("mixed/train/a/4.png", "not a picture");
    rc = vit_data_load_opts(fu_path("mixed"), NULL, NULL, &tr, &te, NULL, &rep);
    expect_error(rc, VIT_EFORMAT, "mixed/train/a/4.png");
    ck_assert_int_eq(rep.unreadable, 1);
    expect_zeroed(&tr);
    o = (vit_data_opts){{0, 0, 0}, {0, 0, 0}, 1};
    rc = vit_data_load_opts(fu_path("mixed"), NULL, &o, &tr, &te, NULL, &rep);
    ck_assert_msg(rc == VIT_OK, "%s", vit_last_error());
    ck_assert_int_eq(rep.skipped, 1);
    ck_assert_ptr_nonnull(strstr(rep.skipped_why[0], "mixed/train/a/4.png: not a PNG"));
    ck_assert_int_eq(tr.count, 6);
    vit_dataset_free(&tr);
    vit_dataset_free(&te);

    /* One size, gray next to colour: the size kept, RGB (ruled). */
    mkdir_rel("chan");
    make_png_dir("chan/train", 4, 3, PNG_FORMAT_GRAY, 1);
    make_png_dir("chan/test", 4, 3, PNG_FORMAT_GRAY, 2);
    unsigned char rgb[4 * 3 * 3];
    pattern(rgb, sizeof rgb, 9);
    write_png("chan/train/b/2.png", rgb, 4, 3, PNG_FORMAT_RGB);
    expect_error(vit_data_load(fu_path("chan"), NULL, &tr, &te), VIT_EFORMAT, "chan/train/b/2.png");
    rc = vit_data_load_opts(fu_path("chan"), NULL, NULL, &tr, &te, NULL, &rep);
    ck_assert_msg(rc == VIT_OK, "%s", vit_last_error());
    ck_assert_int_eq(rep.ruled, 2);
    ck_assert_int_eq(tr.height * 100 + tr.width * 10 + tr.channels, 433);
    ck_assert_int_eq(rep.resized, 0);
    ck_assert_int_eq(rep.converted, 11);
    expect_fitted(&tr, 4, "chan/train/b/2.png");
    expect_fitted(&tr, 0, "chan/train/a/10.png");
    vit_dataset_free(&tr);
    vit_dataset_free(&te);

    /* Bad fits. */
    o = (vit_data_opts){{0, 0, 0}, {4, 0, 0}, 0};
    expect_error(vit_data_load_opts(fu_path("mixed"), NULL, &o, &tr, &te, NULL, &rep),
                 VIT_EINVAL, "4x0");
    o = (vit_data_opts){{0, 0, 0}, {0, 0, 2}, 0};
    expect_error(vit_data_load_opts(fu_path("mixed"), NULL, &o, &tr, &te, NULL, &rep),
                 VIT_EINVAL, "channels 2");
}
END_TEST

START_TEST(alpha_over_white)
{
    /* alpha 0, 255 and 128 over colour values 200, 100, 100 */
    unsigned char px[3 * 4] = {200, 10, 20, 0, 100, 50, 25, 255, 100, 100, 100, 128};
    vit_real *img = NULL;
    int h, w, c;
    write_png("alpha.png", px, 1, 3, PNG_FORMAT_RGBA);
    ck_assert_int_eq(vit_image_load(fu_path("alpha.png"), NULL, &img, &h, &w, &c), VIT_OK);
    ck_assert_int_eq(h * 100 + w * 10 + c, 133);
    double a = 128 / 255.0;
    ck_assert_double_eq_tol(img[0], 1, PIX_TOL);
    ck_assert_double_eq_tol(img[3], 100 / 255.0, PIX_TOL);
    ck_assert_double_eq_tol(img[6], 100 / 255.0 * a + 1 - a, PIX_TOL);
    free(img);
    /* vit_image_read keeps dropping alpha, as documented */
    ck_assert_int_eq(vit_image_read(fu_path("alpha.png"), &img, &h, &w, &c), VIT_OK);
    ck_assert_double_eq_tol(img[0], 200 / 255.0, PIX_TOL);
    free(img);
    /* and vit_image_load fits: 2x2 gray */
    vit_data_fit fit = {2, 2, 1};
    ck_assert_int_eq(vit_image_load(fu_path("alpha.png"), &fit, &img, &h, &w, &c), VIT_OK);
    ck_assert_int_eq(h * 100 + w * 10 + c, 221);
    free(img);
}
END_TEST

START_TEST(dataset_fit)
{
    vit_dataset tr = {0}, te = {0};
    vit_data_report rep;
    memset(&rep, 0, sizeof rep);
    ck_assert_int_eq(vit_data_load_digits(DIGITS, 1437, &tr, &te), VIT_OK);
    vit_real first[64];
    memcpy(first, te.images, sizeof first);
    vit_data_fit fit = {4, 4, 3};
    ck_assert_int_eq(vit_dataset_fit(&te, &fit, &rep), VIT_OK);
    ck_assert_int_eq(te.height * 100 + te.width * 10 + te.channels, 443);
    ck_assert_int_eq(rep.resized, 360);
    ck_assert_int_eq(rep.converted, 360);
    vit_real want[48];
    ck_assert_int_eq(vit_image_fit(first, 8, 8, 1, want, 4, 4, 3), VIT_OK);
    for (int j = 0; j < 48; j++)
        ck_assert_double_eq_tol(te.images[j], want[j], PIX_TOL);
    fit = (vit_data_fit){0, 3, 0};
    expect_error(vit_dataset_fit(&te, &fit, NULL), VIT_EINVAL, "vit_dataset_fit");
    vit_dataset_free(&tr);
    vit_dataset_free(&te);
}
END_TEST

static Suite *data_suite(void)
{
    Suite *s = suite_create("test_data");
    TCase *tc = tcase_create("data");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, digits_shipped);
    tcase_add_test(tc, digits_small_plain_and_gz);
    tcase_add_test(tc, digits_errors);
    tcase_add_test(tc, idx_plain_and_gz);
    tcase_add_test(tc, idx_errors);
    tcase_add_test(tc, png_dirs);
    tcase_add_test(tc, png_train_test);
    tcase_add_test(tc, png_errors);
    tcase_add_test(tc, png_write_read);
    tcase_add_test(tc, png_16bit);
    tcase_add_test(tc, load_dispatch);
    tcase_add_test(tc, load_opts_fit);
    tcase_add_test(tc, alpha_over_white);
    tcase_add_test(tc, dataset_fit);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) { return fu_run_suite(data_suite, "/tmp/vit_test_data_XXXXXX"); }
