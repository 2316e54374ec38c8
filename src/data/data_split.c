/* Splitting a data set into training, validation and test parts, class by
 * class with the same fractions and a seed (vit_dataset_split), and
 * vit_data_load_split, which loads a spec and splits it as asked (a folder
 * of class folders without train/ and test/ gets its test set this way). */
#include "vit/data.h"
#include "vit/rng.h"
#include "data_internal.h"
#include "error.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* The fractions of split: each finite and in [0, 1), their sum below 1. */
static int check_fractions(const char *fn, const vit_data_split *s)
{
    if (!(s->val >= 0 && s->val < 1) || !(s->test >= 0 && s->test < 1) ||
        !(s->val + s->test < 1))
        return vit_fail(VIT_EINVAL, "%s: validation fraction %g and test fraction %g: each must "
                        "be in [0, 1) and their sum below 1", fn, s->val, s->test);
    return VIT_OK;
}

/* How many of a class's n images go to validation (*v) and test (*t): the
 * rounded fractions, at least one per positive fraction when the class has
 * enough images, and never all of them (vit_dataset_split's rule). */
static void class_quota(int n, const vit_data_split *s, int *v, int *t)
{
    int parts = (s->val > 0) + (s->test > 0);
    *t = (int)floor(s->test * n + 0.5);
    *v = (int)floor(s->val * n + 0.5);
    if (n >= 1 + parts) {
        *t = s->test > 0 && *t < 1 ? 1 : *t;
        *v = s->val > 0 && *v < 1 ? 1 : *v;
    }
    while (*t + *v > n - 1 && *t + *v > 0) {
        if (*v >= *t)
            (*v)--;
        else
            (*t)--;
    }
}

/* A copy of the class names of ds (NULL for none); 0 when out of memory. */
static int copy_names(const vit_dataset *ds, vit_dataset *out)
{
    if (ds->class_names == NULL)
        return 1;
    out->class_names = calloc((size_t)ds->classes, sizeof *out->class_names);
    for (int k = 0; out->class_names != NULL && k < ds->classes; k++)
        if ((out->class_names[k] = strdup(ds->class_names[k])) == NULL)
            return 0;
    return out->class_names != NULL;
}

/* The images of ds whose part[i] is one of want[0..nwant), those of
 * want[0] first, each group in ds order, into the new set out. */
static int gather(const vit_dataset *ds, const signed char *part, const int *want, int nwant,
                  vit_dataset *out, const char *fn)
{
    int n = 0;
    for (int i = 0; i < ds->count; i++)
        for (int w = 0; w < nwant; w++)
            n += part[i] == want[w];
    int rc = vit_data_internal_alloc(out, n, ds->height, ds->width, ds->channels, fn);
    if (rc)
        return rc;
    out->classes = ds->classes;
    if (!copy_names(ds, out)) {
        vit_dataset_free(out);
        return vit_fail(VIT_ENOMEM, "%s: out of memory for class names", fn);
    }
    size_t img = (size_t)ds->height * (size_t)ds->width * (size_t)ds->channels, at = 0;
    for (int w = 0; w < nwant; w++)
        for (int i = 0; i < ds->count; i++)
            if (part[i] == want[w]) {
                memcpy(out->images + at * img, ds->images + (size_t)i * img, img * sizeof(vit_real));
                out->labels[at++] = ds->labels[i];
            }
    return VIT_OK;
}

/* part[i] of each image of ds: 0 train, 1 validation, 2 test.  idx holds
 * the classes' image indices one class after the other (each in ds
 * order), start[k] where class k's begin. */
static int assign_parts(const vit_dataset *ds, const vit_data_split *s, signed char *part,
                        const char *fn)
{
    int *start = calloc((size_t)ds->classes + 1, sizeof *start);
    int *idx = malloc((size_t)ds->count * sizeof *idx);
    int rc = start && idx ? vit_dataset_class_counts(ds, start + 1)
                          : vit_fail(VIT_ENOMEM, "%s: out of memory for %d images", fn, ds->count);
    vit_rng rng;
    vit_rng_seed(&rng, s->seed);
    for (int k = 0; rc == VIT_OK && k < ds->classes; k++)
        start[k + 1] += start[k];
    for (int i = 0, *at = NULL; rc == VIT_OK && i < ds->count; i++) {
        at = &start[ds->labels[i]]; /* class k's next free place, moved on */
        idx[(*at)++] = i;
    }
    /* start[k] is now where class k ends: class k is idx[end(k-1) .. end(k)). */
    for (int k = 0, from = 0; rc == VIT_OK && k < ds->classes; from = start[k++]) {
        int n = start[k] - from, v, t;
        vit_rng_shuffle(&rng, idx + from, n);
        class_quota(n, s, &v, &t);
        for (int j = 0; j < n; j++)
            part[idx[from + j]] = (signed char)(j < t ? 2 : j < t + v ? 1 : 0);
    }
    free(start);
    free(idx);
    return rc;
}

/* The parts of ds as the caller wants them: out[g] gets the images of the
 * parts groups[g] lists (ngroup[g] of them, in that order). */
static int split_into(const char *fn, const vit_dataset *ds, const vit_data_split *s,
                      const int groups[][2], const int *ngroup, vit_dataset **out, int nout)
{
    int rc = VIT_OK;
    signed char *part = malloc((size_t)ds->count + 1);
    if (part == NULL)
        rc = vit_fail(VIT_ENOMEM, "%s: out of memory for %d images", fn, ds->count);
    if (rc == VIT_OK)
        rc = assign_parts(ds, s, part, fn);
    for (int g = 0; rc == VIT_OK && g < nout; g++)
        rc = gather(ds, part, groups[g], ngroup[g], out[g], fn);
    free(part);
    if (rc)
        for (int g = 0; g < nout; g++)
            vit_dataset_free(out[g]);
    return rc;
}

int vit_dataset_split(const vit_dataset *ds, const vit_data_split *split, vit_dataset *train,
                      vit_dataset *val, vit_dataset *test)
{
    static const char *fn = "vit_dataset_split";
    int rc;
    if ((rc = vit_check_ptr(fn, "ds", ds)) || (rc = vit_check_ptr(fn, "split", split)) ||
        (rc = vit_check_ptr(fn, "train", train)) || (rc = vit_check_ptr(fn, "val", val)) ||
        (rc = vit_check_ptr(fn, "test", test)))
        return rc;
    if (train == val || train == test || val == test)
        return vit_fail(VIT_EINVAL, "%s: train, val and test must be three structs", fn);
    memset(train, 0, sizeof *train);
    memset(val, 0, sizeof *val);
    memset(test, 0, sizeof *test);
    if ((rc = check_fractions(fn, split)))
        return rc;
    if (ds->count < 1 || ds->images == NULL || ds->labels == NULL || ds->classes < 1 ||
        ds->height < 1 || ds->width < 1 || ds->channels < 1)
        return vit_fail(VIT_EINVAL, "%s: the data set holds no images (count %d, classes %d)", fn,
                        ds->count, ds->classes);
    static const int groups[3][2] = {{0, 0}, {1, 0}, {2, 0}};
    static const int ngroup[3] = {1, 1, 1};
    vit_dataset *out[3] = {train, val, test};
    return split_into(fn, ds, split, groups, ngroup, out, 3);
}

/* all split into *train (its training part, then its validation tail) and,
 * when test is not NULL, *test; all is freed.  The tail's size (the
 * classes' validation quotas) into *val_count. */
static int split_loaded(const char *spec, vit_dataset *all, const vit_data_split *s,
                        vit_dataset *train, vit_dataset *test, int *val_count)
{
    static const int groups[2][2] = {{0, 1}, {2, 0}};
    static const int ngroup[2] = {2, 1};
    vit_dataset *out[2] = {train, test};
    int rc = split_into(spec, all, s, groups, ngroup, out, test ? 2 : 1);
    int *counts = rc ? NULL : calloc((size_t)all->classes, sizeof *counts);
    if (rc == VIT_OK && (counts == NULL || vit_dataset_class_counts(all, counts))) {
        vit_dataset_free(train);
        if (test)
            vit_dataset_free(test);
        rc = vit_fail(VIT_ENOMEM, "%s: out of memory", spec);
    }
    *val_count = 0;
    for (int k = 0; rc == VIT_OK && k < all->classes; k++) {
        int v, t;
        class_quota(counts[k], s, &v, &t);
        *val_count += v;
    }
    free(counts);
    vit_dataset_free(all);
    return rc;
}

/* vit_data_load_split, strictly (how NULL) or as vit_data_load_opts. */
static int load_split(const char *spec, const char *digits_path, const vit_data_split *split,
                      const vit_data_how *how, vit_dataset *train, vit_dataset *test,
                      vit_data_split *used, int *val_count)
{
    vit_data_split s = {0, 0, 0};
    int flat = 0, tail = 0, rc;
    if (split != NULL)
        s = *split;
    if (used != NULL)
        memset(used, 0, sizeof *used);
    if (val_count != NULL)
        *val_count = 0;
    if ((rc = check_fractions(spec ? spec : "vit_data_load_split", &s)))
        return rc;
    if ((rc = vit_data_internal_load(spec, digits_path, how, train, test, &flat)))
        return rc;
    if (!flat && s.test > 0) {
        vit_dataset_free(train);
        vit_dataset_free(test);
        return vit_fail(VIT_EINVAL, "%s: holds its own test set; a test fraction applies only to "
                        "a folder of class folders without train/ and test/", spec);
    }
    if (flat && s.test == 0)
        s.test = VIT_DATA_TEST_FRACTION;
    if (flat || s.val > 0) {
        vit_dataset all = *train;
        memset(train, 0, sizeof *train);
        rc = split_loaded(spec, &all, &s, train, flat ? test : NULL, &tail);
    }
    if (rc == VIT_OK && test->count == 0) {
        vit_dataset_free(train);
        vit_dataset_free(test);
        rc = vit_fail(VIT_EINVAL, "%s: a test fraction of %g leaves no test images (too few "
                      "images per class)", spec, s.test);
    }
    if (rc)
        return rc;
    if (used != NULL && (flat || s.val > 0))
        *used = s;
    if (val_count != NULL)
        *val_count = tail;
    return VIT_OK;
}

int vit_data_load_split(const char *spec, const char *digits_path, const vit_data_split *split,
                        vit_dataset *train, vit_dataset *test, vit_data_split *used,
                        int *val_count)
{
    return load_split(spec, digits_path, split, NULL, train, test, used, val_count);
}

int vit_data_load_opts(const char *spec, const char *digits_path, const vit_data_opts *opts,
                       vit_dataset *train, vit_dataset *test, int *val_count,
                       vit_data_report *report)
{
    static const char *fn = "vit_data_load_opts";
    vit_data_opts o;
    vit_data_report rep;
    int rc;
    memset(&o, 0, sizeof o);
    memset(&rep, 0, sizeof rep);
    if (opts != NULL)
        o = *opts;
    if (report != NULL)
        memset(report, 0, sizeof *report);
    if (val_count != NULL)
        *val_count = 0;
    if ((rc = vit_data_internal_check_fit(fn, &o.fit)))
        return rc;
    vit_data_how how = {o.fit, o.skip_bad, &rep};
    if ((rc = load_split(spec, digits_path, &o.split, &how, train, test, &rep.split, val_count))) {
        if (report != NULL)
            report->unreadable = rep.unreadable;
        return rc;
    }
    rep.fit = (vit_data_fit){train->height, train->width, train->channels};
    if (report != NULL)
        *report = rep;
    return VIT_OK;
}
