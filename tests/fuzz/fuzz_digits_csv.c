/*
 * Fuzz harness: the digits CSV reader (vit_data_load_digits).
 *
 * The input is the file itself, plain text or gzip (zlib reads both); it
 * is written to a scratch file.  The number of training lines is 1..3,
 * taken from the input length, so short files also reach the split.
 * Checked besides memory safety: a failure zeroes both sets and leaves a
 * message; a success gives exactly the documented shapes and ranges.
 */
#include "fuzz_util.h"
#include "vit/data.h"

static int is_zeroed(const vit_dataset *ds)
{
    return ds->count == 0 && ds->images == NULL && ds->labels == NULL && ds->height == 0 &&
           ds->width == 0 && ds->channels == 0 && ds->classes == 0;
}

static void check_set(const vit_dataset *ds)
{
    FUZZ_CHECK(ds->height == 8 && ds->width == 8 && ds->channels == 1 && ds->classes == 10);
    FUZZ_CHECK(ds->images != NULL && ds->labels != NULL && ds->count >= 1);
    for (int i = 0; i < ds->count; i++)
        FUZZ_CHECK(ds->labels[i] >= 0 && ds->labels[i] < 10);
    for (size_t i = 0; i < (size_t)ds->count * 64; i++) {
        vit_real v = ds->images[i] * 16;
        FUZZ_CHECK(v >= 0 && v <= 16 && v == (vit_real)(int)v);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char path[512];
    vit_dataset train, test;
    int n_train = 1 + (int)(size % 3);
    fuzz_write_file(fuzz_path(path, sizeof path, "digits.csv"), data, size);
    int rc = vit_data_load_digits(path, n_train, &train, &test);
    if (rc != VIT_OK) {
        FUZZ_CHECK_FAILURE(rc);
        FUZZ_CHECK(is_zeroed(&train) && is_zeroed(&test));
        return 0;
    }
    check_set(&train);
    check_set(&test);
    FUZZ_CHECK(train.count == n_train);
    vit_dataset_free(&train);
    vit_dataset_free(&test);
    return 0;
}
