/*
 * What a run trains on: the data record of its checkpoints (how to load
 * the data again, and a fingerprint that tells another data set from it).
 * The record is text, "key = value" lines like the config's.
 */
#include "vit/train.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "error.h"
#include "run_internal.h"
#include "vit/checkpoint.h"

static unsigned long long fnv_byte(unsigned long long h, unsigned char b)
{
    return (h ^ b) * 1099511628211ull;
}

static unsigned long long fnv_labels(unsigned long long h, const vit_dataset *ds)
{
    for (int i = 0; i < ds->count; i++)
        for (int k = 0; k < 4; k++)
            h = fnv_byte(h, (unsigned char)((unsigned)ds->labels[i] >> (8 * k)));
    return h;
}

/* Up to 64 images spread evenly over ds, each pixel as a byte: round(255
 * x), which pixels stored as k/255 or k/16 give alike in float32 and
 * float64. */
static unsigned long long fnv_pixels(unsigned long long h, const vit_dataset *ds)
{
    size_t img = (size_t)ds->height * ds->width * ds->channels;
    int n = ds->count < 64 ? ds->count : 64;
    for (int s = 0; s < n; s++) {
        const vit_real *p = ds->images + (size_t)((long long)s * ds->count / n) * img;
        for (size_t j = 0; j < img; j++) {
            double x = (double)p[j];
            x = x < 0 ? 0 : x > 1 ? 1 : x;
            h = fnv_byte(h, (unsigned char)lrint(255 * x));
        }
    }
    return h;
}

int vit_run_data_of(const vit_dataset *train, const vit_dataset *test, const char *spec,
                    vit_run_data *out)
{
    if (!out)
        return vit_fail(VIT_EINVAL, "vit_run_data_of: out is NULL");
    memset(out, 0, sizeof *out);
    const vit_dataset *sets[2] = {train, test};
    for (int k = 0; k < 2; k++)
        if (!sets[k] || sets[k]->count <= 0 || !sets[k]->images || !sets[k]->labels)
            return vit_fail(VIT_EINVAL, "vit_run_data_of: the %s set is empty",
                            k ? "test" : "training");
    if (spec && strlen(spec) < sizeof out->spec && !strchr(spec, '\n'))
        snprintf(out->spec, sizeof out->spec, "%s", spec);
    out->train_count = train->count;
    out->test_count = test->count;
    out->height = train->height;
    out->width = train->width;
    out->channels = train->channels;
    out->classes = train->classes > test->classes ? train->classes : test->classes;
    unsigned long long h = 1469598103934665603ull;
    out->labels_hash = fnv_labels(fnv_labels(h, train), test);
    out->pixels_hash = fnv_pixels(fnv_pixels(h, train), test);
    return VIT_OK;
}

int vit_run_data_same(const vit_run_data *a, const vit_run_data *b)
{
    return a && b && a->train_count == b->train_count && a->test_count == b->test_count
           && a->height == b->height && a->width == b->width && a->channels == b->channels
           && a->classes == b->classes && a->labels_hash == b->labels_hash
           && a->pixels_hash == b->pixels_hash;
}

vit_data_fit vit_run_data_fit(const vit_run_data *rec, int known)
{
    vit_data_fit none = {0, 0, 0};
    if (!rec || !known)
        return none;
    return (vit_data_fit){rec->height, rec->width, rec->channels};
}

const char *vit_run_data_describe(const vit_run_data *d, char *buf, size_t cap)
{
    if (!buf || cap == 0)
        return buf;
    snprintf(buf, cap, "%d train + %d test images of %dx%dx%d, %d classes (labels %016llx, "
             "pixels %016llx)", d->train_count, d->test_count, d->height, d->width, d->channels,
             d->classes, d->labels_hash, d->pixels_hash);
    return buf;
}

int vit_run_data_format(const vit_run_data *d, char *buf, size_t cap)
{
    int n = snprintf(buf, cap, "spec = %s\ntrain_count = %d\ntest_count = %d\nheight = %d\n"
                     "width = %d\nchannels = %d\nclasses = %d\nlabels_hash = %016llx\n"
                     "pixels_hash = %016llx\n", d->spec, d->train_count, d->test_count,
                     d->height, d->width, d->channels, d->classes, d->labels_hash,
                     d->pixels_hash);
    /* Written only with a split, so that a record without one reads the
     * same as before splits were recorded. */
    if (n >= 0 && (size_t)n < cap && (d->split.val > 0 || d->split.test > 0))
        n += snprintf(buf + n, cap - (size_t)n, "val_split = %.17g\ntest_split = %.17g\n"
                      "split_seed = %llu\n", d->split.val, d->split.test, d->split.seed);
    /* Likewise only for a run started from trained weights. */
    if (n >= 0 && (size_t)n < cap && d->init_from[0])
        n += snprintf(buf + n, cap - (size_t)n, "init_from = %s\ninit_hash = %016llx\n",
                      d->init_from, d->init_hash);
    /* Likewise only with a transform. */
    if (n >= 0 && (size_t)n < cap && (d->fit.height > 0 || d->fit.channels > 0))
        n += snprintf(buf + n, cap - (size_t)n, "fit = %dx%dx%d\n", d->fit.height, d->fit.width,
                      d->fit.channels);
    /* Likewise only with a validation tail. */
    if (n >= 0 && (size_t)n < cap && d->val_count > 0)
        n += snprintf(buf + n, cap - (size_t)n, "val_count = %d\n", d->val_count);
    if (n < 0 || (size_t)n >= cap)
        return vit_fail(VIT_EINVAL, "vit_run_save: the data record does not fit %zu bytes", cap);
    return VIT_OK;
}

/* "HxWxC" (0 for a part kept) into *fit; 0 when it is not that. */
static int parse_fit(const char *v, vit_data_fit *fit)
{
    long x[3];
    const char *p = v;
    for (int k = 0; k < 3; k++) {
        char *end;
        if (*p < '0' || *p > '9')
            return 0;
        x[k] = strtol(p, &end, 10);
        if (x[k] > 4096 || *end != (k < 2 ? 'x' : 0))
            return 0;
        p = end + 1;
    }
    *fit = (vit_data_fit){(int)x[0], (int)x[1], (int)x[2]};
    return (x[0] == 0) == (x[1] == 0) && (x[2] == 0 || x[2] == 1 || x[2] == 3);
}

/* One "key = value" line of the record into *d; 0 when it is not one. */
static int parse_line(const char *line, vit_run_data *d)
{
    static const char *const ints[7] = {"train_count", "test_count", "height", "width",
                                        "channels", "classes", "val_count"};
    int *slots[7] = {&d->train_count, &d->test_count, &d->height, &d->width, &d->channels,
                     &d->classes, &d->val_count};
    const char *eq = strstr(line, " = ");
    if (!eq)
        return 0;
    size_t klen = (size_t)(eq - line);
    const char *v = eq + 3;
    if (klen == 4 && strncmp(line, "spec", 4) == 0) {
        snprintf(d->spec, sizeof d->spec, "%s", v);
        return 1;
    }
    if (klen == 9 && strncmp(line, "init_from", 9) == 0) {
        snprintf(d->init_from, sizeof d->init_from, "%s", v);
        return 1;
    }
    char *end;
    double *frac = klen == 9 && strncmp(line, "val_split", 9) == 0    ? &d->split.val
                   : klen == 10 && strncmp(line, "test_split", 10) == 0 ? &d->split.test
                                                                        : NULL;
    if (frac) {
        *frac = strtod(v, &end);
        return *end == 0 && end != v && *frac >= 0 && *frac < 1;
    }
    if (klen == 3 && strncmp(line, "fit", 3) == 0)
        return parse_fit(v, &d->fit);
    if (klen == 10 && strncmp(line, "split_seed", 10) == 0) {
        d->split.seed = strtoull(v, &end, 10);
        return *end == 0 && end != v && *v != '-';
    }
    for (int k = 0; k < 7; k++)
        if (strlen(ints[k]) == klen && strncmp(line, ints[k], klen) == 0) {
            long x = strtol(v, &end, 10);
            if (*end || end == v || x < 0 || x > 1 << 30)
                return 0;
            *slots[k] = (int)x;
            return 1;
        }
    unsigned long long *hash = klen == 11 && strncmp(line, "labels_hash", 11) == 0 ? &d->labels_hash
                               : klen == 11 && strncmp(line, "pixels_hash", 11) == 0
                                   ? &d->pixels_hash
                               : klen == 9 && strncmp(line, "init_hash", 9) == 0 ? &d->init_hash
                                   : NULL;
    if (!hash)
        return 1; /* a key of a later version: skipped */
    *hash = strtoull(v, &end, 16);
    return *end == 0 && end != v;
}

int vit_run_data_parse(const char *text, const char *path, vit_run_data *d)
{
    memset(d, 0, sizeof *d);
    char line[VIT_RUN_DATA_SPEC_MAX + 32];
    for (const char *p = text; *p;) {
        size_t len = strcspn(p, "\n");
        if (len >= sizeof line)
            return vit_fail(VIT_EFORMAT, "%s: data record line of %zu bytes", path, len);
        memcpy(line, p, len);
        line[len] = 0;
        if (!parse_line(line, d))
            return vit_fail(VIT_EFORMAT, "%s: data record line '%s' does not parse", path, line);
        p += len + (p[len] == '\n');
    }
    if (d->train_count <= 0 || d->test_count <= 0 || d->height <= 0 || d->width <= 0
        || d->channels <= 0 || d->classes <= 0)
        return vit_fail(VIT_EFORMAT, "%s: the data record lacks counts or the image shape", path);
    if (d->val_count >= d->train_count)
        return vit_fail(VIT_EFORMAT, "%s: the data record holds out %d validation images of %d "
                        "training images", path, d->val_count, d->train_count);
    if (!(d->split.val + d->split.test < 1))
        return vit_fail(VIT_EFORMAT, "%s: the data record's split fractions %g and %g sum to 1 "
                        "or more", path, d->split.val, d->split.test);
    return VIT_OK;
}

int vit_run_data_read(const char *path, vit_run_data *out, int *known)
{
    if (!path || !out || !known)
        return vit_fail(VIT_EINVAL, "vit_run_data_read: NULL argument");
    memset(out, 0, sizeof *out);
    *known = 0;
    vit_ckpt c;
    int rc = vit_ckpt_read_header(path, &c);
    if (rc)
        return rc;
    if (c.data && *c.data && (rc = vit_run_data_parse(c.data, path, out)) == VIT_OK)
        *known = 1;
    vit_ckpt_free(&c);
    return rc;
}
