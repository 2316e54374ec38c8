/* MNIST-format IDX files, plain or gzip-compressed (gzopen reads both), gray
 * (N, H, W) or colour (N, H, W, C, stored as [N, H, W, C] like vit_dataset).
 *
 * An IDX file is a big-endian header - magic 0x000008TD (T = 08 for unsigned
 * bytes, D = number of dimensions), then D uint32 sizes - followed by the
 * values.  The sizes in the header are untrusted: memory grows only as bytes
 * actually arrive from the file, so a header claiming 2^31 x 2^31 pixels is
 * rejected as truncated instead of triggering a huge allocation. */
#include "vit/data.h"
#include "data_internal.h"
#include "error.h"

#include <dirent.h>
#include <errno.h>
#include <fnmatch.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <zlib.h>

#define IDX_MAGIC_IMAGES 0x00000803u /* unsigned bytes, 3 dimensions: N, H, W */
#define IDX_MAGIC_COLOUR 0x00000804u /* unsigned bytes, 4 dimensions: N, H, W, C */
#define IDX_MAGIC_LABELS 0x00000801u /* unsigned bytes, 1 dimension */
#define IDX_CHUNK ((size_t)1 << 20)

/* One IDX file in memory: its sizes and its raw bytes. */
typedef struct {
    char *path;
    int ndims;
    int dims[4];
    size_t nbytes;
    unsigned char *data;
} idx_file;

static void idx_free(idx_file *f)
{
    free(f->path);
    free(f->data);
    memset(f, 0, sizeof *f);
}

static int is_file(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

/* Finds one of the four files: the exact name (or, for images, its idx4
 * form name4), either + ".gz", or else the only file in dir matching one of
 * the glob patterns.  *out is malloc'd. */
static int find_file(const char *dir, const char *name, const char *name4, const char *pat1,
                     const char *pat2, char **out)
{
    static const char *suffixes[2] = {"", ".gz"};
    char *match = NULL;
    DIR *d;
    struct dirent *e;
    *out = NULL;
    for (int i = 0; i < 4; i++) {
        if (i >= 2 && name4 == NULL)
            break;
        char *p = vit_data_internal_join(dir, i < 2 ? name : name4, suffixes[i % 2]);
        if (p == NULL)
            return vit_fail(VIT_ENOMEM, "%s: out of memory", dir);
        if (is_file(p)) {
            *out = p;
            return VIT_OK;
        }
        free(p);
    }
    d = opendir(dir);
    if (d == NULL)
        return vit_fail(VIT_EIO, "%s: cannot open folder (%s)", dir, strerror(errno));
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.' ||
            (fnmatch(pat1, e->d_name, 0) != 0 && (pat2 == NULL || fnmatch(pat2, e->d_name, 0) != 0)))
            continue;
        if (match != NULL) {
            vit_fail(VIT_EFORMAT, "%s: both %s and %s could be the %s file; keep one",
                     dir, match, e->d_name, name);
            free(match);
            closedir(d);
            return VIT_EFORMAT;
        }
        match = strdup(e->d_name); /* just the name, for an ambiguity message */
        if (match == NULL) {
            closedir(d);
            return vit_fail(VIT_ENOMEM, "%s: out of memory", dir);
        }
    }
    closedir(d);
    if (match == NULL)
        return vit_fail(VIT_EIO, "%s: no %s or %s.gz (nor a file matching %s)", dir, name,
                        name, pat1);
    *out = vit_data_internal_join(dir, match, "");
    free(match);
    return *out ? VIT_OK : vit_fail(VIT_ENOMEM, "%s: out of memory", dir);
}

static uint32_t be32(const unsigned char *b)
{
    return (uint32_t)b[0] << 24 | (uint32_t)b[1] << 16 | (uint32_t)b[2] << 8 | b[3];
}

/* Reads exactly want bytes (fewer only at the end of the stream); -1 on a
 * read error. */
static long long read_full(gzFile g, unsigned char *buf, size_t want)
{
    size_t got = 0;
    while (got < want) {
        size_t n = want - got < IDX_CHUNK ? want - got : IDX_CHUNK;
        int r = gzread(g, buf + got, (unsigned)n);
        if (r < 0)
            return -1;
        if (r == 0)
            break;
        got += (size_t)r;
    }
    return (long long)got;
}

static int zlib_error(gzFile g, const char *path)
{
    int err;
    const char *msg = vit_data_internal_zlib_message(g, path, &err);
    return vit_fail(err == Z_ERRNO ? VIT_EIO : VIT_EFORMAT, "%s: read error (%s)", path,
                    err == Z_ERRNO ? strerror(errno) : msg);
}

/* What a refused magic number says the file is, in words: the IDX value
 * type (the third byte) and the number of dimensions (the fourth). */
static void magic_words(uint32_t m, char *out, size_t cap)
{
    static const struct { unsigned code; const char *name; } types[] = {
        {0x08, "unsigned bytes"}, {0x09, "signed bytes"}, {0x0B, "16-bit integers"},
        {0x0C, "32-bit integers"}, {0x0D, "floats"}, {0x0E, "doubles"}};
    const char *type = NULL;
    for (size_t i = 0; i < sizeof types / sizeof types[0]; i++)
        if (((m >> 8) & 0xff) == types[i].code)
            type = types[i].name;
    if ((m >> 16) != 0 || type == NULL)
        snprintf(out, cap, "not an IDX file");
    else
        snprintf(out, cap, "%u-D IDX of %s%s", (unsigned)(m & 0xff), type,
                 (m & 0xff) == 4 && ((m >> 8) & 0xff) != 0x08 ? ", not supported" : "");
}

/* Reads the header and the data bytes of f->path, whose magic must be magic
 * (ndims = its low byte) or, for images, IDX_MAGIC_COLOUR as well. */
static int read_body(gzFile g, idx_file *f, uint32_t magic)
{
    int images = magic == IDX_MAGIC_IMAGES;
    unsigned char hdr[20];
    long long got = read_full(g, hdr, 4);
    size_t total = 1, cap = 0;
    if (got < 0)
        return zlib_error(g, f->path);
    uint32_t m = got < 4 ? 0u : be32(hdr);
    if (got < 4 || (m != magic && !(images && m == IDX_MAGIC_COLOUR))) {
        char words[64] = "shorter than a magic number";
        if (got >= 4)
            magic_words(m, words, sizeof words);
        return vit_fail(VIT_EFORMAT, "%s: magic 0x%08x, expected %s; this file: %s", f->path,
                        (unsigned)m,
                        images ? "0x00000803 (gray images N,H,W of unsigned bytes) or "
                                 "0x00000804 (colour images N,H,W,C)"
                               : "0x00000801 (IDX labels of unsigned bytes)",
                        words);
    }
    int ndims = (int)(m & 0xff);
    f->ndims = ndims;
    got = read_full(g, hdr + 4, 4 * (size_t)ndims);
    if (got < 0)
        return zlib_error(g, f->path);
    if (got < 4 * ndims)
        return vit_fail(VIT_EFORMAT, "%s: header truncated", f->path);
    if (ndims == 4 && be32(hdr + 16) != 1 && be32(hdr + 16) != 3)
        return vit_fail(VIT_EFORMAT, "%s: colour IDX with %lu channels, expected 1 or 3",
                        f->path, (unsigned long)be32(hdr + 16));
    for (int i = 0; i < ndims; i++) {
        uint32_t v = be32(hdr + 4 + 4 * i);
        if (v == 0 || v > INT_MAX)
            return vit_fail(VIT_EFORMAT, "%s: dimension %d is %lu, expected 1..%d", f->path, i,
                            (unsigned long)v, INT_MAX);
        f->dims[i] = (int)v;
        if (total > SIZE_MAX / v)
            return vit_fail(VIT_EFORMAT, "%s: header sizes overflow", f->path);
        total *= v;
    }
    /* Grow the buffer as data arrives, never past what the header claims. */
    while (f->nbytes < total) {
        if (f->nbytes == cap) {
            size_t grow = cap < IDX_CHUNK ? IDX_CHUNK : cap;
            size_t ncap = total - cap < grow ? total : cap + grow;
            unsigned char *p = realloc(f->data, ncap);
            if (p == NULL)
                return vit_fail(VIT_ENOMEM, "%s: out of memory after %zu bytes", f->path, cap);
            f->data = p;
            cap = ncap;
        }
        got = read_full(g, f->data + f->nbytes, cap - f->nbytes);
        if (got < 0)
            return zlib_error(g, f->path);
        f->nbytes += (size_t)got;
        if (f->nbytes < cap)
            return vit_fail(VIT_EFORMAT, "%s: truncated: the header promises %zu data bytes, "
                            "the file holds %zu", f->path, total, f->nbytes);
    }
    unsigned char extra;
    got = read_full(g, &extra, 1);
    if (got < 0)
        return zlib_error(g, f->path);
    if (got > 0)
        return vit_fail(VIT_EFORMAT, "%s: longer than the %zu data bytes its header promises",
                        f->path, total);
    return VIT_OK;
}

/* Finds and reads one IDX file. */
static int read_idx(const char *dir, const char *name, const char *name4, const char *pat1,
                    const char *pat2, uint32_t magic, idx_file *f)
{
    gzFile g;
    int rc;
    memset(f, 0, sizeof *f);
    if ((rc = find_file(dir, name, name4, pat1, pat2, &f->path)))
        return rc;
    errno = 0;
    g = gzopen(f->path, "rb");
    if (g == NULL)
        return vit_fail(errno ? VIT_EIO : VIT_ENOMEM, "%s: cannot open (%s)", f->path,
                        errno ? strerror(errno) : "out of memory");
    rc = read_body(g, f, magic);
    gzclose(g);
    return rc;
}

/* Checks that labels match images in count; returns the largest label. */
static int check_pair(const idx_file *img, const idx_file *lab, int *max_label)
{
    if (img->dims[0] != lab->dims[0])
        return vit_fail(VIT_EFORMAT, "%s: %d labels, but %s holds %d images", lab->path,
                        lab->dims[0], img->path, img->dims[0]);
    for (size_t i = 0; i < lab->nbytes; i++)
        if (lab->data[i] > *max_label)
            *max_label = lab->data[i];
    return VIT_OK;
}

static int to_dataset(vit_dataset *ds, const idx_file *img, const idx_file *lab, int classes)
{
    int c = img->ndims == 4 ? img->dims[3] : 1;
    int rc = vit_data_internal_alloc(ds, img->dims[0], img->dims[1], img->dims[2], c, img->path);
    if (rc)
        return rc;
    ds->classes = classes;
    for (size_t i = 0; i < img->nbytes; i++)
        ds->images[i] = (vit_real)img->data[i] / (vit_real)255;
    for (int i = 0; i < ds->count; i++)
        ds->labels[i] = lab->data[i];
    return vit_data_internal_number_names(ds, img->path);
}

int vit_data_load_idx(const char *dir, vit_dataset *train, vit_dataset *test)
{
    static const char *fn = "vit_data_load_idx";
    idx_file f[4]; /* train images, train labels, test images, test labels */
    int rc, max_label = 0;
    if ((rc = vit_data_internal_begin(fn, "dir", dir, train, test)))
        return rc;
    memset(f, 0, sizeof f);

    rc = read_idx(dir, "train-images-idx3-ubyte", "train-images-idx4-ubyte",
                  "*train*images*idx[34]-ubyte*", NULL, IDX_MAGIC_IMAGES, &f[0]);
    if (!rc)
        rc = read_idx(dir, "train-labels-idx1-ubyte", NULL, "*train*labels*idx1-ubyte*", NULL,
                      IDX_MAGIC_LABELS, &f[1]);
    if (!rc)
        rc = check_pair(&f[0], &f[1], &max_label);
    if (!rc)
        rc = read_idx(dir, "t10k-images-idx3-ubyte", "t10k-images-idx4-ubyte",
                      "*t10k*images*idx[34]-ubyte*", "*test*images*idx[34]-ubyte*",
                      IDX_MAGIC_IMAGES, &f[2]);
    if (!rc)
        rc = read_idx(dir, "t10k-labels-idx1-ubyte", NULL, "*t10k*labels*idx1-ubyte*",
                      "*test*labels*idx1-ubyte*", IDX_MAGIC_LABELS, &f[3]);
    if (!rc)
        rc = check_pair(&f[2], &f[3], &max_label);
    int c0 = f[0].ndims == 4 ? f[0].dims[3] : 1, c2 = f[2].ndims == 4 ? f[2].dims[3] : 1;
    if (!rc && (f[2].dims[1] != f[0].dims[1] || f[2].dims[2] != f[0].dims[2]))
        rc = vit_fail(VIT_EFORMAT, "%s: images are %dx%d, but %s has %dx%d", f[2].path,
                      f[2].dims[1], f[2].dims[2], f[0].path, f[0].dims[1], f[0].dims[2]);
    if (!rc && c2 != c0)
        rc = vit_fail(VIT_EFORMAT, "%s: images have %d channel%s, but those of %s have %d",
                      f[2].path, c2, c2 == 1 ? "" : "s", f[0].path, c0);
    if (!rc) {
        int classes = max_label + 1 < 2 ? 2 : max_label + 1;
        rc = to_dataset(train, &f[0], &f[1], classes);
        if (!rc)
            rc = to_dataset(test, &f[2], &f[3], classes);
    }
    for (int i = 0; i < 4; i++)
        idx_free(&f[i]);
    if (rc) {
        vit_dataset_free(train);
        vit_dataset_free(test);
    }
    return rc;
}
