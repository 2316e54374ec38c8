/* Data sets: freeing, the shared allocator, and vit_data_load, which picks a
 * loader from the --data argument of vit_train.  The loaders themselves live
 * in data_digits.c, data_idx.c and data_png.c. */
#include "vit/data.h"
#include "error.h"

#include <dirent.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* Internal to the data_*.c files (no private header on purpose: two small
 * functions).  The allocator is defined here, the PNG pair in data_png.c. */
int vit_data_internal_alloc(vit_dataset *ds, int count, int height, int width,
                            int channels, const char *what);
int vit_data_internal_png_pair(const char *train_dir, const char *test_dir,
                               vit_dataset *train, vit_dataset *test);

void vit_dataset_free(vit_dataset *ds)
{
    if (ds == NULL)
        return;
    free(ds->images);
    free(ds->labels);
    memset(ds, 0, sizeof *ds);
}

/* Allocates images [count, H, W, C] and labels [count] of a zeroed ds and
 * fills in the sizes (classes is left to the caller).  The size products are
 * checked for overflow first.  what names the source in the error message. */
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

static int is_dir(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

/* path + "/" + name in a malloc'd string, or NULL when out of memory. */
static char *join(const char *path, const char *name)
{
    size_t a = strlen(path), b = strlen(name);
    char *s = malloc(a + b + 2);
    if (s != NULL) {
        memcpy(s, path, a);
        s[a] = '/';
        memcpy(s + a + 1, name, b + 1);
    }
    return s;
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
    if ((rc = vit_check_ptr(fn, "spec", spec)) || (rc = vit_check_ptr(fn, "train", train)) ||
        (rc = vit_check_ptr(fn, "test", test)))
        return rc;
    if (train == test)
        return vit_fail(VIT_EINVAL, "%s: train and test are the same struct", fn);
    memset(train, 0, sizeof *train);
    memset(test, 0, sizeof *test);

    if (strcmp(spec, "digits") == 0) {
        if ((rc = vit_check_ptr(fn, "digits_path", digits_path)))
            return rc;
        return vit_data_load_digits(digits_path, 1437, train, test);
    }
    if (is_dir(spec) && has_idx_files(spec))
        return vit_data_load_idx(spec, train, test);
    if (is_dir(spec)) {
        tr = join(spec, "train");
        te = join(spec, "test");
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
