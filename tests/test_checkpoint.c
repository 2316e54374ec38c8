/*
 * tests/test_checkpoint.c - the checkpoint file format, its reader's
 * defences against damaged files, and atomic replacement on write
 * (float64 build).
 *
 * Every test works in its own mkdtemp folder under /tmp and removes it.
 * Files with a valid checksum but hostile contents are assembled here
 * byte by byte with a CRC-32 implemented independently below (bit at a
 * time, no table), which also cross-checks the writer's CRC.
 */
#include <check.h>
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "file_util.h"
#include "vit/checkpoint.h"
#include "vit/optim.h"
#include "vit/tape.h"
#include "vit/train.h"

/* ---- helpers ---- */

/* CRC-32 as zlib computes it: reflected polynomial 0xEDB88320, initial
 * value and final xor all ones. */
static uint32_t ref_crc32(const unsigned char *p, size_t n)
{
    uint32_t crc = 0xFFFFFFFFu;
    for (size_t i = 0; i < n; i++) {
        crc ^= p[i];
        for (int b = 0; b < 8; b++)
            crc = (crc & 1u) ? (crc >> 1) ^ 0xEDB88320u : crc >> 1;
    }
    return ~crc;
}

/* Each test's own folder, made by tmpdir_make, removed with its files by
 * tmpdir_remove. */
typedef struct tmpdir {
    char path[64];
} tmpdir;

static void tmpdir_make(tmpdir *d)
{
    fu_mkdtemp(d->path, sizeof d->path, "/tmp/vit_ckpt_test_XXXXXX");
}

static void tmpdir_remove(tmpdir *d) { fu_remove_tree(d->path); }

/* Rewrites the trailing CRC of an edited file image so that only the
 * edit itself can make the reader complain. */
static void fix_crc(unsigned char *b, size_t n)
{
    uint32_t c = ref_crc32(b, n - 4);
    for (int i = 0; i < 4; i++)
        b[n - 4 + i] = (unsigned char)(c >> (8 * i));
}

/* A growing byte image for hand-built files. */
typedef struct bytes {
    unsigned char b[4096];
    size_t n;
} bytes;

static void put(bytes *o, uint64_t v, int width)
{
    for (int i = 0; i < width; i++)
        o->b[o->n++] = (unsigned char)(v >> (8 * i));
}

static void put_str(bytes *o, const char *s)
{
    size_t k = strlen(s);
    memcpy(o->b + o->n, s, k);
    o->n += k;
}

static void put_f32(bytes *o, float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    put(o, u, 4);
}

/* Header through the config text, as in the format description: version 1
 * (which has no position inside an epoch) unless order_len is not NULL;
 * then version 2 with epoch step 9, sums 0, the order length *order_len
 * and nvalues order values first, first + 1, ... */
static void put_header_v(bytes *o, const char *config, const uint32_t *order_len, int nvalues,
                         uint32_t first)
{
    put_str(o, "VITCKPT1");
    put(o, order_len ? 2 : 1, 4);
    put(o, 4, 4); /* as if written by the float32 build */
    put(o, 5, 8);
    put(o, 6, 8);
    for (int i = 0; i < 4; i++)
        put(o, 100 + i, 8);
    if (order_len) {
        put(o, 9, 8);
        for (int i = 0; i < 3; i++)
            put(o, 0, 8);
        put(o, *order_len, 4);
        for (int i = 0; i < nvalues; i++)
            put(o, first + (uint64_t)i, 4);
    }
    put(o, strlen(config), 4);
    put_str(o, config);
    if (order_len)
        put(o, 0, 4); /* no class names */
}

static void put_header(bytes *o, const char *config) { put_header_v(o, config, NULL, 0, 0); }

/* A version-2 header (order of 2) ending in a class name count of n: the
 * class names are next. */
static void put_names_start(bytes *o, uint32_t n)
{
    const uint32_t two = 2;
    o->n = 0;
    put_header_v(o, "", &two, 2, 0);
    o->n -= 4;
    put(o, n, 4);
}

static void put_crc(bytes *o) { put(o, ref_crc32(o->b, o->n), 4); }

/* Reads path expecting failure with code rc; checks that the message names
 * the file and contains want (unless NULL) and that c is left zeroed. */
static void expect_read_fails(const char *path, int rc, const char *want)
{
    vit_ckpt c;
    memset(&c, 0x5a, sizeof c);
    int got = vit_ckpt_read(path, &c);
    ck_assert_msg(got == rc, "reading %s: got %d, want %d (%s)", path, got, rc, vit_last_error());
    ck_assert_msg(strstr(vit_last_error(), path) != NULL, "message does not name the file: %s",
                  vit_last_error());
    if (want)
        ck_assert_msg(strstr(vit_last_error(), want) != NULL, "message '%s' lacks '%s'",
                      vit_last_error(), want);
    ck_assert_ptr_null(c.config);
    ck_assert_ptr_null(c.tensors);
    ck_assert_int_eq(c.ntensors, 0);
    ck_assert_ptr_null(c.class_names);
    ck_assert_int_eq(c.nclass_names, 0);
}

static void write_image(const char *path, const bytes *o) { fu_write(path, o->b, o->n); }

/* The file image img[n] with byte at set to value and a valid CRC, so that
 * only the field check can refuse it: written to path, the reader must
 * refuse it (format error) naming want.  img[at] is put back after. */
static void expect_edit_fails(const char *path, unsigned char *img, size_t n, size_t at,
                              unsigned char value, const char *want)
{
    unsigned char was = img[at];
    img[at] = value;
    fix_crc(img, n);
    fu_write(path, img, n);
    expect_read_fails(path, VIT_EFORMAT, want);
    img[at] = was;
}

/* Ends o with its CRC, writes it to path and expects the reader to refuse
 * it with rc and a message naming want (see expect_read_fails). */
static void expect_image_fails(const char *path, bytes *o, int rc, const char *want)
{
    put_crc(o);
    write_image(path, o);
    expect_read_fails(path, rc, want);
}

/* Restarts o as a version-1 file of one tensor "w" with ndim dims: the
 * dims come next. */
static void put_one_tensor(bytes *o, uint64_t ndim)
{
    o->n = 0;
    put_header(o, "");
    put(o, 1, 4);
    put(o, 1, 2);
    put_str(o, "w");
    put(o, ndim, 4);
}

/* A small checkpoint with two tensors whose values exercise float32
 * rounding. */
static vit_real small_a[6], small_b[3];

static vit_ckpt small_ckpt(vit_ckpt_tensor t[2])
{
    for (int i = 0; i < 6; i++)
        small_a[i] = 0.1 * (i + 1) - 0.25;
    for (int i = 0; i < 3; i++)
        small_b[i] = -1.0 / (i + 3);
    memset(t, 0, 2 * sizeof *t);
    strcpy(t[0].name, "blocks.0.attn.w");
    t[0].ndim = 2;
    t[0].dims[0] = 2;
    t[0].dims[1] = 3;
    t[0].data = small_a;
    strcpy(t[1].name, "b");
    t[1].ndim = 1;
    t[1].dims[0] = 3;
    t[1].data = small_b;
    static char *names[3] = {"bag", "coat", "sneaker"};
    vit_ckpt c = {7, 2, {1, 2, 3, 4}, "dim=8\n", 2, t, 0, {0, 0, 0}, 0, NULL, 3, names, NULL, 0};
    return c;
}

/* small_ckpt written by vit_ckpt_write to d/ok.ckpt (its path in
 * path[128]) and read back as bytes: the image that the damage tests edit
 * (malloc'd, its size in *n). */
static unsigned char *small_image(const tmpdir *d, char *path, size_t *n)
{
    snprintf(path, 128, "%s/ok.ckpt", d->path);
    vit_ckpt_tensor t[2];
    vit_ckpt c = small_ckpt(t);
    ck_assert_int_eq(vit_ckpt_write(path, &c), VIT_OK);
    return fu_read(path, n);
}

/* ---- tests ---- */

START_TEST(test_reference_crc)
{
    /* The standard CRC-32 check value. */
    ck_assert_uint_eq(ref_crc32((const unsigned char *)"123456789", 9), 0xCBF43926u);
}
END_TEST

START_TEST(test_byte_layout)
{
    /* The writer's output must equal the documented layout assembled here
     * by hand. */
    tmpdir d;
    tmpdir_make(&d);
    char path[128];
    snprintf(path, sizeof path, "%s/layout.ckpt", d.path);
    vit_real w[2] = {1.0, -2.0};
    vit_ckpt_tensor t = {"w", 2, {1, 2, 0, 0}, w};
    int order[2] = {1, 0};
    char *names[2] = {"cat", "\xc3\xa9t\xc3\xa9"}; /* "été" in UTF-8 */
    vit_ckpt c = {0x0102030405060708ULL, 9, {1, 2, 3, 0x8000000000000000ULL}, "ab", 1, &t,
                  3, {0.5, -2.0, 0.0}, 2, order, 2, names, NULL, 0};
    ck_assert_int_eq(vit_ckpt_write(path, &c), VIT_OK);

    static const unsigned char want_head[] = {
        'V', 'I', 'T', 'C', 'K', 'P', 'T', '1',
        5, 0, 0, 0,                           /* version */
        8, 0, 0, 0,                           /* sizeof(vit_real) of this float64 build */
        8, 7, 6, 5, 4, 3, 2, 1,               /* step */
        9, 0, 0, 0, 0, 0, 0, 0,               /* epoch */
        1, 0, 0, 0, 0, 0, 0, 0,               /* rng */
        2, 0, 0, 0, 0, 0, 0, 0,
        3, 0, 0, 0, 0, 0, 0, 0,
        0, 0, 0, 0, 0, 0, 0, 0x80,
        3, 0, 0, 0, 0, 0, 0, 0,               /* epoch step */
        0, 0, 0, 0, 0, 0, 0xE0, 0x3F,         /* epoch sums: 0.5 = 0x3FE0000000000000 */
        0, 0, 0, 0, 0, 0, 0, 0xC0,            /* -2.0 = 0xC000000000000000 */
        0, 0, 0, 0, 0, 0, 0, 0,               /* 0.0 */
        2, 0, 0, 0,                           /* order length */
        1, 0, 0, 0, 0, 0, 0, 0,               /* order */
        2, 0, 0, 0, 'a', 'b',                 /* config */
        2, 0, 0, 0,                           /* class name count */
        3, 0, 'c', 'a', 't',                  /* class names: length, bytes */
        5, 0, 0xC3, 0xA9, 't', 0xC3, 0xA9,
        0, 0, 0, 0,                           /* data record length (none) */
        1, 0, 0, 0,                           /* tensor count */
        1, 0, 'w',                            /* name */
        2, 0, 0, 0,                           /* ndim */
        1, 0, 0, 0, 0, 0, 0, 0,               /* dims */
        2, 0, 0, 0, 0, 0, 0, 0,
        0x00, 0x00, 0x80, 0x3F,               /* 1.0f  = 0x3F800000 */
        0x00, 0x00, 0x00, 0xC0,               /* -2.0f = 0xC0000000 */
    };
    size_t n;
    unsigned char *got = fu_read(path, &n);
    ck_assert_uint_eq(n, sizeof want_head + 4);
    ck_assert_mem_eq(got, want_head, sizeof want_head);
    uint32_t crc = ref_crc32(want_head, sizeof want_head);
    unsigned char want_crc[4] = {(unsigned char)crc, (unsigned char)(crc >> 8),
                                 (unsigned char)(crc >> 16), (unsigned char)(crc >> 24)};
    ck_assert_mem_eq(got + sizeof want_head, want_crc, 4);
    free(got);
    /* New files are readable like ordinary files, despite mkstemp's 0600. */
    struct stat st;
    ck_assert_int_eq(stat(path, &st), 0);
    ck_assert_uint_eq(st.st_mode & 0777, 0644);
    tmpdir_remove(&d);
}
END_TEST

START_TEST(test_round_trip)
{
    tmpdir d;
    tmpdir_make(&d);
    char path[128];
    snprintf(path, sizeof path, "%s/rt.ckpt", d.path);
    enum { A = 2, B = 3, C = 4, D = 5 };
    vit_real x4[A * B * C * D], x1[7], x2[3 * 2];
    for (int i = 0; i < A * B * C * D; i++)
        x4[i] = sin(0.37 * i) * pow(10.0, (i % 9) - 4); /* magnitudes 1e-4 .. 1e4 */
    for (int i = 0; i < 7; i++)
        x1[i] = 1.0 / 3.0 + i;
    for (int i = 0; i < 6; i++)
        x2[i] = -0.1 * i;
    vit_ckpt_tensor t[3];
    memset(t, 0, sizeof t);
    strcpy(t[0].name, "patch_embed.w");
    t[0].ndim = 4;
    t[0].dims[0] = A;
    t[0].dims[1] = B;
    t[0].dims[2] = C;
    t[0].dims[3] = D;
    t[0].data = x4;
    strcpy(t[1].name, "cls");
    t[1].ndim = 1;
    t[1].dims[0] = 7;
    t[1].data = x1;
    /* 63 characters, the longest allowed name */
    strcpy(t[2].name, "a23456789b123456789c123456789d123456789e123456789f123456789g123");
    ck_assert_uint_eq(strlen(t[2].name), 63);
    t[2].ndim = 2;
    t[2].dims[0] = 3;
    t[2].dims[1] = 2;
    t[2].data = x2;
    char config[] = "model=vit-tiny\ndepth=12\nheads=3\n";
    int order[5] = {4, 0, 3, 1, 2};
    /* Class names: one byte, UTF-8, and the longest allowed (255 bytes). */
    char longest[VIT_CKPT_CLASS_NAME_MAX];
    memset(longest, 'x', sizeof longest - 1);
    longest[sizeof longest - 1] = '\0';
    char *names[3] = {"7", "T-shirt/top \xe2\x9c\x93", longest};
    char data[] = "spec = x\ntrain_count = 3\n"; /* format 5's data record, as text */
    vit_ckpt c = {123456789012ULL, 42, {0xDEADBEEFULL, 0, ~0ULL, 5}, config, 3, t,
                  7, {1.0 / 3.0, -1e300, 5e-324}, 5, order, 3, names, data, 0};
    ck_assert_int_eq(vit_ckpt_write(path, &c), VIT_OK);
    ck_assert_int_eq(fu_count_entries(d.path), 1); /* no temporary file left */

    vit_ckpt r;
    ck_assert_int_eq(vit_ckpt_read(path, &r), VIT_OK);
    ck_assert_uint_eq(r.version, VIT_CKPT_VERSION); /* written in the current format */
    ck_assert_uint_eq(r.step, 123456789012ULL);
    ck_assert_uint_eq(r.epoch, 42);
    ck_assert_uint_eq(r.rng[0], 0xDEADBEEFULL);
    ck_assert_uint_eq(r.rng[1], 0);
    ck_assert_uint_eq(r.rng[2], ~0ULL);
    ck_assert_uint_eq(r.rng[3], 5);
    ck_assert_str_eq(r.config, config);
    /* The position inside an epoch comes back exactly (sums as float64). */
    ck_assert_uint_eq(r.epoch_step, 7);
    ck_assert(r.epoch_sums[0] == 1.0 / 3.0 && r.epoch_sums[1] == -1e300 && r.epoch_sums[2] == 5e-324);
    ck_assert_int_eq(r.norder, 5);
    ck_assert_mem_eq(r.order, order, sizeof order);
    ck_assert_int_eq(r.nclass_names, 3);
    for (int k = 0; k < 3; k++)
        ck_assert_str_eq(r.class_names[k], names[k]);
    ck_assert_str_eq(r.data, data);
    ck_assert_int_eq(r.ntensors, 3);
    for (int k = 0; k < 3; k++) {
        const vit_ckpt_tensor *g = vit_ckpt_find(&r, t[k].name);
        ck_assert_ptr_nonnull(g);
        ck_assert_ptr_eq(g, &r.tensors[k]); /* order is kept */
        ck_assert_int_eq(g->ndim, t[k].ndim);
        size_t count = 1;
        for (int j = 0; j < t[k].ndim; j++) {
            ck_assert_int_eq(g->dims[j], t[k].dims[j]);
            count *= (size_t)t[k].dims[j];
        }
        /* Stored as float32: exactly the float-rounded value comes back. */
        for (size_t i = 0; i < count; i++)
            if (g->data[i] != (double)(float)t[k].data[i])
                ck_abort_msg("%s[%zu]: %.17g read back as %.17g", t[k].name, i,
                             (double)t[k].data[i], (double)g->data[i]);
    }
    ck_assert_ptr_null(vit_ckpt_find(&r, "missing"));
    ck_assert_ptr_null(vit_ckpt_find(&r, NULL));
    ck_assert_ptr_null(vit_ckpt_find(NULL, "cls"));
    vit_ckpt_free(&r);
    ck_assert_ptr_null(r.tensors);
    vit_ckpt_free(&r); /* freeing twice is harmless once zeroed */

    /* No config and no tensors at all is a valid checkpoint too. */
    vit_ckpt empty = {1, 0, {0, 0, 0, 0}, NULL, 0, NULL, 0, {0, 0, 0}, 0, NULL, 0, NULL, NULL, 0};
    ck_assert_int_eq(vit_ckpt_write(path, &empty), VIT_OK);
    ck_assert_int_eq(vit_ckpt_read(path, &r), VIT_OK);
    ck_assert_str_eq(r.config, "");
    ck_assert_int_eq(r.ntensors, 0);
    ck_assert_int_eq(r.nclass_names, 0);
    ck_assert_ptr_null(r.class_names);
    ck_assert_uint_eq(r.step, 1);
    vit_ckpt_free(&r);
    tmpdir_remove(&d);
}
END_TEST

START_TEST(test_read_float32_writer)
{
    /* A file as the float32 build writes it (real size 4), built by hand:
     * the float64 build reads the values exactly. */
    tmpdir d;
    tmpdir_make(&d);
    char path[128];
    snprintf(path, sizeof path, "%s/f32.ckpt", d.path);
    bytes o = {.n = 0};
    put_header(&o, "cfg");
    put(&o, 1, 4);
    put(&o, 2, 2);
    put_str(&o, "ln");
    put(&o, 1, 4);
    put(&o, 3, 8);
    put_f32(&o, 0.1f);
    put_f32(&o, -3.5f);
    put_f32(&o, 1e-30f);
    put_crc(&o);
    write_image(path, &o);
    vit_ckpt r;
    ck_assert_int_eq(vit_ckpt_read(path, &r), VIT_OK);
    ck_assert_uint_eq(r.step, 5);
    ck_assert_uint_eq(r.epoch, 6);
    ck_assert_uint_eq(r.rng[3], 103);
    ck_assert_str_eq(r.config, "cfg");
    /* put_header writes version 1: no position inside an epoch. */
    ck_assert_uint_eq(r.epoch_step, 0);
    ck_assert_int_eq(r.norder, 0);
    ck_assert_ptr_null(r.order);
    const vit_ckpt_tensor *t = vit_ckpt_find(&r, "ln");
    ck_assert_ptr_nonnull(t);
    ck_assert_int_eq(t->ndim, 1);
    ck_assert_int_eq(t->dims[0], 3);
    ck_assert(t->data[0] == (double)0.1f && t->data[1] == -3.5 && t->data[2] == (double)1e-30f);
    vit_ckpt_free(&r);
    tmpdir_remove(&d);
}
END_TEST

START_TEST(test_every_flipped_byte_detected)
{
    tmpdir d;
    tmpdir_make(&d);
    char path[128], bad[128];
    snprintf(bad, sizeof bad, "%s/bad.ckpt", d.path);
    size_t n;
    unsigned char *img = small_image(&d, path, &n);
    /* Values of the last tensor start 12 bytes (3 floats) before the CRC;
     * a flip there leaves the structure intact, so only the CRC can
     * notice. */
    size_t values_from = n - 4 - 12;
    for (size_t i = 0; i < n; i++) {
        for (int bit = 0; bit < 8; bit += 7) { /* lowest and highest bit of each byte */
            img[i] ^= (unsigned char)(1u << bit);
            fu_write(bad, img, n);
            img[i] ^= (unsigned char)(1u << bit);
            expect_read_fails(bad, VIT_EFORMAT, i >= values_from ? "checksum mismatch" : NULL);
        }
    }
    free(img);
    tmpdir_remove(&d);
}
END_TEST

START_TEST(test_every_truncation_rejected)
{
    tmpdir d;
    tmpdir_make(&d);
    char path[128], cut[128];
    snprintf(cut, sizeof cut, "%s/cut.ckpt", d.path);
    size_t n;
    unsigned char *img = small_image(&d, path, &n);
    for (size_t len = 0; len < n; len++) {
        fu_write(cut, img, len);
        /* Every cut is reported as a truncation; one inside the CRC,
         * after all values parsed, names the exact end of the file. */
        char want[64];
        snprintf(want, sizeof want, "truncated at byte %zu", len);
        expect_read_fails(cut, VIT_EFORMAT, len >= n - 4 ? want : "truncated");
    }
    /* One byte too many is rejected as well. */
    unsigned char *longer = malloc(n + 1);
    ck_assert_ptr_nonnull(longer);
    memcpy(longer, img, n);
    longer[n] = 0;
    fu_write(cut, longer, n + 1);
    expect_read_fails(cut, VIT_EFORMAT, "after the last tensor");
    free(longer);
    free(img);
    tmpdir_remove(&d);
}
END_TEST

/* vit_ckpt_read_header: what precedes the tensors, as vit_ckpt_read
 * gives it; a file cut inside its tensors still has its header, one cut
 * before the tensors is refused as truncated; an order longer than the
 * first 64 KiB is read by reading more. */
START_TEST(test_read_header)
{
    tmpdir d;
    tmpdir_make(&d);
    char path[128], cut[128];
    snprintf(cut, sizeof cut, "%s/cut.ckpt", d.path);
    size_t n;
    unsigned char *img = small_image(&d, path, &n);
    vit_ckpt h;
    ck_assert_int_eq(vit_ckpt_read_header(path, &h), VIT_OK);
    ck_assert_str_eq(h.config, "dim=8\n");
    ck_assert(h.step == 7 && h.epoch == 2 && h.rng[3] == 4 && h.ntensors == 0 && !h.tensors);
    ck_assert_int_eq(h.nclass_names, 3);
    ck_assert_str_eq(h.class_names[2], "sneaker");
    vit_ckpt_free(&h);
    /* The header ends where the tensor count starts: 8 + 4 + 4 + 16 + 32
     * + 8 + 24 + 4 (no order) + 4 + 6 (config) + 4 + 3 names (2 + 3, 2 + 4,
     * 2 + 7) + 4 (no data record) bytes. */
    size_t end = 8 + 4 + 4 + 16 + 32 + 8 + 24 + 4 + 4 + 6 + 4 + 5 + 6 + 9 + 4;
    fu_write(cut, img, end + 10);
    ck_assert_int_eq(vit_ckpt_read_header(cut, &h), VIT_OK);
    vit_ckpt_free(&h);
    expect_read_fails(cut, VIT_EFORMAT, "truncated");
    fu_write(cut, img, end - 1);
    ck_assert_int_eq(vit_ckpt_read_header(cut, &h), VIT_EFORMAT);
    char want[64];
    snprintf(want, sizeof want, "truncated at byte %zu", end - 1);
    ck_assert_msg(strstr(vit_last_error(), want), "%s", vit_last_error());
    ck_assert_ptr_null(h.config);

    int norder = 40000; /* 160000 bytes of order */
    int *order = malloc((size_t)norder * sizeof *order);
    ck_assert_ptr_nonnull(order);
    for (int i = 0; i < norder; i++)
        order[i] = norder - 1 - i;
    vit_ckpt_tensor t[2];
    vit_ckpt c = small_ckpt(t);
    c.epoch_step = 3;
    c.norder = norder;
    c.order = order;
    c.data = "spec = x";
    ck_assert_int_eq(vit_ckpt_write(path, &c), VIT_OK);
    ck_assert_int_eq(vit_ckpt_read_header(path, &h), VIT_OK);
    ck_assert_int_eq(h.norder, norder);
    ck_assert_int_eq(h.order[norder - 1], 0);
    ck_assert_str_eq(h.data, "spec = x");
    ck_assert_str_eq(h.config, "dim=8\n");
    vit_ckpt_free(&h);
    free(order);
    free(img);
    tmpdir_remove(&d);
}
END_TEST

START_TEST(test_bad_header_fields)
{
    tmpdir d;
    tmpdir_make(&d);
    char path[128], bad[128];
    snprintf(bad, sizeof bad, "%s/bad.ckpt", d.path);
    size_t n;
    unsigned char *img = small_image(&d, path, &n);

    /* Each edit gets a valid CRC so that the field check itself must fire. */
    ck_assert_int_eq(img[0], 'V');
    expect_edit_fails(bad, img, n, 0, 'X', "bad magic");
    ck_assert_int_eq(img[8], 5);
    expect_edit_fails(bad, img, n, 8, 6, "version 6");
    expect_edit_fails(bad, img, n, 8, 0, "version 0");
    ck_assert_int_eq(img[12], 8);
    expect_edit_fails(bad, img, n, 12, 2, "real size");

    fix_crc(img, n); /* the restored image is good again */
    fu_write(bad, img, n);
    vit_ckpt r;
    ck_assert_int_eq(vit_ckpt_read(bad, &r), VIT_OK);
    vit_ckpt_free(&r);

    /* A text file and an empty file. */
    const char *text = "this is not a checkpoint, just some text\n";
    fu_write(bad, (const unsigned char *)text, strlen(text));
    expect_read_fails(bad, VIT_EFORMAT, "bad magic");
    fu_write(bad, img, 0);
    expect_read_fails(bad, VIT_EFORMAT, "truncated at byte 0");
    free(img);

    /* Missing file and a folder. */
    snprintf(bad, sizeof bad, "%s/none.ckpt", d.path);
    expect_read_fails(bad, VIT_EIO, strerror(ENOENT));
    expect_read_fails(d.path, VIT_EIO, NULL);
    vit_ckpt z;
    ck_assert_int_eq(vit_ckpt_read(NULL, &z), VIT_EINVAL);
    ck_assert_int_eq(vit_ckpt_read(path, NULL), VIT_EINVAL);
    tmpdir_remove(&d);
}
END_TEST

/* Hand-built files with a valid CRC and absurd sizes.  The reader must
 * reject each from the sizes alone - a huge allocation would show up
 * under valgrind and an overflowed product could pass a naive check. */
START_TEST(test_reads_version_1_file)
{
    /* A checkpoint written by the format-1 code (committed before the
     * format gained the position inside an epoch) still reads. */
    vit_ckpt r;
    ck_assert_msg(vit_ckpt_read("data/v1/digits-dim8-epoch1-of-2.ckpt", &r) == VIT_OK, "%s",
                  vit_last_error());
    ck_assert_uint_eq(r.version, 1);
    ck_assert_uint_eq(r.epoch, 1);
    ck_assert_uint_eq(r.step, 45); /* 1437 images in batches of 32 */
    ck_assert_uint_eq(r.epoch_step, 0);
    ck_assert_int_eq(r.norder, 0);
    ck_assert_int_eq(r.nclass_names, 0); /* format 1 has no class names */
    ck_assert_ptr_null(r.class_names);
    ck_assert_ptr_nonnull(vit_ckpt_find(&r, "adam.m"));
    ck_assert_ptr_nonnull(strstr(r.config, "dim = 8\n"));
    vit_ckpt_free(&r);
}
END_TEST

START_TEST(test_reads_version_2_file)
{
    /* A checkpoint written by the format-2 code (committed before weight
     * averaging and test-time augmentation), taken by SIGINT inside epoch
     * 2 of 3 of --dim 8 --depth 1 --heads 2 --mlp 8 --batch 4. */
    const char *path = "data/v2/digits-dim8-epoch2-step270-of-3.ckpt";
    vit_ckpt r;
    ck_assert_msg(vit_ckpt_read(path, &r) == VIT_OK, "%s", vit_last_error());
    ck_assert_uint_eq(r.version, 2);
    ck_assert_uint_eq(r.epoch, 1);
    ck_assert_uint_eq(r.step, 360 + 270); /* 1437 images in batches of 4: 360 steps an epoch */
    ck_assert_uint_eq(r.epoch_step, 270);
    ck_assert_int_eq(r.norder, 1437);
    ck_assert_int_eq(r.nclass_names, 10);
    ck_assert_str_eq(r.class_names[7], "7");
    ck_assert_ptr_nonnull(vit_ckpt_find(&r, "adam.v"));
    ck_assert_ptr_null(vit_ckpt_find(&r, VIT_RUN_TRAIN_PARAMS));
    ck_assert_ptr_null(strstr(r.config, "tta"));
    vit_ckpt_free(&r);
    /* As a run: no averaging, no test-time augmentation, whatever today's
     * defaults are. */
    vit_model *m = NULL;
    vit_adamw opt;
    vit_run_state st;
    vit_train_config tc;
    ck_assert_msg(vit_run_load(path, &m, &tc, &opt, &st) == VIT_OK, "%s", vit_last_error());
    ck_assert_int_eq(tc.tta, VIT_TTA_NONE);
    ck_assert(tc.ema == 0);
    ck_assert_int_eq(vit_model_config(m)->dim, 8);
    ck_assert_ptr_null(st.train_params);
    ck_assert_uint_eq(st.epoch_step, 270);
    vit_run_state_free(&st);
    vit_adamw_free(&opt);
    vit_model_free(m);
}
END_TEST

/* ---- formats 1 to 3: the attention's projections converted on load ----- */

/* Logits of three fixed images (pixel i: (i*37 mod 101)/100 - 0.3) from the
 * two committed old runs, printed with %.17g by the float64 build of main
 * at c5bfe9a (before the fused W_QKV), as loaded and after one AdamW step
 * (lr 1e-2, labels 1, 7, 4, one thread) on those images. */
static const double legacy_logits[2][2][3 * 10] = {
    {{ /* v1: as loaded */
        0.14830237505673344, 0.19862734431844514, -0.048905967581246074, 0.14291323074237605, 0.1478428667922001, 0.084615628277008192, 0.10932444544050979, -0.024687832795164878, -0.061516932839271149, 0.10009937258629405,
        0.12795472566906069, 0.18257588095812149, -0.054165647915975473, 0.17430152022417256, 0.12778932512782454, 0.071239742947584311, 0.10184643991642037, -0.007777576381086948, -0.029007973216486432, 0.1053997206980801,
        0.1198244794446813, 0.20344437831077739, -0.034668387959485181, 0.16370840066132214, 0.1347038162344813, 0.091748661688852318, 0.10352244632922268, -0.020998101521140244, -0.046586788965742143, 0.10582355150762059,
    }, { /* after one AdamW step */
        0.091449826365059564, 0.19402479316769983, 0.0098138848814070777, 0.079916755021082989, 0.12135538865244104, -0.067377301502355047, 0.12625485528725999, 0.05001473090043014, -0.028697669517412139, 0.053193474563998505,
        0.072539864195842171, 0.17486351339041917, 0.0023898149269939674, 0.11119931803827694, 0.10085599935503957, -0.082344476036164321, 0.11910331840266269, 0.068269361569590112, 0.0058604520198062117, 0.058719279571029064,
        0.067499059231982503, 0.19755653038214288, 0.021664379851006384, 0.097923831886383594, 0.11070984201353938, -0.060356221023196044, 0.12192379289836897, 0.052899367224124208, -0.014735277124925134, 0.058307616117721124,
    }},
    {{ /* v2: as loaded */
        0.1108255077288192, 0.080119968019703447, 0.0026731182100932782, 0.30510066290196436, 0.087252663952964923, 0.20583796156735296, -0.048081750216686807, 0.0071942816958430397, -0.051350151538444244, 0.086140202688994555,
        0.10932131167633204, 0.07553824911330613, -0.0012732391464837373, 0.30936509107993604, 0.081606761497016053, 0.2025504311613972, -0.043422253195742097, 0.013565726936262214, -0.038438002654016507, 0.091619260307008329,
        0.092887302446084549, 0.083957284336246135, 0.013078650158522387, 0.31354534946146828, 0.079289510246063441, 0.20772054814489607, -0.050851078971588644, 0.0097335048480450548, -0.042063781257323178, 0.089945121944331741,
    }, { /* after one AdamW step */
        0.13824898906797592, 0.073719901860894915, 0.0090478594969736481, 0.21397487020428355, 0.1189549252423269, 0.15747234987339123, -0.014038197740979835, 0.061364875882532713, -0.086182897072986556, 0.10734193448635115,
        0.13495460949044757, 0.068588807997543064, 0.005608812511500999, 0.21960961614264918, 0.11214090436090167, 0.15315670054985792, -0.010465598445629323, 0.06863250353941637, -0.072654208301194581, 0.11259627982182775,
        0.11999971085898231, 0.07730064621650784, 0.019779328167243565, 0.2231053189179783, 0.11080686711761291, 0.15867963021762194, -0.017339589213911911, 0.064814394355641347, -0.077330806180300624, 0.11117725936201488,
    }},
};

static void fixed_images(vit_real *img, int n) /* n values */
{
    for (int i = 0; i < n; i++)
        img[i] = (vit_real)((i * 37 % 101) / 100.0 - 0.3);
}

static void expect_logits(vit_model *m, vit_tape *t, const vit_real *img, const double *want,
                          double tol, const char *what)
{
    vit_tape_reset(t);
    vit_tensor *lg = vit_model_forward(m, t, img, 3, 0);
    ck_assert_msg(lg != NULL, "%s", vit_last_error());
    for (int i = 0; i < 30; i++)
        ck_assert_msg(fabs(lg->data[i] - want[i]) <= tol * fabs(want[i]) + 1e-300,
                      "%s: logit %d is %.17g, before the change %.17g", what, i,
                      (double)lg->data[i], want[i]);
}

/* The flat vector new (over all parameters, fused layout) is old (formats
 * 1..3) with each block's W_Q, W_K, W_V [D, D] interleaved row by row into
 * W_QKV [D, 3D]: rebuilt here from the tensor names and shapes alone. */
static void expect_flat_converted(const vit_model *m, const vit_real *new_, const vit_real *old)
{
    size_t n = vit_model_param_count(m), moved = 0;
    unsigned char *seen = calloc(n, 1);
    ck_assert_ptr_nonnull(seen);
    for (int t = 0; t < vit_model_tensor_count(m); t++) {
        const vit_model_tensor *mt = vit_model_tensor_at(m, t);
        const char *suffix = strstr(mt->name, ".attn.w_qkv");
        if (!suffix || suffix[strlen(".attn.w_qkv")] != '\0')
            continue;
        size_t D = (size_t)mt->shape[0], o = mt->offset;
        ck_assert_uint_eq((size_t)mt->shape[1], 3 * D);
        for (size_t p = 0; p < 3; p++)
            for (size_t i = 0; i < D; i++)
                for (size_t j = 0; j < D; j++) {
                    size_t at = o + i * 3 * D + p * D + j;
                    ck_assert(new_[at] == old[o + (p * D + i) * D + j]);
                    seen[at] = 1;
                    moved += i != 0 || p != 0;
                }
    }
    ck_assert_uint_gt(moved, 0);
    for (size_t k = 0; k < n; k++)
        if (!seen[k])
            ck_assert_msg(new_[k] == old[k], "value %zu moved", k);
    free(seen);
}

START_TEST(test_old_runs_load_converted)
{
    static const char *paths[2] = {"data/v1/digits-dim8-epoch1-of-2.ckpt",
                                   "data/v2/digits-dim8-epoch2-step270-of-3.ckpt"};
    vit_set_threads(1);
    for (int f = 0; f < 2; f++) {
        vit_ckpt raw;
        ck_assert_msg(vit_ckpt_read(paths[f], &raw) == VIT_OK, "%s", vit_last_error());
        ck_assert_uint_lt(raw.version, 4);
        ck_assert_ptr_nonnull(vit_ckpt_find(&raw, "blocks.0.attn.w_q"));
        ck_assert_ptr_null(vit_ckpt_find(&raw, "blocks.0.attn.w_qkv"));
        vit_model *m = NULL;
        vit_adamw opt;
        vit_run_state st;
        ck_assert_msg(vit_run_load(paths[f], &m, NULL, &opt, &st) == VIT_OK, "%s", vit_last_error());
        const vit_config *c = vit_model_config(m);
        const size_t D = (size_t)c->dim;

        /* The model's tensors: W_QKV row i = [W_Q row i | W_K row i | W_V row i]. */
        for (int l = 0; l < c->depth; l++) {
            char name[64];
            snprintf(name, sizeof name, "blocks.%d.attn.w_qkv", l);
            const vit_model_tensor *qkv = NULL, *bqkv = NULL;
            for (int t = 0; t < vit_model_tensor_count(m); t++)
                if (strcmp(vit_model_tensor_at(m, t)->name, name) == 0)
                    qkv = vit_model_tensor_at(m, t), bqkv = vit_model_tensor_at(m, t + 2);
            ck_assert_ptr_nonnull(qkv);
            ck_assert_str_eq(bqkv->name + strlen(bqkv->name) - 5, "b_qkv");
            const vit_real *w = vit_model_params(m) + qkv->offset;
            const vit_real *b = vit_model_params(m) + bqkv->offset;
            static const char *wn[3] = {"w_q", "w_k", "w_v"}, *bn[3] = {"b_q", "b_k", "b_v"};
            for (size_t p = 0; p < 3; p++) {
                snprintf(name, sizeof name, "blocks.%d.attn.%s", l, wn[p]);
                const vit_ckpt_tensor *old = vit_ckpt_find(&raw, name);
                ck_assert_ptr_nonnull(old);
                for (size_t i = 0; i < D; i++)
                    for (size_t j = 0; j < D; j++)
                        ck_assert(w[i * 3 * D + p * D + j] == old->data[i * D + j]);
                snprintf(name, sizeof name, "blocks.%d.attn.%s", l, bn[p]);
                const vit_ckpt_tensor *oldb = vit_ckpt_find(&raw, name);
                ck_assert_ptr_nonnull(oldb);
                for (size_t j = 0; j < D; j++)
                    ck_assert(b[p * D + j] == oldb->data[j]);
            }
        }
        /* AdamW's moments, flat over all parameters, moved the same way. */
        expect_flat_converted(m, opt.m, vit_ckpt_find(&raw, "adam.m")->data);
        expect_flat_converted(m, opt.v, vit_ckpt_find(&raw, "adam.v")->data);
        vit_ckpt_free(&raw);

        /* The same model as before the change, and it resumes the same. */
        int px = c->image_height * c->image_width * c->channels, labels[3] = {1, 7, 4}, ng;
        vit_real *img = malloc(3 * (size_t)px * sizeof *img);
        ck_assert_ptr_nonnull(img);
        fixed_images(img, 3 * px);
        vit_tape *t = vit_tape_new();
        expect_logits(m, t, img, legacy_logits[f][0], 1e-12, paths[f]);
        double loss;
        ck_assert_int_eq(vit_model_train_grads(m, img, labels, 3, 0, &loss, NULL), VIT_OK);
        const vit_param_group *g = vit_model_groups(m, &ng);
        ck_assert_int_eq(vit_adamw_step(&opt, vit_model_params(m), vit_model_grads(m), g, ng,
                                        1e-2), VIT_OK);
        expect_logits(m, t, img, legacy_logits[f][1], 1e-9, paths[f]);
        vit_tape_free(t);
        free(img);
        vit_run_state_free(&st);
        vit_adamw_free(&opt);
        vit_model_free(m);
    }
}
END_TEST

/* A format-3 run with weight averaging (the fuzz seed written by the
 * format-3 code): the trained weights beside the average (train.params),
 * flat like AdamW's moments, are converted the same way. */
START_TEST(test_version3_train_params_converted)
{
    const char *path = "fuzz/corpus/checkpoint/run_tiny_ema_v3";
    vit_ckpt raw;
    ck_assert_msg(vit_ckpt_read(path, &raw) == VIT_OK, "%s", vit_last_error());
    ck_assert_uint_eq(raw.version, 3);
    const vit_ckpt_tensor *tp = vit_ckpt_find(&raw, VIT_RUN_TRAIN_PARAMS);
    ck_assert_ptr_nonnull(tp);
    vit_model *m = NULL;
    vit_adamw opt;
    vit_run_state st;
    ck_assert_msg(vit_run_load(path, &m, NULL, &opt, &st) == VIT_OK, "%s", vit_last_error());
    ck_assert_ptr_nonnull(st.train_params);
    expect_flat_converted(m, st.train_params, tp->data);
    expect_flat_converted(m, opt.m, vit_ckpt_find(&raw, "adam.m")->data);
    vit_ckpt_free(&raw);
    vit_run_state_free(&st);
    vit_adamw_free(&opt);
    vit_model_free(m);
}
END_TEST

START_TEST(test_absurd_sizes)
{
    tmpdir d;
    tmpdir_make(&d);
    char path[128];
    snprintf(path, sizeof path, "%s/x.ckpt", d.path);
    bytes o;

    /* Order lengths the file cannot hold: refused before any allocation. */
    const uint32_t lens[] = {10, 0x7fffffffu, 0x80000000u, 0xffffffffu};
    for (int i = 0; i < 4; i++) {
        o.n = 0;
        put_header_v(&o, "", &lens[i], 2, 0);
        put(&o, 0, 4);
        expect_image_fails(path, &o, VIT_EFORMAT, "order length");
    }
    /* An order value above 2^31 - 1. */
    const uint32_t one = 1;
    o.n = 0;
    put_header_v(&o, "", &one, 1, 0x80000000u);
    put(&o, 0, 4);
    expect_image_fails(path, &o, VIT_EFORMAT, "order value");
    /* A well-formed version-2 header reads back. */
    const uint32_t two = 2;
    o.n = 0;
    put_header_v(&o, "", &two, 2, 0);
    put(&o, 0, 4);
    put_crc(&o);
    write_image(path, &o);
    vit_ckpt r;
    ck_assert_msg(vit_ckpt_read(path, &r) == VIT_OK, "%s", vit_last_error());
    ck_assert_uint_eq(r.epoch_step, 9);
    ck_assert_int_eq(r.norder, 2);
    ck_assert_int_eq(r.order[1], 1);
    vit_ckpt_free(&r);

    /* Class names: a count above the limit, one the file cannot hold, a
     * length of 0, of 256 (over the 255 limit) and of 40000, a NUL inside,
     * and a file that ends inside the names. */
    const uint32_t nnames[2] = {VIT_CKPT_CLASSES_MAX + 1, 0xFFFFFFFFu};
    for (int i = 0; i < 2; i++) {
        put_names_start(&o, nnames[i]);
        put(&o, 0, 4);
        expect_image_fails(path, &o, VIT_EFORMAT, "class name count");
    }
    const unsigned class_lens[3] = {0, VIT_CKPT_CLASS_NAME_MAX, 40000};
    for (int k = 0; k < 3; k++) {
        put_names_start(&o, 1);
        put(&o, class_lens[k], 2);
        for (unsigned i = 0; i < class_lens[k] && i < VIT_CKPT_CLASS_NAME_MAX; i++)
            put(&o, 'c', 1);
        put(&o, 0, 4);
        expect_image_fails(path, &o, VIT_EFORMAT, "class name 0 length");
    }
    put_names_start(&o, 2);
    put(&o, 3, 2);
    put_str(&o, "bag");
    put(&o, 4, 2);
    put(&o, 'c', 1);
    put(&o, 0, 1);
    put_str(&o, "at");
    put(&o, 0, 4);
    expect_image_fails(path, &o, VIT_EFORMAT, "class name contains a NUL");
    put_names_start(&o, 2);
    put(&o, 3, 2);
    put_str(&o, "bag");
    put(&o, 200, 2); /* the second name claims more bytes than follow */
    put_str(&o, "coat");
    write_image(path, &o);
    expect_read_fails(path, VIT_EFORMAT, "class name needs 200 bytes");

    /* dims 2^62 x 4: the product wraps to 0 in 64 bits. */
    put_one_tensor(&o, 2);
    put(&o, 1ULL << 62, 8);
    put(&o, 4, 8);
    put_f32(&o, 1.0f);
    expect_image_fails(path, &o, VIT_EFORMAT, "exceeds");

    /* One dim of 2^40 values (4 TiB). */
    put_one_tensor(&o, 1);
    put(&o, 1ULL << 40, 8);
    put_f32(&o, 1.0f);
    expect_image_fails(path, &o, VIT_EFORMAT, "exceeds");

    /* Dims one value too many for the bytes present. */
    put_one_tensor(&o, 1);
    put(&o, 3, 8);
    put_f32(&o, 1.0f);
    put_f32(&o, 2.0f);
    expect_image_fails(path, &o, VIT_EFORMAT, NULL); /* the CRC's 4 bytes are not values */

    /* A zero dim. */
    put_one_tensor(&o, 2);
    put(&o, 0, 8);
    put(&o, 1, 8);
    expect_image_fails(path, &o, VIT_EFORMAT, "is 0");

    /* 4 billion tensors. */
    o.n = 0;
    put_header(&o, "");
    put(&o, 0xFFFFFFFFu, 4);
    expect_image_fails(path, &o, VIT_EFORMAT, "tensor count");

    /* A 4 GiB config. */
    o.n = 0;
    put_header(&o, "");
    o.n -= 4;
    put(&o, 0xFFFFFFFFu, 4);
    put(&o, 0, 4);
    expect_image_fails(path, &o, VIT_EFORMAT, "config");

    /* ndim 5 and ndim 0 (with a dim after it anyway, so that only ndim
     * is wrong). */
    for (int nd = 0; nd <= 5; nd += 5) {
        put_one_tensor(&o, (uint64_t)nd);
        for (int k = 0; k < (nd ? nd : 1); k++)
            put(&o, 1, 8);
        put_f32(&o, 1.0f);
        expect_image_fails(path, &o, VIT_EFORMAT, "ndim");
    }

    /* Name lengths 0 and 64 (over the 63 limit), and a 40000-byte one. */
    const unsigned name_lens[3] = {0, 64, 40000};
    for (int k = 0; k < 3; k++) {
        o.n = 0;
        put_header(&o, "");
        put(&o, 1, 4);
        put(&o, name_lens[k], 2);
        for (unsigned i = 0; i < name_lens[k] && i < 64; i++)
            put(&o, 'n', 1);
        put(&o, 1, 4);
        put(&o, 1, 8);
        put_f32(&o, 1.0f);
        expect_image_fails(path, &o, VIT_EFORMAT, "name length");
    }

    /* Two tensors with the same name. */
    o.n = 0;
    put_header(&o, "");
    put(&o, 2, 4);
    for (int k = 0; k < 2; k++) {
        put(&o, 1, 2);
        put_str(&o, "w");
        put(&o, 1, 4);
        put(&o, 1, 8);
        put_f32(&o, 1.0f);
    }
    expect_image_fails(path, &o, VIT_EFORMAT, "twice");
    tmpdir_remove(&d);
}
END_TEST

START_TEST(test_nonfinite_value_in_file)
{
    tmpdir d;
    tmpdir_make(&d);
    char path[128];
    snprintf(path, sizeof path, "%s/nan.ckpt", d.path);
    const float bad[2] = {NAN, -INFINITY};
    for (int k = 0; k < 2; k++) {
        bytes o;
        put_one_tensor(&o, 1);
        put(&o, 3, 8);
        put_f32(&o, 1.0f);
        put_f32(&o, bad[k]);
        put_f32(&o, 2.0f);
        expect_image_fails(path, &o, VIT_ENUM, "'w' value [1]");
    }
    tmpdir_remove(&d);
}
END_TEST

START_TEST(test_write_rejects_bad_input)
{
    tmpdir d;
    tmpdir_make(&d);
    char path[128];
    snprintf(path, sizeof path, "%s/w.ckpt", d.path);
    vit_ckpt_tensor t[2];
    vit_ckpt c = small_ckpt(t);
    ck_assert_int_eq(vit_ckpt_write(NULL, &c), VIT_EINVAL);
    ck_assert_int_eq(vit_ckpt_write(path, NULL), VIT_EINVAL);

    t[1].ndim = 5;
    ck_assert_int_eq(vit_ckpt_write(path, &c), VIT_EINVAL);
    t[1].ndim = 1;
    t[1].dims[0] = 0;
    ck_assert_int_eq(vit_ckpt_write(path, &c), VIT_EINVAL);
    t[1].dims[0] = 3;
    strcpy(t[1].name, t[0].name);
    ck_assert_int_eq(vit_ckpt_write(path, &c), VIT_EINVAL);
    ck_assert_ptr_nonnull(strstr(vit_last_error(), "both named"));
    t[1].name[0] = '\0';
    ck_assert_int_eq(vit_ckpt_write(path, &c), VIT_EINVAL);
    memset(t[1].name, 'x', sizeof t[1].name); /* no terminator */
    ck_assert_int_eq(vit_ckpt_write(path, &c), VIT_EINVAL);
    strcpy(t[1].name, "b");
    t[1].data = NULL;
    ck_assert_int_eq(vit_ckpt_write(path, &c), VIT_EINVAL);
    t[1].data = small_b;
    c.ntensors = -1;
    ck_assert_int_eq(vit_ckpt_write(path, &c), VIT_EINVAL);
    c.ntensors = 2;

    /* Class names: a bad count, a NULL array, a NULL, empty or too long
     * name. */
    char **names = c.class_names, *bad_names[3] = {"bag", NULL, "sneaker"};
    c.nclass_names = -1;
    ck_assert_int_eq(vit_ckpt_write(path, &c), VIT_EINVAL);
    c.nclass_names = VIT_CKPT_CLASSES_MAX + 1;
    ck_assert_int_eq(vit_ckpt_write(path, &c), VIT_EINVAL);
    c.nclass_names = 3;
    c.class_names = NULL;
    ck_assert_int_eq(vit_ckpt_write(path, &c), VIT_EINVAL);
    c.class_names = bad_names;
    ck_assert_int_eq(vit_ckpt_write(path, &c), VIT_EINVAL);
    ck_assert_ptr_nonnull(strstr(vit_last_error(), "class_names[1] is NULL"));
    bad_names[1] = "";
    ck_assert_int_eq(vit_ckpt_write(path, &c), VIT_EINVAL);
    ck_assert_ptr_nonnull(strstr(vit_last_error(), "class_names[1] is empty"));
    char long_name[VIT_CKPT_CLASS_NAME_MAX + 1];
    memset(long_name, 'x', VIT_CKPT_CLASS_NAME_MAX);
    long_name[VIT_CKPT_CLASS_NAME_MAX] = '\0';
    bad_names[1] = long_name;
    ck_assert_int_eq(vit_ckpt_write(path, &c), VIT_EINVAL);
    ck_assert_ptr_nonnull(strstr(vit_last_error(), "class_names[1] is too long"));
    c.class_names = names;

    small_b[2] = NAN;
    ck_assert_int_eq(vit_ckpt_write(path, &c), VIT_ENUM);
    ck_assert_ptr_nonnull(strstr(vit_last_error(), "'b'"));
    /* Finite as a double but infinite as float32. */
    small_b[2] = 1e300;
    ck_assert_int_eq(vit_ckpt_write(path, &c), VIT_ENUM);
    small_b[2] = 1.0;
    ck_assert_int_eq(fu_count_entries(d.path), 0); /* no failed attempt left a file */
    ck_assert_int_eq(vit_ckpt_write(path, &c), VIT_OK);
    ck_assert_int_eq(fu_count_entries(d.path), 1);
    tmpdir_remove(&d);
}
END_TEST

START_TEST(test_write_missing_folder)
{
    tmpdir d;
    tmpdir_make(&d);
    char path[160];
    snprintf(path, sizeof path, "%s/no/such/folder/x.ckpt", d.path);
    vit_ckpt_tensor t[2];
    vit_ckpt c = small_ckpt(t);
    ck_assert_int_eq(vit_ckpt_write(path, &c), VIT_EIO);
    ck_assert_ptr_nonnull(strstr(vit_last_error(), path));
    ck_assert_ptr_nonnull(strstr(vit_last_error(), strerror(ENOENT)));
    ck_assert_int_eq(fu_count_entries(d.path), 0);
    tmpdir_remove(&d);
}
END_TEST

/* vit_ckpt_remove_temporaries: exactly PATH.tmp.XXXXXX (six characters)
 * goes; the checkpoint, other lengths, other prefixes and other files stay. */
static void touch(const char *dir, const char *name)
{
    char p[256];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    FILE *f = fopen(p, "w");
    ck_assert_ptr_nonnull(f);
    fclose(f);
}

static int exists(const char *dir, const char *name)
{
    char p[256];
    struct stat st;
    snprintf(p, sizeof p, "%s/%s", dir, name);
    return stat(p, &st) == 0;
}

START_TEST(test_remove_temporaries)
{
    tmpdir d;
    tmpdir_make(&d);
    char path[160];
    snprintf(path, sizeof path, "%s/last.ckpt", d.path);
    vit_ckpt_tensor t[2];
    vit_ckpt c = small_ckpt(t);
    ck_assert_int_eq(vit_ckpt_write(path, &c), VIT_OK);
    const char *gone[] = {"last.ckpt.tmp.Ab12Xz", "last.ckpt.tmp.000000"};
    const char *kept[] = {"last.ckpt.tmp.Ab12X", "last.ckpt.tmp.Ab12Xz9", "other.ckpt.tmp.Ab12Xz",
                          "xlast.ckpt.tmp.Ab12Xz", "last.ckpt.tm.Ab12Xz", "notes.txt"};
    for (size_t i = 0; i < sizeof gone / sizeof *gone; i++)
        touch(d.path, gone[i]);
    for (size_t i = 0; i < sizeof kept / sizeof *kept; i++)
        touch(d.path, kept[i]);
    vit_ckpt_remove_temporaries(path);
    for (size_t i = 0; i < sizeof gone / sizeof *gone; i++)
        ck_assert_msg(!exists(d.path, gone[i]), "%s was not removed", gone[i]);
    for (size_t i = 0; i < sizeof kept / sizeof *kept; i++)
        ck_assert_msg(exists(d.path, kept[i]), "%s was removed", kept[i]);
    vit_ckpt r;
    ck_assert_int_eq(vit_ckpt_read(path, &r), VIT_OK); /* the checkpoint itself stays */
    vit_ckpt_free(&r);
    vit_ckpt_remove_temporaries(NULL);                 /* no-ops, no crash */
    vit_ckpt_remove_temporaries("/no/such/folder/last.ckpt");
    tmpdir_remove(&d);
}
END_TEST

START_TEST(test_overwrite_keeps_mode)
{
    tmpdir d;
    tmpdir_make(&d);
    char path[128];
    snprintf(path, sizeof path, "%s/m.ckpt", d.path);
    vit_ckpt_tensor t[2];
    vit_ckpt c = small_ckpt(t);
    ck_assert_int_eq(vit_ckpt_write(path, &c), VIT_OK);
    ck_assert_int_eq(chmod(path, 0640), 0);
    c.step = 8;
    ck_assert_int_eq(vit_ckpt_write(path, &c), VIT_OK);
    struct stat st;
    ck_assert_int_eq(stat(path, &st), 0);
    ck_assert_uint_eq(st.st_mode & 0777, 0640);
    vit_ckpt r;
    ck_assert_int_eq(vit_ckpt_read(path, &r), VIT_OK);
    ck_assert_uint_eq(r.step, 8);
    vit_ckpt_free(&r);
    ck_assert_int_eq(fu_count_entries(d.path), 1);
    tmpdir_remove(&d);
}
END_TEST

/* A write that fails half way (here: the file size limit, which even root
 * cannot bypass) must leave the previous checkpoint intact and no
 * temporary file behind.  The limit is set in a forked child so the test
 * process itself keeps writing normally. */
START_TEST(test_failed_overwrite_keeps_old_file)
{
    tmpdir d;
    tmpdir_make(&d);
    char path[128];
    snprintf(path, sizeof path, "%s/keep.ckpt", d.path);
    vit_ckpt_tensor t[2];
    vit_ckpt old = small_ckpt(t);
    ck_assert_int_eq(vit_ckpt_write(path, &old), VIT_OK);
    size_t old_len;
    unsigned char *old_img = fu_read(path, &old_len);

    /* The new checkpoint is 80 KB; the child may only write 1000 bytes. */
    enum { BIG = 20000 };
    vit_real *big = malloc(BIG * sizeof *big);
    ck_assert_ptr_nonnull(big);
    for (int i = 0; i < BIG; i++)
        big[i] = i * 0.5;
    vit_ckpt_tensor bt = {"big", 1, {BIG, 0, 0, 0}, big};
    vit_ckpt fresh = {99, 9, {0, 0, 0, 0}, "new", 1, &bt, 0, {0, 0, 0}, 0, NULL, 0, NULL, NULL, 0};

    fflush(NULL); /* nothing buffered may be written twice by the child */
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        int code = 0;
        signal(SIGXFSZ, SIG_IGN); /* get EFBIG from write() instead of dying */
        struct rlimit lim = {1000, 1000};
        if (setrlimit(RLIMIT_FSIZE, &lim) != 0)
            code = 10;
        else if (vit_ckpt_write(path, &fresh) != VIT_EIO)
            code = 11;
        else if (strstr(vit_last_error(), path) == NULL)
            code = 12;
        else if (strstr(vit_last_error(), strerror(EFBIG)) == NULL)
            code = 13;
        free(big);
        free(old_img);
        _exit(code);
    }
    int status = 0;
    ck_assert_int_eq(waitpid(pid, &status, 0), pid);
    ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0,
                  "child status %d (10 setrlimit, 11 wrong code, 12/13 message)", status);

    /* The old file is byte for byte what it was, and alone in its folder. */
    size_t now_len;
    unsigned char *now = fu_read(path, &now_len);
    ck_assert_uint_eq(now_len, old_len);
    ck_assert_mem_eq(now, old_img, old_len);
    ck_assert_int_eq(fu_count_entries(d.path), 1);
    vit_ckpt r;
    ck_assert_int_eq(vit_ckpt_read(path, &r), VIT_OK);
    ck_assert_uint_eq(r.step, old.step);
    ck_assert_ptr_nonnull(vit_ckpt_find(&r, "b"));
    vit_ckpt_free(&r);

    /* Without the limit the same write succeeds. */
    ck_assert_int_eq(vit_ckpt_write(path, &fresh), VIT_OK);
    ck_assert_int_eq(vit_ckpt_read(path, &r), VIT_OK);
    ck_assert_uint_eq(r.step, 99);
    ck_assert(r.tensors[0].data[BIG - 1] == (BIG - 1) * 0.5);
    vit_ckpt_free(&r);
    free(now);
    free(old_img);
    free(big);
    tmpdir_remove(&d);
}
END_TEST

static Suite *checkpoint_suite(void)
{
    Suite *s = suite_create("checkpoint");
    TCase *tc = tcase_create("format");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_reference_crc);
    tcase_add_test(tc, test_byte_layout);
    tcase_add_test(tc, test_round_trip);
    tcase_add_test(tc, test_read_float32_writer);
    tcase_add_test(tc, test_every_flipped_byte_detected);
    tcase_add_test(tc, test_every_truncation_rejected);
    tcase_add_test(tc, test_read_header);
    tcase_add_test(tc, test_bad_header_fields);
    tcase_add_test(tc, test_absurd_sizes);
    tcase_add_test(tc, test_reads_version_1_file);
    tcase_add_test(tc, test_reads_version_2_file);
    tcase_add_test(tc, test_old_runs_load_converted);
    tcase_add_test(tc, test_version3_train_params_converted);
    tcase_add_test(tc, test_nonfinite_value_in_file);
    suite_add_tcase(s, tc);
    TCase *io = tcase_create("io");
    tcase_set_timeout(io, 60);
    tcase_add_test(io, test_write_rejects_bad_input);
    tcase_add_test(io, test_write_missing_folder);
    tcase_add_test(io, test_remove_temporaries);
    tcase_add_test(io, test_overwrite_keeps_mode);
    tcase_add_test(io, test_failed_overwrite_keeps_old_file);
    suite_add_tcase(s, io);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(checkpoint_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
