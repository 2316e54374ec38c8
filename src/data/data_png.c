/* PNG images through libpng's simplified API: single files (vit_png_read,
 * vit_png_write, and vit_image_read, which hands JPEGs to data_jpeg.c) and
 * folders with one subfolder of PNG or JPEG images per class. */
#include "vit/data.h"
#include "vit/atomic_file.h"
#include "data_internal.h"
#include "error.h"

#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <png.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---------------------------------------------------------------- one file */

/* An image [h, w, c] in [0, 1], c = 1 (gray) or 3 (RGB). */
typedef struct {
    vit_real *px;
    int h, w, c;
} real_image;

static const char *kind(int c) { return c == 1 ? "grayscale" : "RGB"; }

/* Converts the samples libpng produced ([h*w, c + alpha], 8- or 16-bit) to
 * vit_real.  Without over_white alpha is dropped: 8-bit samples are
 * unassociated, so the colour is kept as it is; 16-bit linear samples come
 * premultiplied by alpha, so the colour is divided by alpha again (and is
 * 0 where alpha is 0).  With over_white the colour is composited over
 * white: colour x alpha + (1 - alpha). */
static void samples_to_real(vit_real *dst, const void *src, size_t pixels, int c, int alpha,
                            int wide, int over_white)
{
    if (alpha && over_white) {
        const unsigned char *b8 = src;
        const png_uint_16 *b16 = src;
        int stride = c + 1;
        double full = wide ? 65535 : 255;
        for (size_t i = 0; i < pixels; i++) {
            size_t at = i * (size_t)stride;
            double a = (wide ? b16[at + (size_t)c] : b8[at + (size_t)c]) / full;
            for (int ch = 0; ch < c; ch++) {
                double v = (wide ? b16[at + (size_t)ch] : b8[at + (size_t)ch]) / full;
                v = wide ? v + (1 - a) : v * a + (1 - a); /* 16-bit: premultiplied */
                dst[i * (size_t)c + (size_t)ch] = (vit_real)(v > 1 ? 1 : v);
            }
        }
        return;
    }
    const unsigned char *b8 = src;
    const png_uint_16 *b16 = src;
    int stride = c + alpha;
    for (size_t i = 0; i < pixels; i++) {
        for (int ch = 0; ch < c; ch++) {
            size_t at = i * (size_t)stride + (size_t)ch;
            vit_real v;
            if (!wide) {
                v = (vit_real)b8[at] / (vit_real)255;
            } else if (alpha) {
                unsigned a = b16[i * (size_t)stride + (size_t)c];
                v = a == 0 ? 0 : (vit_real)b16[at] / (vit_real)a;
                v = v > 1 ? 1 : v;
            } else {
                v = (vit_real)b16[at] / (vit_real)65535;
            }
            dst[i * (size_t)c + (size_t)ch] = v;
        }
    }
}

/* The most a zlib stream can inflate: a 258-byte match coded in two bits
 * gives 1032 output bytes per input byte, and nothing does better. */
#define DEFLATE_MAX_RATIO 1032

/* Whether a PNG whose header (the 8-byte signature, then the IHDR chunk,
 * which libpng has already checked is first and valid) describes more
 * image data than a file of file_size bytes can hold compressed.  The
 * decoded data of a non-interlaced image is height rows of a filter byte
 * and the packed samples; an interlaced one holds at least the packed
 * samples.  Checking this before allocating means a tiny file claiming
 * 100000 x 100000 pixels is rejected at once, without a huge allocation or
 * a long decode. */
static int claims_too_much(const unsigned char hdr[33], long long file_size)
{
    static const int samples[7] = {1, 1, 3, 1, 2, 1, 4}; /* per pixel, by colour type */
    double w = (double)((uint32_t)hdr[16] << 24 | (uint32_t)hdr[17] << 16 |
                        (uint32_t)hdr[18] << 8 | hdr[19]);
    double h = (double)((uint32_t)hdr[20] << 24 | (uint32_t)hdr[21] << 16 |
                        (uint32_t)hdr[22] << 8 | hdr[23]);
    double bpp = (double)hdr[24] * (hdr[25] < 7 ? samples[hdr[25]] : 1); /* bits per pixel */
    double least = hdr[28] != 0 ? w * h * bpp / 8 : h * (1 + ceil(w * bpp / 8));
    return least > (double)DEFLATE_MAX_RATIO * (double)file_size;
}

/* Reads path into img.  The file is opened here (not by libpng) so that a
 * missing file is VIT_EIO and a file that is not a PNG is VIT_EFORMAT. */
static int read_png(const char *path, real_image *img, int over_white)
{
    png_image im;
    unsigned char hdr[33]; /* signature, IHDR length and type, IHDR data */
    void *raw = NULL;
    int rc = VIT_OK;
    struct stat st;
    memset(img, 0, sizeof *img);
    FILE *fp = fopen(path, "rb");
    if (fp == NULL)
        return vit_fail(VIT_EIO, "%s: cannot open (%s)", path, strerror(errno));
    size_t got = fread(hdr, 1, sizeof hdr, fp);
    if (got < 8 || png_sig_cmp(hdr, 0, 8) != 0) {
        rc = ferror(fp) ? vit_fail(VIT_EIO, "%s: read error", path)
                        : vit_fail(VIT_EFORMAT, "%s: not a PNG file (bad signature)", path);
        fclose(fp);
        return rc;
    }
    if (fstat(fileno(fp), &st) != 0) {
        rc = vit_fail(VIT_EIO, "%s: cannot stat (%s)", path, strerror(errno));
        fclose(fp);
        return rc;
    }
    rewind(fp);

    memset(&im, 0, sizeof im);
    im.version = PNG_IMAGE_VERSION;
    if (!png_image_begin_read_from_stdio(&im, fp)) {
        rc = vit_fail(VIT_EFORMAT, "%s: not a valid PNG (libpng: %s)", path, im.message);
        fclose(fp);
        return rc;
    }
    /* Ask for the file's own colour kind and depth: libpng then changes no
     * values.  Alpha is kept if present (else libpng would composite it onto
     * a background) and dropped in samples_to_real.  16-bit files are
     * treated by libpng as linear; reading them as 8-bit would gamma-encode
     * them, so they are read as 16-bit linear. */
    int c = (im.format & PNG_FORMAT_FLAG_COLOR) ? 3 : 1;
    int alpha = (im.format & PNG_FORMAT_FLAG_ALPHA) ? 1 : 0;
    int wide = (im.format & PNG_FORMAT_FLAG_LINEAR) ? 1 : 0;
    im.format = (c == 3 ? PNG_FORMAT_RGB : PNG_FORMAT_GRAY) | (alpha ? PNG_FORMAT_FLAG_ALPHA : 0) |
                (wide ? PNG_FORMAT_FLAG_LINEAR : 0);
    size_t pixels = (size_t)im.width * (size_t)im.height, n = 0, bytes = 0;
    if (got == sizeof hdr && claims_too_much(hdr, (long long)st.st_size)) {
        rc = vit_fail(VIT_EFORMAT, "%s: header claims %lux%lu pixels, more than its %lld bytes "
                      "can hold (truncated or corrupt)", path, (unsigned long)im.width,
                      (unsigned long)im.height, (long long)st.st_size);
        png_image_free(&im);
        fclose(fp);
        return rc;
    }
    if (im.width > (1u << 30) || im.height > (1u << 30) ||
        (size_t)im.width * (size_t)(c + alpha) > INT32_MAX ||
        !vit_mul_size(&n, pixels, (size_t)(c + alpha)) ||
        !vit_mul_size(&bytes, pixels, (size_t)c * sizeof(vit_real))) {
        rc = vit_fail(VIT_EFORMAT, "%s: image of %lux%lu pixels is too large", path,
                      (unsigned long)im.width, (unsigned long)im.height);
        png_image_free(&im);
        fclose(fp);
        return rc;
    }
    raw = malloc(n * (wide ? 2 : 1));
    img->px = malloc(bytes);
    if (raw == NULL || img->px == NULL) {
        rc = vit_fail(VIT_ENOMEM, "%s: out of memory for %zu pixels", path, pixels);
        png_image_free(&im);
    } else if (!png_image_finish_read(&im, NULL, raw, 0, NULL)) {
        rc = vit_fail(VIT_EFORMAT, "%s: corrupt PNG (libpng: %s)", path, im.message);
    }
    fclose(fp);
    if (rc == VIT_OK) {
        samples_to_real(img->px, raw, pixels, c, alpha, wide, over_white);
        img->h = (int)im.height;
        img->w = (int)im.width;
        img->c = c;
    } else {
        free(img->px);
        img->px = NULL;
    }
    free(raw);
    return rc;
}

/* The first bytes of every JPEG: SOI, then the first marker's 0xFF. */
static int is_jpeg_file(const char *path)
{
    unsigned char b[3];
    FILE *fp = fopen(path, "rb");
    size_t got = fp ? fread(b, 1, sizeof b, fp) : 0;
    if (fp != NULL)
        fclose(fp);
    return got == 3 && b[0] == 0xFF && b[1] == 0xD8 && b[2] == 0xFF;
}

/* A PNG or JPEG, told apart by content rather than name.  A file that is
 * neither goes to the PNG reader, whose message says it is not a PNG. */
static int read_image(const char *path, real_image *img, int over_white)
{
    memset(img, 0, sizeof *img);
    if (is_jpeg_file(path))
        return vit_data_internal_read_jpeg(path, &img->px, &img->h, &img->w, &img->c);
    return read_png(path, img, over_white);
}

static int read_image_keep(const char *path, real_image *img) { return read_image(path, img, 0); }
static int read_png_keep(const char *path, real_image *img) { return read_png(path, img, 0); }
static int read_image_white(const char *path, real_image *img) { return read_image(path, img, 1); }

/* vit_image_read and vit_png_read: the checks, then read (read_image or
 * read_png) into the caller's pointers. */
static int read_public(const char *fn, int (*read)(const char *, real_image *), const char *path,
                       vit_real **pixels, int *height, int *width, int *channels)
{
    real_image img;
    int rc;
    if ((rc = vit_check_ptr(fn, "path", path)) || (rc = vit_check_ptr(fn, "pixels", pixels)) ||
        (rc = vit_check_ptr(fn, "height", height)) || (rc = vit_check_ptr(fn, "width", width)) ||
        (rc = vit_check_ptr(fn, "channels", channels)))
        return rc;
    *pixels = NULL;
    *height = *width = *channels = 0;
    if ((rc = read(path, &img)))
        return rc;
    *pixels = img.px;
    *height = img.h;
    *width = img.w;
    *channels = img.c;
    return VIT_OK;
}

int vit_image_read(const char *path, vit_real **pixels, int *height, int *width, int *channels)
{
    return read_public("vit_image_read", read_image_keep, path, pixels, height, width, channels);
}

int vit_png_read(const char *path, vit_real **pixels, int *height, int *width, int *channels)
{
    return read_public("vit_png_read", read_png_keep, path, pixels, height, width, channels);
}

int vit_image_load(const char *path, const vit_data_fit *fit, vit_real **pixels, int *height,
                   int *width, int *channels)
{
    static const char *fn = "vit_image_load";
    int rc;
    if (fit != NULL && (rc = vit_data_internal_check_fit(fn, fit)))
        return rc;
    if ((rc = read_public(fn, read_image_white, path, pixels, height, width, channels)))
        return rc;
    if (fit == NULL)
        return VIT_OK;
    int h = fit->height ? fit->height : *height, w = fit->width ? fit->width : *width;
    int c = fit->channels ? fit->channels : *channels;
    if (h == *height && w == *width && c == *channels)
        return VIT_OK;
    vit_real *dst = malloc((size_t)h * (size_t)w * (size_t)c * sizeof *dst);
    if (dst == NULL || (rc = vit_image_fit(*pixels, *height, *width, *channels, dst, h, w, c))) {
        free(dst);
        free(*pixels);
        *pixels = NULL;
        *height = *width = *channels = 0;
        return rc ? rc : vit_fail(VIT_ENOMEM, "%s: %s: out of memory", fn, path);
    }
    free(*pixels);
    *pixels = dst;
    *height = h;
    *width = w;
    *channels = c;
    return VIT_OK;
}

int vit_png_write(const char *path, const unsigned char *pixels, int height, int width,
                  int channels)
{
    static const char *fn = "vit_png_write";
    png_image im;
    int rc;
    if ((rc = vit_check_ptr(fn, "path", path)) || (rc = vit_check_ptr(fn, "pixels", pixels)) ||
        (rc = vit_check_dim(fn, "height", height)) || (rc = vit_check_dim(fn, "width", width)))
        return rc;
    if (channels != 1 && channels != 3)
        return vit_fail(VIT_EINVAL, "%s: channels must be 1 or 3, got %d", fn, channels);
    if ((long long)width * channels > INT32_MAX)
        return vit_fail(VIT_EINVAL, "%s: width %d is too large for a PNG row", fn, width);

    FILE *fp;
    char *tmp;
    if ((rc = vit_atomic_open(path, &fp, &tmp)) != VIT_OK)
        return rc;
    memset(&im, 0, sizeof im);
    im.version = PNG_IMAGE_VERSION;
    im.width = (png_uint_32)width;
    im.height = (png_uint_32)height;
    im.format = channels == 3 ? PNG_FORMAT_RGB : PNG_FORMAT_GRAY;
    if (!png_image_write_to_stdio(&im, fp, 0, pixels, 0, NULL))
        rc = vit_fail(VIT_EIO, "%s: cannot write PNG (libpng: %s)", path, im.message);
    return vit_atomic_close(fp, tmp, path, rc);
}

/* ------------------------------------------------------- class folders */

/* A sorted list of names. */
typedef struct {
    char **name;
    int n;
} name_list;

static void names_free(name_list *l)
{
    for (int i = 0; i < l->n; i++)
        free(l->name[i]);
    free(l->name);
    l->name = NULL;
    l->n = 0;
}

static int cmp_names(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* The names a class folder's images may have: .png, .jpg, .jpeg, any case. */
static int is_image_name(const char *s)
{
    size_t n = strlen(s);
    return (n > 4 && (strcasecmp(s + n - 4, ".png") == 0 || strcasecmp(s + n - 4, ".jpg") == 0)) ||
           (n > 5 && strcasecmp(s + n - 5, ".jpeg") == 0);
}

/* Lists the subfolders (want_dirs) or the regular image files of dir, sorted
 * with strcmp; names starting with '.' are skipped. */
static int list_dir(const char *dir, int want_dirs, name_list *out, int *ignored)
{
    DIR *d;
    struct dirent *e;
    int cap = 0, rc = VIT_OK;
    out->name = NULL;
    out->n = 0;
    d = opendir(dir);
    if (d == NULL)
        return vit_fail(VIT_EIO, "%s: cannot open folder (%s)", dir, strerror(errno));
    while (rc == VIT_OK && (e = readdir(d)) != NULL) {
        struct stat st;
        char *full;
        if (e->d_name[0] == '.')
            continue;
        if ((full = vit_data_internal_join(dir, e->d_name, "")) == NULL) {
            rc = vit_fail(VIT_ENOMEM, "%s: out of memory", dir);
            break;
        }
        int reg = stat(full, &st) == 0 && S_ISREG(st.st_mode);
        int keep = want_dirs ? stat(full, &st) == 0 && S_ISDIR(st.st_mode)
                             : reg && is_image_name(e->d_name);
        free(full);
        if (!keep && !want_dirs && reg && ignored != NULL)
            (*ignored)++;
        if (!keep)
            continue;
        if (out->n == cap) {
            int ncap = cap ? 2 * cap : 16;
            char **p = cap < INT_MAX / 2 ? realloc(out->name, (size_t)ncap * sizeof *p) : NULL;
            if (p == NULL) {
                rc = vit_fail(VIT_ENOMEM, "%s: out of memory listing the folder", dir);
                break;
            }
            out->name = p;
            cap = ncap;
        }
        if ((out->name[out->n] = strdup(e->d_name)) == NULL)
            rc = vit_fail(VIT_ENOMEM, "%s: out of memory listing the folder", dir);
        else
            out->n++;
    }
    closedir(d);
    if (rc != VIT_OK)
        names_free(out);
    else if (out->n > 1)
        qsort(out->name, (size_t)out->n, sizeof *out->name, cmp_names);
    return rc;
}

/* Lists classes and their files; files[k] belongs to classes.name[k]. */
static int list_classes(const char *dir, name_list *classes, name_list **files, int *total,
                        int *ignored)
{
    int rc = list_dir(dir, 1, classes, NULL);
    *files = NULL;
    *total = 0;
    if (rc)
        return rc;
    if (classes->n == 0) {
        names_free(classes);
        return vit_fail(VIT_EFORMAT, "%s: no class subfolders (expected one folder of PNG or "
                        "JPEG files per class)", dir);
    }
    *files = calloc((size_t)classes->n, sizeof **files);
    if (*files == NULL)
        rc = vit_fail(VIT_ENOMEM, "%s: out of memory", dir);
    for (int k = 0; rc == VIT_OK && k < classes->n; k++) {
        char *sub = vit_data_internal_join(dir, classes->name[k], "");
        if (sub == NULL) {
            rc = vit_fail(VIT_ENOMEM, "%s: out of memory", dir);
            break;
        }
        rc = list_dir(sub, 0, &(*files)[k], ignored);
        if (rc == VIT_OK && (*files)[k].n == 0)
            rc = vit_fail(VIT_EFORMAT, "%s: empty class folder (no .png, .jpg or .jpeg files)", sub);
        else if (rc == VIT_OK && (*files)[k].n > INT_MAX - *total)
            rc = vit_fail(VIT_EFORMAT, "%s: too many images", dir);
        else if (rc == VIT_OK)
            *total += (*files)[k].n;
        free(sub);
    }
    return rc;
}

static void classes_free(name_list *classes, name_list *files)
{
    if (files != NULL)
        for (int k = 0; k < classes->n; k++)
            names_free(&files[k]);
    free(files);
    names_free(classes);
}


/* The path of class k's file j, malloc'd (NULL when out of memory). */
static char *file_path(const char *dir, const name_list *classes, const name_list *files, int k,
                       int j)
{
    char *sub = vit_data_internal_join(dir, classes->name[k], "");
    char *path = sub ? vit_data_internal_join(sub, files[k].name[j], "") : NULL;
    free(sub);
    return path;
}

/* Reads class k's file j into img; *path gets its malloc'd path, or NULL
 * with VIT_ENOMEM. */
static int read_class_file(const char *dir, const name_list *classes, const name_list *files,
                           int k, int j, int over_white, real_image *img, char **path)
{
    memset(img, 0, sizeof *img);
    if ((*path = file_path(dir, classes, files, k, j)) == NULL)
        return vit_fail(VIT_ENOMEM, "%s: out of memory", dir);
    return read_image(*path, img, over_white);
}

/* Whether a failed read may be skipped (and then notes it in *part). */
static int skip_it(const vit_data_how *how, int rc, vit_data_report *part)
{
    if (how == NULL || !how->skip_bad || (rc != VIT_EIO && rc != VIT_EFORMAT))
        return 0;
    if (part->skipped < VIT_DATA_REPORT_NAMES)
        snprintf(part->skipped_why[part->skipped], sizeof part->skipped_why[0], "%s",
                 vit_last_error());
    part->skipped++;
    return 1;
}

/* The sizes and colours read, into part. */
static void note_image(vit_data_report *part, const real_image *img)
{
    int first = part->gray + part->colour == 0;
    if (first || img->h < part->min_h)
        part->min_h = img->h;
    if (first || img->h > part->max_h)
        part->max_h = img->h;
    if (first || img->w < part->min_w)
        part->min_w = img->w;
    if (first || img->w > part->max_w)
        part->max_w = img->w;
    *(img->c == 1 ? &part->gray : &part->colour) += 1;
}

/* read_images' answer when a tolerant read meets an image whose size or
 * channels differ where the fit leaves them to the images: the folder is
 * then surveyed and read again. */
#define MIXED 1000

/* Reads every image, in class then file order, into ds.  Strict (how
 * NULL): the first image fixes the size; the first one that differs is
 * reported.  Tolerant: each image is fitted to how->fit, whose parts left
 * 0 take the first image's (MIXED when a later one differs there). */
static int read_images(const char *dir, const name_list *classes, const name_list *files,
                       int total, const vit_data_how *how, vit_dataset *ds,
                       vit_data_report *part)
{
    char *first = NULL;
    int rc = VIT_OK, i = 0;
    memset(part, 0, sizeof *part);
    for (int k = 0; rc == VIT_OK && k < classes->n; k++) {
        int had = i;
        for (int j = 0; rc == VIT_OK && j < files[k].n; j++) {
            real_image img;
            char *path;
            rc = read_class_file(dir, classes, files, k, j, how != NULL, &img, &path);
            if (rc != VIT_OK && skip_it(how, rc, part)) {
                rc = VIT_OK;
                free(path);
                continue;
            }
            if ((rc == VIT_EIO || rc == VIT_EFORMAT) && how != NULL)
                how->rep->unreadable = 1;
            if (rc == VIT_OK && first == NULL) {
                int h = how && how->fit.height ? how->fit.height : img.h;
                int w = how && how->fit.width ? how->fit.width : img.w;
                int c = how && how->fit.channels ? how->fit.channels : img.c;
                rc = vit_data_internal_alloc(ds, total, h, w, c, dir);
                ds->classes = classes->n;
                first = path;
                path = NULL;
            } else if (rc == VIT_OK && how == NULL &&
                       (img.h != ds->height || img.w != ds->width || img.c != ds->channels)) {
                rc = vit_fail(VIT_EFORMAT, "%s: %s %dx%d (HxW), but the first image %s is %s %dx%d",
                              path, kind(img.c), img.h, img.w, first, kind(ds->channels),
                              ds->height, ds->width);
            } else if (rc == VIT_OK && how != NULL &&
                       ((!how->fit.height && (img.h != ds->height || img.w != ds->width)) ||
                        (!how->fit.channels && img.c != ds->channels))) {
                rc = MIXED;
            }
            if (rc == VIT_OK) {
                size_t n = (size_t)ds->height * (size_t)ds->width * (size_t)ds->channels;
                vit_real *dst = ds->images + (size_t)i * n;
                note_image(part, &img);
                if (img.h == ds->height && img.w == ds->width && img.c == ds->channels)
                    memcpy(dst, img.px, n * sizeof *dst);
                else
                    rc = vit_image_fit(img.px, img.h, img.w, img.c, dst, ds->height, ds->width,
                                       ds->channels);
                part->resized += img.h != ds->height || img.w != ds->width;
                part->converted += img.c != ds->channels;
                ds->labels[i++] = k;
            }
            free(img.px);
            free(path);
        }
        if (rc == VIT_OK && i == had) {
            char *sub = vit_data_internal_join(dir, classes->name[k], "");
            rc = vit_fail(VIT_EFORMAT, "%s: no readable image (all %d skipped: --skip-bad)",
                          sub ? sub : dir, files[k].n);
            free(sub);
        }
    }
    ds->count = i;
    free(first);
    return rc;
}

static int cmp_int(const void *a, const void *b)
{
    int x = *(const int *)a, y = *(const int *)b;
    return (x > y) - (x < y);
}

/* The nearest multiple of 8, at least 8. */
static int round8(double x)
{
    int r = (int)floor(x / 8 + 0.5) * 8;
    return r < 8 ? 8 : r;
}

/* The rule of vit_data_fit for the parts of how->fit left 0, from every
 * readable image of the folder (read once more; unreadable ones are left
 * to the second reading, which skips or refuses them). */
static int survey(const char *dir, const name_list *classes, const name_list *files, int total,
                  vit_data_how *how)
{
    int *hs = malloc((size_t)total * sizeof *hs + 1), *ws = malloc((size_t)total * sizeof *ws + 1);
    int n = 0, colour = 0, gray = 0, rc = VIT_OK;
    if (hs == NULL || ws == NULL)
        rc = vit_fail(VIT_ENOMEM, "%s: out of memory", dir);
    for (int k = 0; rc == VIT_OK && k < classes->n; k++)
        for (int j = 0; rc == VIT_OK && j < files[k].n; j++) {
            real_image img;
            char *path;
            int got = read_class_file(dir, classes, files, k, j, 1, &img, &path);
            if (path == NULL)
                rc = got;
            else if (got == VIT_OK) {
                hs[n] = img.h;
                ws[n++] = img.w;
                *(img.c == 3 ? &colour : &gray) += 1;
            }
            free(img.px);
            free(path);
        }
    if (rc == VIT_OK && n > 0) {
        qsort(hs, (size_t)n, sizeof *hs, cmp_int);
        qsort(ws, (size_t)n, sizeof *ws, cmp_int);
        if (!how->fit.height && (hs[0] != hs[n - 1] || ws[0] != ws[n - 1])) {
            double h = hs[n / 2], w = ws[n / 2], big = h > w ? h : w;
            if (big > VIT_DATA_FIT_MAX_SIDE) {
                h = h * VIT_DATA_FIT_MAX_SIDE / big;
                w = w * VIT_DATA_FIT_MAX_SIDE / big;
            }
            how->fit.height = round8(h);
            how->fit.width = round8(w);
            how->rep->ruled |= 1;
        }
        if (!how->fit.channels && colour && gray) {
            how->fit.channels = 3;
            how->rep->ruled |= 2;
        }
    }
    free(hs);
    free(ws);
    return rc;
}

/* part's figures added to rep. */
static void merge_report(vit_data_report *rep, const vit_data_report *part)
{
    if (part->gray + part->colour > 0) {
        int first = rep->gray + rep->colour == 0;
        rep->min_h = first || part->min_h < rep->min_h ? part->min_h : rep->min_h;
        rep->max_h = first || part->max_h > rep->max_h ? part->max_h : rep->max_h;
        rep->min_w = first || part->min_w < rep->min_w ? part->min_w : rep->min_w;
        rep->max_w = first || part->max_w > rep->max_w ? part->max_w : rep->max_w;
    }
    rep->gray += part->gray;
    rep->colour += part->colour;
    rep->resized += part->resized;
    rep->converted += part->converted;
    for (int s = 0; s < part->skipped && rep->skipped + s < VIT_DATA_REPORT_NAMES; s++)
        memcpy(rep->skipped_why[rep->skipped + s], part->skipped_why[s],
               sizeof rep->skipped_why[0]);
    rep->skipped += part->skipped;
}

/* A folder of class folders: strictly (how NULL) or tolerantly; the class
 * folder names become ds->class_names.  A tolerant read that meets mixed
 * images surveys the folder for the rule's shape and reads it again. */
static int load_dir(const char *dir, const vit_data_how *how, vit_dataset *ds)
{
    name_list classes = {NULL, 0}, *files = NULL;
    vit_data_report part;
    vit_data_how again;
    int total = 0, ignored = 0;
    int rc = list_classes(dir, &classes, &files, &total, &ignored);
    if (rc == VIT_OK)
        rc = read_images(dir, &classes, files, total, how, ds, &part);
    if (rc == MIXED) {
        vit_dataset_free(ds);
        again = *how;
        rc = survey(dir, &classes, files, total, &again);
        if (rc == VIT_OK)
            rc = read_images(dir, &classes, files, total, &again, ds, &part);
        if (rc == MIXED) /* cannot happen: every part of the fit is set */
            rc = vit_fail(VIT_EFORMAT, "%s: images differ in size or channels", dir);
    }
    if (rc == VIT_OK) {
        if (how != NULL) {
            merge_report(how->rep, &part);
            how->rep->ignored += ignored;
        }
        ds->class_names = classes.name; /* ds->classes == classes.n of them */
        for (int k = 0; k < classes.n; k++)
            names_free(&files[k]);
        free(files);
        return rc;
    }
    vit_dataset_free(ds);
    classes_free(&classes, files);
    return rc;
}

int vit_data_load_png_dir(const char *dir, vit_dataset *ds)
{
    static const char *fn = "vit_data_load_png_dir";
    int rc;
    if ((rc = vit_check_ptr(fn, "dir", dir)) || (rc = vit_check_ptr(fn, "ds", ds)))
        return rc;
    memset(ds, 0, sizeof *ds);
    return load_dir(dir, NULL, ds);
}

int vit_data_internal_png_dir(const char *dir, const vit_data_how *how, vit_dataset *ds)
{
    memset(ds, 0, sizeof *ds);
    return load_dir(dir, how, ds);
}

/* The train/ and test/ halves of a PNG data set: both must have the same
 * class folders (names, hence label meaning); strictly, the same image
 * size and channels too; tolerantly, the test half is fitted to the
 * training half's shape. */
int vit_data_internal_png_pair(const char *train_dir, const char *test_dir,
                               const vit_data_how *how, vit_dataset *train, vit_dataset *test)
{
    memset(train, 0, sizeof *train);
    memset(test, 0, sizeof *test);
    int rc = load_dir(train_dir, how, train);
    if (rc == VIT_OK && how != NULL) {
        vit_data_how te = *how;
        te.fit = (vit_data_fit){train->height, train->width, train->channels};
        rc = load_dir(test_dir, &te, test);
    } else if (rc == VIT_OK) {
        rc = load_dir(test_dir, NULL, test);
    }
    if (rc == VIT_OK && train->classes != test->classes)
        rc = vit_fail(VIT_EFORMAT, "%s: %d class folders, but %s has %d", test_dir, test->classes,
                      train_dir, train->classes);
    for (int k = 0; rc == VIT_OK && k < train->classes; k++)
        if (strcmp(train->class_names[k], test->class_names[k]) != 0)
            rc = vit_fail(VIT_EFORMAT, "%s: class folder %d is '%s', but in %s it is '%s'",
                          test_dir, k, test->class_names[k], train_dir, train->class_names[k]);
    if (rc == VIT_OK && (train->height != test->height || train->width != test->width ||
                         train->channels != test->channels))
        rc = vit_fail(VIT_EFORMAT, "%s: images are %s %dx%d, but those in %s are %s %dx%d",
                      test_dir, kind(test->channels), test->height, test->width, train_dir,
                      kind(train->channels), train->height, train->width);
    if (rc != VIT_OK) {
        vit_dataset_free(train);
        vit_dataset_free(test);
    }
    return rc;
}
