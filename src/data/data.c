/* Data sets: freeing, the helpers the loaders share (data_internal.h), and
 * vit_data_load, which picks a loader from its spec argument (and says what
 * it found when none fits), and the per-class counts.  The loaders
 * themselves live in data_digits.c, data_idx.c, data_cifar.c, data_png.c
 * and data_jpeg.c. */
#include "vit/data.h"
#include "data_internal.h"
#include "error.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

void vit_dataset_free(vit_dataset *ds)
{
    if (ds == NULL)
        return;
    free(ds->images);
    free(ds->labels);
    if (ds->class_names != NULL)
        for (int k = 0; k < ds->classes; k++)
            free(ds->class_names[k]);
    free(ds->class_names);
    memset(ds, 0, sizeof *ds);
}

int vit_data_internal_begin(const char *fn, const char *src_name, const void *src,
                            vit_dataset *train, vit_dataset *test)
{
    int rc;
    if ((rc = vit_check_ptr(fn, src_name, src)) || (rc = vit_check_ptr(fn, "train", train)) ||
        (rc = vit_check_ptr(fn, "test", test)))
        return rc;
    if (train == test)
        return vit_fail(VIT_EINVAL, "%s: train and test are the same struct", fn);
    memset(train, 0, sizeof *train);
    memset(test, 0, sizeof *test);
    return VIT_OK;
}

int vit_data_internal_alloc(vit_dataset *ds, int count, int height, int width,
                            int channels, const char *what)
{
    size_t n = 0;
    memset(ds, 0, sizeof *ds);
    if (!vit_mul_size(&n, (size_t)count, (size_t)height) ||
        !vit_mul_size(&n, n, (size_t)width) ||
        !vit_mul_size(&n, n, (size_t)channels) ||
        !vit_mul_size(&n, n, sizeof(vit_real)))
        return vit_fail(VIT_ENOMEM, "%s: %d images of %dx%dx%d are too large",
                        what, count, height, width, channels);
    ds->images = malloc(n > 0 ? n : 1);
    ds->labels = malloc((size_t)count * sizeof(int) + 1);
    if (ds->images == NULL || ds->labels == NULL) {
        vit_dataset_free(ds);
        return vit_fail(VIT_ENOMEM, "%s: out of memory for %d images of %dx%dx%d",
                        what, count, height, width, channels);
    }
    ds->count = count;
    ds->height = height;
    ds->width = width;
    ds->channels = channels;
    return VIT_OK;
}

char **vit_data_internal_numbers(int n)
{
    char **s = calloc(n > 0 ? (size_t)n : 1, sizeof *s);
    for (int k = 0; s != NULL && k < n; k++) {
        char num[16];
        snprintf(num, sizeof num, "%d", k);
        if ((s[k] = strdup(num)) == NULL) {
            for (int j = 0; j < k; j++)
                free(s[j]);
            free(s);
            s = NULL;
        }
    }
    return s;
}

int vit_data_internal_number_names(vit_dataset *ds, const char *what)
{
    if ((ds->class_names = vit_data_internal_numbers(ds->classes)) == NULL) {
        vit_dataset_free(ds);
        return vit_fail(VIT_ENOMEM, "%s: out of memory for %d class names", what, ds->classes);
    }
    return VIT_OK;
}

static int is_dir(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

char *vit_data_internal_join(const char *dir, const char *name, const char *suffix)
{
    size_t a = strlen(dir), b = strlen(name), c = strlen(suffix);
    char *s = malloc(a + b + c + 2);
    if (s != NULL) {
        memcpy(s, dir, a);
        s[a] = '/';
        memcpy(s + a + 1, name, b);
        memcpy(s + a + 1 + b, suffix, c + 1);
    }
    return s;
}

const char *vit_data_internal_zlib_message(gzFile g, const char *path, int *err)
{
    const char *msg = gzerror(g, err);
    size_t n = strlen(path);
    if (strncmp(msg, path, n) == 0 && msg[n] == ':' && msg[n + 1] == ' ')
        msg += n + 2;
    return msg;
}

/* Whether folder path has an entry whose name passes test(dir, name)
 * (dir: what the test needs beside the name); 0 when it cannot be
 * listed. */
static int any_entry(const char *path, int (*test)(const char *dir, const char *name),
                     const char *dir)
{
    DIR *d = opendir(path);
    struct dirent *e;
    int found = 0;
    if (d == NULL)
        return 0;
    while (!found && (e = readdir(d)) != NULL)
        found = test(dir, e->d_name);
    closedir(d);
    return found;
}

static int is_idx_name(const char *dir, const char *name)
{
    static const char *marks[4] = {"-idx3-ubyte", ".idx3-ubyte", "-idx4-ubyte", ".idx4-ubyte"};
    (void)dir;
    int found = 0;
    for (int i = 0; i < 4; i++)
        found |= strstr(name, marks[i]) != NULL;
    return found;
}

/* Whether the folder holds a file that looks like an IDX image file: then
 * the IDX loader runs and reports precisely whatever else is missing. */
static int has_idx_files(const char *dir)
{
    return any_entry(dir, is_idx_name, NULL);
}

/* Whether dir holds one of the CIFAR binary files (the loader then names
 * whichever others are missing). */
static int has_cifar_files(const char *dir)
{
    static const char *names[4] = {"data_batch_1.bin", "test_batch.bin", "train.bin", "test.bin"};
    int found = 0;
    for (int i = 0; i < 4 && !found; i++) {
        char *p = vit_data_internal_join(dir, names[i], "");
        struct stat st;
        found = p != NULL && stat(p, &st) == 0 && S_ISREG(st.st_mode);
        free(p);
    }
    return found;
}

static int is_image_file_name(const char *s)
{
    const char *dot = strrchr(s, '.');
    return dot != NULL && (strcasecmp(dot, ".png") == 0 || strcasecmp(dot, ".jpg") == 0 ||
                           strcasecmp(dot, ".jpeg") == 0);
}

static int is_visible_image(const char *dir, const char *name)
{
    (void)dir;
    return name[0] != '.' && is_image_file_name(name);
}

/* Whether the folder dir/name holds an image file (then it looks like a
 * class folder). */
static int holds_images(const char *dir, const char *name)
{
    char *sub = vit_data_internal_join(dir, name, "");
    int found = sub && any_entry(sub, is_visible_image, NULL);
    free(sub);
    return found;
}

/* What a folder of no known layout holds, in a few words for the message:
 * its subfolders (the first three named) and how many look like class
 * folders, and its files. */
static void describe_folder(const char *dir, char *out, size_t cap)
{
    DIR *d = opendir(dir);
    struct dirent *e;
    char names[160] = "";
    int subs = 0, files = 0, classy = 0, train = 0, test = 0;
    if (d == NULL) {
        snprintf(out, cap, "a folder that cannot be listed");
        return;
    }
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.')
            continue;
        char *p = vit_data_internal_join(dir, e->d_name, "");
        struct stat st;
        int sub = p != NULL && stat(p, &st) == 0 && S_ISDIR(st.st_mode);
        free(p);
        if (!sub) {
            files++;
            continue;
        }
        train |= strcmp(e->d_name, "train") == 0;
        test |= strcmp(e->d_name, "test") == 0;
        classy += holds_images(dir, e->d_name);
        if (subs++ < 3) {
            size_t n = strlen(names);
            snprintf(names + n, sizeof names - n, "%s%.40s", subs > 1 ? ", " : "", e->d_name);
        }
    }
    closedir(d);
    if (train != test)
        snprintf(out, cap, "%s/ but no %s/", train ? "train" : "test", train ? "test" : "train");
    else if (subs == 0 && files == 0)
        snprintf(out, cap, "an empty folder");
    else
        snprintf(out, cap, "%d subfolder%s%s%s%s%s, %d of them holding images, and %d other "
                 "file%s", subs, subs == 1 ? "" : "s", subs ? " (" : "", names,
                 subs > 3 ? ", ..." : "", subs ? ")" : "", classy, files, files == 1 ? "" : "s");
}

/* The VIT_EINVAL of a spec that is no data set, saying what it is. */
static int not_a_data_set(const char *spec, int is_folder)
{
    char found[400];
    if (is_folder)
        describe_folder(spec, found, sizeof found);
    else
        snprintf(found, sizeof found, "a file, not a folder");
    return vit_fail(VIT_EINVAL,
                    "%s: not a data set (expected digits, a folder of IDX files, a folder of "
                    "CIFAR-10/100 binary batches, or a folder of class folders of PNG or JPEG "
                    "images, with or without train/ and test/); found %s", spec, found);
}

/* Whether some subfolder of dir holds an image file (a folder of class
 * folders, when it has no train/ and test/). */
static int is_class_folder(const char *dir, const char *name)
{
    return name[0] != '.' && holds_images(dir, name);
}

static int has_class_folders(const char *dir)
{
    return any_entry(dir, is_class_folder, dir);
}

void vit_data_internal_note_shape(const vit_dataset *ds, vit_data_report *rep)
{
    if (ds->count <= 0)
        return;
    int first = rep->gray + rep->colour == 0;
    rep->min_h = first || ds->height < rep->min_h ? ds->height : rep->min_h;
    rep->max_h = first || ds->height > rep->max_h ? ds->height : rep->max_h;
    rep->min_w = first || ds->width < rep->min_w ? ds->width : rep->min_w;
    rep->max_w = first || ds->width > rep->max_w ? ds->width : rep->max_w;
    *(ds->channels == 1 ? &rep->gray : &rep->colour) += ds->count;
}

/* A set of one shape (digits, IDX, CIFAR) fitted as how asks. */
static int fit_loaded(int rc, const vit_data_how *how, vit_dataset *train, vit_dataset *test)
{
    if (rc != VIT_OK || how == NULL)
        return rc;
    vit_data_internal_note_shape(train, how->rep);
    vit_data_internal_note_shape(test, how->rep);
    if ((rc = vit_dataset_fit(train, &how->fit, how->rep)) == VIT_OK)
        rc = vit_dataset_fit(test, &how->fit, how->rep);
    if (rc != VIT_OK) {
        vit_dataset_free(train);
        vit_dataset_free(test);
    }
    return rc;
}

int vit_data_internal_load(const char *spec, const char *digits_path, const vit_data_how *how,
                           vit_dataset *train, vit_dataset *test, int *flat)
{
    static const char *fn = "vit_data_load";
    char *tr = NULL, *te = NULL;
    struct stat st;
    int rc;
    *flat = 0;
    if ((rc = vit_data_internal_begin(fn, "spec", spec, train, test)))
        return rc;

    if (strcmp(spec, "digits") == 0) {
        if ((rc = vit_check_ptr(fn, "digits_path", digits_path)))
            return rc;
        return fit_loaded(vit_data_load_digits(digits_path, 1437, train, test), how, train,
                          test);
    }
    if (stat(spec, &st) != 0)
        return errno == ENOENT ? vit_fail(VIT_EIO, "%s: no such file or folder", spec)
                               : vit_fail(VIT_EIO, "%s: cannot stat (%s)", spec, strerror(errno));
    if (!S_ISDIR(st.st_mode))
        return not_a_data_set(spec, 0);
    if (has_idx_files(spec))
        return fit_loaded(vit_data_load_idx(spec, train, test), how, train, test);
    if (has_cifar_files(spec))
        return fit_loaded(vit_data_load_cifar(spec, 0, train, test), how, train, test);
    tr = vit_data_internal_join(spec, "train", "");
    te = vit_data_internal_join(spec, "test", "");
    if (tr == NULL || te == NULL) {
        free(tr);
        free(te);
        return vit_fail(VIT_ENOMEM, "%s: out of memory", fn);
    }
    if (is_dir(tr) && is_dir(te)) {
        rc = vit_data_internal_png_pair(tr, te, how, train, test);
    } else if (!is_dir(tr) && !is_dir(te) && has_class_folders(spec)) {
        *flat = 1;
        rc = vit_data_internal_png_dir(spec, how, train);
    } else {
        rc = not_a_data_set(spec, 1);
    }
    free(tr);
    free(te);
    return rc;
}

int vit_data_load(const char *spec, const char *digits_path, vit_dataset *train,
                  vit_dataset *test)
{
    return vit_data_load_split(spec, digits_path, NULL, train, test, NULL, NULL);
}

int vit_dataset_class_counts(const vit_dataset *ds, int *counts)
{
    static const char *fn = "vit_dataset_class_counts";
    int rc;
    if ((rc = vit_check_ptr(fn, "ds", ds)) || (rc = vit_check_ptr(fn, "counts", counts)))
        return rc;
    if (ds->classes < 1)
        return vit_fail(VIT_EINVAL, "%s: classes = %d, expected at least 1", fn, ds->classes);
    if (ds->count > 0 && ds->labels == NULL)
        return vit_fail(VIT_EINVAL, "%s: %d images but no labels", fn, ds->count);
    memset(counts, 0, (size_t)ds->classes * sizeof *counts);
    for (int i = 0; i < ds->count; i++) {
        if (ds->labels[i] < 0 || ds->labels[i] >= ds->classes)
            return vit_fail(VIT_EINVAL, "%s: image %d has label %d, expected 0..%d", fn, i,
                            ds->labels[i], ds->classes - 1);
        counts[ds->labels[i]]++;
    }
    return VIT_OK;
}
