/* tests/test_data_formats.c - JPEG class folders, CIFAR-10/100 binary
 * batches, colour IDX, what vit_data_load says about paths that are no data
 * set, and per-class counts (float32 build).
 *
 * Every input is written here, JPEGs with libjpeg's compressor and the
 * binary formats byte by byte, into a temporary folder under /tmp removed
 * at the end. */
#include <check.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#ifdef VIT_HAVE_JPEG
#include <jpeglib.h>
#endif

#include "file_util.h"
#include "vit/data.h"

#define PIX_TOL 1e-6 /* float rounding of byte/255 */

static void mkdir_rel(const char *rel)
{
    ck_assert_msg(mkdir(fu_path(rel), 0755) == 0, "mkdir %s", fu_path(rel));
}

static void write_rel(const char *rel, const void *b, size_t n) { fu_write(fu_path(rel), b, n); }

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
    ck_assert_ptr_null(ds->class_names);
}

/* Byte (y, x, ch) of the test images: smooth, so that JPEG at quality 100
 * reproduces it closely, and different per channel and seed, so that a
 * swapped channel or a transposed image shows. */
static unsigned char smooth(int y, int x, int ch, int seed)
{
    return (unsigned char)(20 + 5 * y + 3 * x + 40 * ch + 4 * seed); /* wraps only in CIFAR's 32x32 */
}

/* ---------------------------------------------------------------- JPEG */
#ifdef VIT_HAVE_JPEG

/* Writes a 16x12 (HxW) JPEG with libjpeg: c = 1 gray, 3 RGB (no chroma
 * subsampling), 4 CMYK; progressive or baseline; quality 100. */
static void write_jpeg(const char *rel, int c, int progressive, int seed)
{
    enum { H = 16, W = 12 };
    struct jpeg_compress_struct j;
    struct jpeg_error_mgr err;
    unsigned char row[W * 4];
    FILE *fp = fopen(fu_path(rel), "wb");
    ck_assert_ptr_nonnull(fp);
    j.err = jpeg_std_error(&err);
    jpeg_create_compress(&j);
    jpeg_stdio_dest(&j, fp);
    j.image_width = W;
    j.image_height = H;
    j.input_components = c;
    j.in_color_space = c == 1 ? JCS_GRAYSCALE : c == 3 ? JCS_RGB : JCS_CMYK;
    jpeg_set_defaults(&j);
    jpeg_set_quality(&j, 100, TRUE);
    for (int i = 0; i < j.num_components; i++)
        j.comp_info[i].h_samp_factor = j.comp_info[i].v_samp_factor = 1;
    if (progressive)
        jpeg_simple_progression(&j);
    jpeg_start_compress(&j, TRUE);
    while (j.next_scanline < H) {
        for (int x = 0; x < W; x++)
            for (int ch = 0; ch < c; ch++)
                row[x * c + ch] = smooth((int)j.next_scanline, x, ch, seed);
        JSAMPROW rows[1] = {row};
        jpeg_write_scanlines(&j, rows, 1);
    }
    jpeg_finish_compress(&j);
    jpeg_destroy_compress(&j);
    ck_assert_int_eq(fclose(fp), 0);
}

/* Within 3/255 of the bytes written: JPEG is lossy, but at quality 100
 * without subsampling a smooth image comes back this close; a wrong
 * layout or channel order is off by tens. */
static void check_jpeg_pixels(const vit_real *px, int c, int seed)
{
    for (int y = 0; y < 16; y++)
        for (int x = 0; x < 12; x++)
            for (int ch = 0; ch < c; ch++) {
                double want = smooth(y, x, ch, seed) / 255.0;
                double got = px[((size_t)y * 12 + (size_t)x) * (size_t)c + (size_t)ch];
                ck_assert_msg(fabs(got - want) <= 3.0 / 255.0 + PIX_TOL,
                              "pixel (%d,%d,%d): %g, wrote %g", y, x, ch, got, want);
            }
}

START_TEST(jpeg_read_kinds)
{
    static const struct { int c, progressive; const char *name; } kinds[] = {
        {1, 0, "gray_base.jpg"}, {1, 1, "gray_prog.jpg"},
        {3, 0, "rgb_base.jpg"}, {3, 1, "rgb_prog.jpeg"}};
    for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++) {
        vit_real *px = NULL;
        int h, w, c;
        write_jpeg(kinds[i].name, kinds[i].c, kinds[i].progressive, (int)i);
        int rc = vit_image_read(fu_path(kinds[i].name), &px, &h, &w, &c);
        ck_assert_msg(rc == VIT_OK, "%s: %s", kinds[i].name, vit_last_error());
        ck_assert_int_eq(h, 16);
        ck_assert_int_eq(w, 12);
        ck_assert_int_eq(c, kinds[i].c);
        check_jpeg_pixels(px, c, (int)i);
        free(px);
    }
}
END_TEST

START_TEST(jpeg_class_folders)
{
    /* Class a: .jpg, .JPEG and .png files side by side; class b: .JPG. */
    mkdir_rel("jset");
    mkdir_rel("jset/a");
    mkdir_rel("jset/b");
    write_jpeg("jset/a/1.jpg", 3, 0, 1);
    write_jpeg("jset/a/2.JPEG", 3, 1, 2);
    write_jpeg("jset/b/1.JPG", 3, 0, 3);
    unsigned char rgb[16 * 12 * 3];
    for (int y = 0; y < 16; y++)
        for (int x = 0; x < 12; x++)
            for (int ch = 0; ch < 3; ch++)
                rgb[(y * 12 + x) * 3 + ch] = smooth(y, x, ch, 4);
    ck_assert_int_eq(vit_png_write(fu_path("jset/a/3.png"), rgb, 16, 12, 3), VIT_OK);
    write_rel("jset/a/notes.txt", "x", 1);

    vit_dataset ds = {0};
    int rc = vit_data_load_png_dir(fu_path("jset"), &ds);
    ck_assert_msg(rc == VIT_OK, "%s", vit_last_error());
    ck_assert_int_eq(ds.count, 4);
    ck_assert_int_eq(ds.channels, 3);
    ck_assert_int_eq(ds.labels[0], 0);
    ck_assert_int_eq(ds.labels[2], 0);
    ck_assert_int_eq(ds.labels[3], 1);
    size_t n = 16 * 12 * 3;
    check_jpeg_pixels(ds.images, 3, 1);         /* a/1.jpg */
    check_jpeg_pixels(ds.images + n, 3, 2);     /* a/2.JPEG */
    for (size_t i = 0; i < n; i++)              /* a/3.png, exact */
        ck_assert_double_eq_tol(ds.images[2 * n + i], rgb[i] / 255.0, PIX_TOL);
    check_jpeg_pixels(ds.images + 3 * n, 3, 3); /* b/1.JPG */
    vit_dataset_free(&ds);

    /* A gray JPEG among colour ones is named like a PNG would be. */
    write_jpeg("jset/b/2.jpg", 1, 0, 5);
    expect_error(vit_data_load_png_dir(fu_path("jset"), &ds), VIT_EFORMAT, "b/2.jpg: grayscale");
    expect_zeroed(&ds);
}
END_TEST

START_TEST(jpeg_refused)
{
    vit_real *px = (vit_real *)1;
    int h = 1, w = 1, c = 1;
    write_jpeg("cmyk.jpg", 4, 0, 0);
    expect_error(vit_image_read(fu_path("cmyk.jpg"), &px, &h, &w, &c), VIT_EFORMAT,
                 "cmyk.jpg: CMYK JPEG is not supported");
    ck_assert_ptr_null(px);
    ck_assert(h == 0 && w == 0 && c == 0);

    /* 12-bit: this libjpeg writes only 8-bit files, so the precision byte
     * of the frame header (SOF0: FF C0, length, precision) is set to 12. */
    write_jpeg("deep.jpg", 1, 0, 0);
    size_t n;
    unsigned char *b = fu_read(fu_path("deep.jpg"), &n);
    size_t at = 2;
    while (at + 4 < n && !(b[at] == 0xFF && b[at + 1] == 0xC0))
        at += 2 + ((size_t)b[at + 2] << 8 | b[at + 3]);
    ck_assert_msg(at + 4 < n && b[at + 4] == 8, "no 8-bit SOF0 found");
    b[at + 4] = 12;
    write_rel("deep.jpg", b, n);
    expect_error(vit_image_read(fu_path("deep.jpg"), &px, &h, &w, &c), VIT_EFORMAT,
                 "deep.jpg: 12-bit JPEG is not supported");

    /* Cut in the middle of the entropy-coded data: libjpeg would pad the
     * rest with gray and warn; the reader refuses it. */
    b[at + 4] = 8;
    write_rel("cut.jpg", b, n * 2 / 3);
    expect_error(vit_image_read(fu_path("cut.jpg"), &px, &h, &w, &c), VIT_EFORMAT,
                 "cut.jpg: corrupt JPEG");
    /* Only the signature: an error naming the file, not exit(). */
    write_rel("sig.jpg", b, 3);
    expect_error(vit_image_read(fu_path("sig.jpg"), &px, &h, &w, &c), VIT_EFORMAT, "sig.jpg");
    /* The same bad file inside a class folder is named there too. */
    mkdir_rel("jbad");
    mkdir_rel("jbad/a");
    write_rel("jbad/a/x.jpeg", b, n * 2 / 3);
    vit_dataset ds = {0};
    expect_error(vit_data_load_png_dir(fu_path("jbad"), &ds), VIT_EFORMAT, "a/x.jpeg: corrupt JPEG");
    expect_zeroed(&ds);
    free(b);
}
END_TEST

#else /* !VIT_HAVE_JPEG */

START_TEST(jpeg_without_libjpeg)
{
    vit_real *px = NULL;
    int h, w, c;
    write_rel("any.jpg", "\xff\xd8\xff\xe0", 4);
    expect_error(vit_image_read(fu_path("any.jpg"), &px, &h, &w, &c), VIT_EFORMAT,
                 "any.jpg: a JPEG file, but this libvit was built without JPEG support");
}
END_TEST

#endif /* VIT_HAVE_JPEG */

/* --------------------------------------------------------------- CIFAR */

/* One CIFAR record: label byte(s), then the planar image of image number
 * img (smooth(y, x, ch, img) at plane ch, row y, column x). */
static size_t cifar_record(unsigned char *out, const unsigned char *labels, int nlab, int img)
{
    memcpy(out, labels, (size_t)nlab);
    for (int ch = 0; ch < 3; ch++)
        for (int y = 0; y < 32; y++)
            for (int x = 0; x < 32; x++)
                out[nlab + ch * 1024 + y * 32 + x] = smooth(y, x, ch, img);
    return (size_t)nlab + 3072;
}

/* Writes n records with the given labels (nlab bytes each), images
 * numbered from first. */
static void write_cifar(const char *rel, const unsigned char *labels, int nlab, int n, int first)
{
    unsigned char *b = malloc((size_t)n * (size_t)(nlab + 3072));
    size_t at = 0;
    ck_assert_ptr_nonnull(b);
    for (int i = 0; i < n; i++)
        at += cifar_record(b + at, labels + i * nlab, nlab, first + i);
    write_rel(rel, b, at);
    free(b);
}

static void check_cifar_image(const vit_real *px, int img)
{
    for (int y = 0; y < 32; y++)
        for (int x = 0; x < 32; x++)
            for (int ch = 0; ch < 3; ch++)
                ck_assert_double_eq_tol(px[(y * 32 + x) * 3 + ch], smooth(y, x, ch, img) / 255.0,
                                        PIX_TOL);
}

/* CIFAR-10 in rel: batches of 2, 1, 1, 1, 1 records (images 0..5, labels
 * 3 1 4 1 5 9) and a test batch of 2 (images 6, 7, labels 2 6). */
static const unsigned char c10_train_labels[6] = {3, 1, 4, 1, 5, 9};
static void make_cifar10(const char *rel, int names)
{
    char p[256];
    mkdir_rel(rel);
    for (int b = 0, img = 0; b < 5; b++) {
        int n = b == 0 ? 2 : 1;
        snprintf(p, sizeof p, "%s/data_batch_%d.bin", rel, b + 1);
        write_cifar(p, c10_train_labels + img, 1, n, img);
        img += n;
    }
    snprintf(p, sizeof p, "%s/test_batch.bin", rel);
    write_cifar(p, (const unsigned char[]){2, 6}, 1, 2, 6);
    if (names) {
        snprintf(p, sizeof p, "%s/batches.meta.txt", rel);
        const char *t = "airplane\nautomobile\nbird\ncat\ndeer\ndog\nfrog\nhorse\nship\ntruck\n\n";
        write_rel(p, t, strlen(t));
    }
}

START_TEST(cifar10)
{
    vit_dataset tr = {0}, te = {0};
    make_cifar10("c10", 1);
    int rc = vit_data_load(fu_path("c10"), NULL, &tr, &te);
    ck_assert_msg(rc == VIT_OK, "%s", vit_last_error());
    ck_assert_int_eq(tr.count, 6);
    ck_assert_int_eq(te.count, 2);
    ck_assert(tr.height == 32 && tr.width == 32 && tr.channels == 3 && tr.classes == 10);
    ck_assert(te.height == 32 && te.width == 32 && te.channels == 3 && te.classes == 10);
    for (int i = 0; i < 6; i++) {
        ck_assert_int_eq(tr.labels[i], c10_train_labels[i]);
        check_cifar_image(tr.images + (size_t)i * 3072, i);
    }
    ck_assert_int_eq(te.labels[1], 6);
    check_cifar_image(te.images + 3072, 7);
    ck_assert_str_eq(tr.class_names[0], "airplane");
    ck_assert_str_eq(tr.class_names[9], "truck");
    ck_assert_str_eq(te.class_names[3], "cat");
    vit_dataset_free(&tr);
    vit_dataset_free(&te);

    /* Without batches.meta.txt the classes are numbered. */
    make_cifar10("c10_nonames", 0);
    ck_assert_int_eq(vit_data_load_cifar(fu_path("c10_nonames"), 0, &tr, &te), VIT_OK);
    ck_assert_str_eq(tr.class_names[9], "9");
    vit_dataset_free(&tr);
    vit_dataset_free(&te);
    expect_error(vit_data_load_cifar(fu_path("c10_nonames"), 1, &tr, &te), VIT_EINVAL,
                 "no coarse labels");
}
END_TEST

START_TEST(cifar10_errors)
{
    vit_dataset tr = {0}, te = {0};
    char want[512];

    /* A batch cut one byte short of its second record. */
    make_cifar10("c10_cut", 1);
    size_t n;
    unsigned char *b = fu_read(fu_path("c10_cut/data_batch_1.bin"), &n);
    write_rel("c10_cut/data_batch_1.bin", b, n - 1);
    free(b);
    snprintf(want, sizeof want, "%s: 6145 bytes, not a whole number of 3073-byte records",
             fu_path("c10_cut/data_batch_1.bin"));
    expect_error(vit_data_load(fu_path("c10_cut"), NULL, &tr, &te), VIT_EFORMAT, want);
    expect_zeroed(&tr);
    expect_zeroed(&te);

    /* A missing batch is named, with what the layout needs. */
    make_cifar10("c10_gap", 1);
    ck_assert_int_eq(unlink(fu_path("c10_gap/data_batch_4.bin")), 0);
    snprintf(want, sizeof want, "%s: missing (CIFAR-10 needs data_batch_1.bin",
             fu_path("c10_gap/data_batch_4.bin"));
    expect_error(vit_data_load(fu_path("c10_gap"), NULL, &tr, &te), VIT_EIO, want);

    /* Label 10 in a 10-class set, in record 0 of the test batch. */
    make_cifar10("c10_label", 1);
    write_cifar("c10_label/test_batch.bin", (const unsigned char[]){10}, 1, 1, 0);
    expect_error(vit_data_load(fu_path("c10_label"), NULL, &tr, &te), VIT_EFORMAT,
                 "test_batch.bin: record 0 has label 10, expected 0..9");

    /* Nine names for ten classes. */
    make_cifar10("c10_names", 0);
    write_rel("c10_names/batches.meta.txt", "a\nb\nc\nd\ne\nf\ng\nh\ni\n", 18);
    expect_error(vit_data_load(fu_path("c10_names"), NULL, &tr, &te), VIT_EFORMAT,
                 "batches.meta.txt: 9 class names, expected 10");
    expect_zeroed(&tr);
    expect_zeroed(&te);

    /* An empty batch holds no record. */
    make_cifar10("c10_empty", 1);
    write_rel("c10_empty/test_batch.bin", "", 0);
    expect_error(vit_data_load(fu_path("c10_empty"), NULL, &tr, &te), VIT_EFORMAT,
                 "test_batch.bin: 0 bytes");
}
END_TEST

START_TEST(cifar100)
{
    vit_dataset tr = {0}, te = {0};
    /* (coarse, fine) pairs */
    static const unsigned char trl[6] = {4, 30, 19, 99, 0, 7};
    static const unsigned char tel[2] = {1, 55};
    mkdir_rel("c100");
    write_cifar("c100/train.bin", trl, 2, 3, 0);
    write_cifar("c100/test.bin", tel, 2, 1, 3);
    char names[100 * 8] = "", *p = names;
    for (int k = 0; k < 100; k++) /* snprintf: gcc -O3 -Werror misreads sprintf here */
        p += snprintf(p, sizeof names - (size_t)(p - names), "  f%d \n", k);
    write_rel("c100/fine_label_names.txt", names, strlen(names));

    int rc = vit_data_load(fu_path("c100"), NULL, &tr, &te);
    ck_assert_msg(rc == VIT_OK, "%s", vit_last_error());
    ck_assert_int_eq(tr.count, 3);
    ck_assert_int_eq(te.count, 1);
    ck_assert_int_eq(tr.classes, 100);
    ck_assert_int_eq(tr.labels[0], 30);
    ck_assert_int_eq(tr.labels[1], 99);
    ck_assert_int_eq(tr.labels[2], 7);
    ck_assert_int_eq(te.labels[0], 55);
    check_cifar_image(tr.images + 2 * 3072, 2);
    check_cifar_image(te.images, 3);
    ck_assert_str_eq(tr.class_names[30], "f30");
    vit_dataset_free(&tr);
    vit_dataset_free(&te);

    /* Coarse labels: 20 classes, numbered (no coarse_label_names.txt). */
    rc = vit_data_load_cifar(fu_path("c100"), 1, &tr, &te);
    ck_assert_msg(rc == VIT_OK, "%s", vit_last_error());
    ck_assert_int_eq(tr.classes, 20);
    ck_assert_int_eq(tr.labels[0], 4);
    ck_assert_int_eq(tr.labels[1], 19);
    ck_assert_int_eq(te.labels[0], 1);
    ck_assert_str_eq(tr.class_names[19], "19");
    vit_dataset_free(&tr);
    vit_dataset_free(&te);

    /* A CIFAR-10 record (3073 bytes) is no CIFAR-100 record (3074). */
    write_cifar("c100/test.bin", tel, 1, 2, 0);
    expect_error(vit_data_load(fu_path("c100"), NULL, &tr, &te), VIT_EFORMAT,
                 "test.bin: 6146 bytes, not a whole number of 3074-byte records");
    ck_assert_int_eq(unlink(fu_path("c100/test.bin")), 0);
    expect_error(vit_data_load(fu_path("c100"), NULL, &tr, &te), VIT_EIO,
                 "test.bin: missing (CIFAR-100 needs train.bin and test.bin)");
}
END_TEST

/* ---------------------------------------------------------- colour IDX */

static void put_be32(unsigned char *p, uint32_t v)
{
    p[0] = (unsigned char)(v >> 24);
    p[1] = (unsigned char)(v >> 16);
    p[2] = (unsigned char)(v >> 8);
    p[3] = (unsigned char)v;
}

/* Colour IDX images: magic 0x804, n x 3 x 2 x c, byte value = index * 7. */
static void write_idx4(const char *rel, uint32_t n, uint32_t c)
{
    size_t bytes = (size_t)n * 3 * 2 * c;
    unsigned char *b = malloc(20 + bytes);
    ck_assert_ptr_nonnull(b);
    put_be32(b, 0x804);
    put_be32(b + 4, n);
    put_be32(b + 8, 3);
    put_be32(b + 12, 2);
    put_be32(b + 16, c);
    for (size_t i = 0; i < bytes; i++)
        b[20 + i] = (unsigned char)(i * 7);
    write_rel(rel, b, 20 + bytes);
    free(b);
}

static void write_idx_labels(const char *rel, const unsigned char *labels, uint32_t n)
{
    unsigned char b[64];
    put_be32(b, 0x801);
    put_be32(b + 4, n);
    memcpy(b + 8, labels, n);
    write_rel(rel, b, 8 + n);
}

START_TEST(idx_colour)
{
    vit_dataset tr = {0}, te = {0};
    mkdir_rel("idx4");
    write_idx4("idx4/train-images-idx4-ubyte", 4, 3);
    write_idx_labels("idx4/train-labels-idx1-ubyte", (const unsigned char[]){0, 1, 2, 1}, 4);
    write_idx4("idx4/t10k-images-idx4-ubyte", 2, 3);
    write_idx_labels("idx4/t10k-labels-idx1-ubyte", (const unsigned char[]){2, 0}, 2);
    int rc = vit_data_load(fu_path("idx4"), NULL, &tr, &te);
    ck_assert_msg(rc == VIT_OK, "%s", vit_last_error());
    ck_assert(tr.count == 4 && tr.height == 3 && tr.width == 2 && tr.channels == 3);
    ck_assert(te.count == 2 && te.channels == 3 && tr.classes == 3);
    /* Stored [N, H, W, C] as vit_dataset is: byte i is element i. */
    for (size_t i = 0; i < 4 * 3 * 2 * 3; i++)
        ck_assert_double_eq_tol(tr.images[i], (unsigned char)(i * 7) / 255.0, PIX_TOL);
    vit_dataset_free(&tr);
    vit_dataset_free(&te);

    /* Gray test images for colour train images. */
    unsigned char g[16 + 12];
    put_be32(g, 0x803);
    put_be32(g + 4, 2);
    put_be32(g + 8, 3);
    put_be32(g + 12, 2);
    memset(g + 16, 9, 12);
    ck_assert_int_eq(unlink(fu_path("idx4/t10k-images-idx4-ubyte")), 0);
    write_rel("idx4/t10k-images-idx3-ubyte", g, sizeof g);
    expect_error(vit_data_load(fu_path("idx4"), NULL, &tr, &te), VIT_EFORMAT,
                 "t10k-images-idx3-ubyte: images have 1 channel, but those of");
    expect_zeroed(&tr);

    /* Two channels: neither gray nor RGB. */
    write_idx4("idx4/train-images-idx4-ubyte", 4, 2);
    expect_error(vit_data_load(fu_path("idx4"), NULL, &tr, &te), VIT_EFORMAT,
                 "train-images-idx4-ubyte: colour IDX with 2 channels, expected 1 or 3");
    /* Floats: refused by name. */
    unsigned char f[20] = {0, 0, 0x0D, 4};
    write_rel("idx4/train-images-idx4-ubyte", f, sizeof f);
    expect_error(vit_data_load(fu_path("idx4"), NULL, &tr, &te), VIT_EFORMAT,
                 "this file: 4-D IDX of floats, not supported");
}
END_TEST

/* ------------------------------------------------ what a path is not */

START_TEST(not_a_data_set)
{
    vit_dataset tr = {0}, te = {0};
    char want[600];

    snprintf(want, sizeof want, "%s: no such file or folder", fu_path("nowhere"));
    expect_error(vit_data_load(fu_path("nowhere"), NULL, &tr, &te), VIT_EIO, want);
    ck_assert_str_eq(vit_last_error(), want);

    write_rel("afile", "x", 1);
    snprintf(want, sizeof want, "%s: not a data set (expected digits, a folder of IDX files, "
             "a folder of CIFAR-10/100 binary batches, or a folder of class folders of PNG or JPEG "
             "images, with or without train/ and test/); found a file, not a folder", fu_path("afile"));
    expect_error(vit_data_load(fu_path("afile"), NULL, &tr, &te), VIT_EINVAL, want);
    ck_assert_str_eq(vit_last_error(), want);

    mkdir_rel("empty");
    expect_error(vit_data_load(fu_path("empty"), NULL, &tr, &te), VIT_EINVAL,
                 "; found an empty folder");

    /* Class folders without a split (what `pngset/train` is) are read as
     * one set to split, and its empty class folder is named. */
    mkdir_rel("flat");
    mkdir_rel("flat/cat");
    mkdir_rel("flat/dog");
    mkdir_rel("flat/misc");
    unsigned char px[4] = {0};
    ck_assert_int_eq(vit_png_write(fu_path("flat/cat/1.png"), px, 2, 2, 1), VIT_OK);
    ck_assert_int_eq(vit_png_write(fu_path("flat/dog/1.JPG"), px, 2, 2, 1), VIT_OK);
    write_rel("flat/readme", "x", 1);
    expect_error(vit_data_load(fu_path("flat"), NULL, &tr, &te), VIT_EFORMAT,
                 "flat/misc: empty class folder");

    /* Subfolders without images: no layout, and what was found. */
    mkdir_rel("noimg");
    mkdir_rel("noimg/cat");
    mkdir_rel("noimg/dog");
    write_rel("noimg/readme", "x", 1);
    expect_error(vit_data_load(fu_path("noimg"), NULL, &tr, &te), VIT_EINVAL,
                 "; found 2 subfolders (");
    expect_error(vit_data_load(fu_path("noimg"), NULL, &tr, &te), VIT_EINVAL,
                 "), 0 of them holding images, and 1 other file");
    const char *msg = vit_last_error();
    ck_assert(strstr(msg, "cat") && strstr(msg, "dog"));

    mkdir_rel("half");
    mkdir_rel("half/train");
    expect_error(vit_data_load(fu_path("half"), NULL, &tr, &te), VIT_EINVAL,
                 "; found train/ but no test/");
    expect_zeroed(&tr);
    expect_zeroed(&te);
}
END_TEST

START_TEST(class_counts)
{
    int labels[7] = {2, 0, 2, 2, 1, 2, 0}, counts[4] = {-1, -1, -1, -1};
    vit_dataset ds = {0};
    ds.count = 7;
    ds.classes = 4;
    ds.labels = labels;
    ck_assert_int_eq(vit_dataset_class_counts(&ds, counts), VIT_OK);
    ck_assert(counts[0] == 2 && counts[1] == 1 && counts[2] == 4 && counts[3] == 0);
    labels[3] = 4;
    expect_error(vit_dataset_class_counts(&ds, counts), VIT_EINVAL, "image 3 has label 4");
    ds.classes = 0;
    ck_assert_int_eq(vit_dataset_class_counts(&ds, counts), VIT_EINVAL);
    ck_assert_int_eq(vit_dataset_class_counts(NULL, counts), VIT_EINVAL);
    ck_assert_int_eq(vit_dataset_class_counts(&ds, NULL), VIT_EINVAL);
}
END_TEST

START_TEST(image_fit)
{
    vit_real out[48];
    /* Same size and channels: an exact copy. */
    const vit_real same[6] = {0.1f, 0.2f, 0.3f, 0.4f, 0.5f, 0.6f};
    ck_assert_int_eq(vit_image_fit(same, 2, 3, 1, out, 2, 3, 1), VIT_OK);
    ck_assert_mem_eq(out, same, sizeof same);
    /* Enlarging 1x2 -> 1x4 is bilinear on pixel centres: 0, 1/4, 3/4, 1. */
    const vit_real two[2] = {0, 1};
    ck_assert_int_eq(vit_image_fit(two, 1, 2, 1, out, 1, 4, 1), VIT_OK);
    ck_assert_double_eq_tol(out[0], 0, PIX_TOL);
    ck_assert_double_eq_tol(out[1], 0.25, PIX_TOL);
    ck_assert_double_eq_tol(out[2], 0.75, PIX_TOL);
    ck_assert_double_eq_tol(out[3], 1, PIX_TOL);
    /* Shrinking 4 -> 2 widens the tent to 2 pixels: output 0 (centre 1.0)
     * weighs inputs 0, 1, 2 by 0.75, 0.75, 0.25 (normalised). */
    const vit_real four[4] = {0, 0.1f, 0.2f, 0.3f};
    ck_assert_int_eq(vit_image_fit(four, 4, 1, 1, out, 2, 1, 1), VIT_OK);
    ck_assert_double_eq_tol(out[0], (0.075 + 0.05) / 1.75, PIX_TOL);
    ck_assert_double_eq_tol(out[1], (0.025 + 0.15 + 0.225) / 1.75, PIX_TOL);
    /* Gray -> RGB copies; RGB -> gray is BT.601 luma. */
    const vit_real g[1] = {0.5f}, rgb[3] = {1, 0.5f, 0};
    ck_assert_int_eq(vit_image_fit(g, 1, 1, 1, out, 1, 1, 3), VIT_OK);
    ck_assert(out[0] == 0.5f && out[1] == 0.5f && out[2] == 0.5f);
    ck_assert_int_eq(vit_image_fit(rgb, 1, 1, 3, out, 2, 2, 1), VIT_OK);
    for (int i = 0; i < 4; i++)
        ck_assert_double_eq_tol(out[i], 0.299 + 0.5 * 0.587, PIX_TOL);
    ck_assert_int_eq(vit_image_fit(rgb, 1, 1, 2, out, 1, 1, 1), VIT_EINVAL);
    ck_assert_int_eq(vit_image_fit(rgb, 1, 1, 3, out, 0, 1, 1), VIT_EINVAL);
    ck_assert_int_eq(vit_image_fit(NULL, 1, 1, 3, out, 1, 1, 1), VIT_EINVAL);
}
END_TEST

static Suite *formats_suite(void)
{
    Suite *s = suite_create("data_formats");
    TCase *tc = tcase_create("core");
#ifdef VIT_HAVE_JPEG
    tcase_add_test(tc, jpeg_read_kinds);
    tcase_add_test(tc, jpeg_class_folders);
    tcase_add_test(tc, jpeg_refused);
#else
    tcase_add_test(tc, jpeg_without_libjpeg);
#endif
    tcase_add_test(tc, cifar10);
    tcase_add_test(tc, cifar10_errors);
    tcase_add_test(tc, cifar100);
    tcase_add_test(tc, idx_colour);
    tcase_add_test(tc, not_a_data_set);
    tcase_add_test(tc, class_counts);
    tcase_add_test(tc, image_fit);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) { return fu_run_suite(formats_suite, "/tmp/vit_test_data_formats_XXXXXX"); }
