/* Data sets: freeing, the helpers the loaders share (data_internal.h), and
 * vit_data_load, which picks a loader from its spec argument.  The loaders
 * themselves live in data_digits.c, data_idx.c and data_png.c. */
#include "vit/data.h"
#include "data_internal.h"
#include "error.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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

/* Whether the folder holds a file that looks like an IDX image file: then
 * the IDX loader runs and reports precisely whatever else is missing. */
static int has_idx_files(const char *dir)
{
    DIR *d = opendir(dir);
    struct dirent *e;
    int found = 0;
    if (d == NULL)
        return 0;
    while (!found && (e = readdir(d)) != NULL)
        found = strstr(e->d_name, "-idx3-ubyte") != NULL ||
                strstr(e->d_name, ".idx3-ubyte") != NULL;
    closedir(d);
    return found;
}

int vit_data_load(const char *spec, const char *digits_path, vit_dataset *train,
                  vit_dataset *test)
{
    static const char *fn = "vit_data_load";
    char *tr = NULL, *te = NULL;
    int rc;
    if ((rc = vit_data_internal_begin(fn, "spec", spec, train, test)))
        return rc;

    if (strcmp(spec, "digits") == 0) {
        if ((rc = vit_check_ptr(fn, "digits_path", digits_path)))
            return rc;
        return vit_data_load_digits(digits_path, 1437, train, test);
    }
    if (is_dir(spec) && has_idx_files(spec))
        return vit_data_load_idx(spec, train, test);
    if (is_dir(spec)) {
        tr = vit_data_internal_join(spec, "train", "");
        te = vit_data_internal_join(spec, "test", "");
        if (tr == NULL || te == NULL) {
            free(tr);
            free(te);
            return vit_fail(VIT_ENOMEM, "%s: out of memory", fn);
        }
        if (is_dir(tr) && is_dir(te)) {
            rc = vit_data_internal_png_pair(tr, te, train, test);
            free(tr);
            free(te);
            return rc;
        }
        free(tr);
        free(te);
    }
    return vit_fail(VIT_EINVAL,
                    "%s: not a data set (expected digits, a folder of IDX files, "
                    "or a folder with train/ and test/ class folders)", spec);
}
