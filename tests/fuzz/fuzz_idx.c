/*
 * Fuzz harness: the MNIST IDX reader (vit_data_load_idx).
 *
 * The loader reads four files from a folder, so the input is split:
 *   byte 0         flags: bit 0 use names found by the glob patterns
 *                  ("x-train-images-idx3-ubyte.bin", ...) instead of the
 *                  exact ones; bit 1 (with bit 0) add a second file that
 *                  also matches the train-images pattern; bit 2 leave the
 *                  test labels file out
 *   bytes 1..6     three little-endian u16 lengths: train images, train
 *                  labels, test images (clipped to what is there)
 *   the rest       those three files in order, then the test labels file
 * Each file may be raw IDX or gzip.  Checked besides memory safety: a
 * failure zeroes both sets and leaves a message; a success never holds
 * more pixels than the input had bytes, and has the documented ranges.
 */
#include "fuzz_util.h"
#include "vit/data.h"

static int is_zeroed(const vit_dataset *ds)
{
    return ds->count == 0 && ds->images == NULL && ds->labels == NULL && ds->classes == 0;
}

static void check_set(const vit_dataset *ds, size_t input_size)
{
    FUZZ_CHECK(ds->count >= 1 && ds->height >= 1 && ds->width >= 1 && ds->channels == 1);
    FUZZ_CHECK(ds->classes >= 2 && ds->classes <= 256);
    size_t n = (size_t)ds->count * (size_t)ds->height * (size_t)ds->width;
    FUZZ_CHECK(n <= input_size * 1100); /* gzip expands by at most ~1032 */
    for (int i = 0; i < ds->count; i++)
        FUZZ_CHECK(ds->labels[i] >= 0 && ds->labels[i] < ds->classes);
    for (size_t i = 0; i < n; i++)
        FUZZ_CHECK(ds->images[i] >= 0 && ds->images[i] <= 1);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const char *exact[4] = {"train-images-idx3-ubyte", "train-labels-idx1-ubyte",
                                   "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"};
    static const char *globbed[4] = {"x-train-images-idx3-ubyte.bin",
                                     "x-train-labels-idx1-ubyte.bin",
                                     "x-test-images-idx3-ubyte.bin", "x-test-labels-idx1-ubyte.bin"};
    char dir[512], path[1024];
    int flags = size > 0 ? data[0] : 0;
    size_t len[4], pos = 7 < size ? 7 : size;
    for (int i = 0; i < 3; i++) {
        size_t want = 1 + 2 * (size_t)i + 1 < size ? fuzz_le16(data + 1 + 2 * i) : 0;
        len[i] = want < size - pos ? want : size - pos;
        pos += len[i];
    }
    len[3] = size - pos;

    fuzz_path(dir, sizeof dir, "idx");
    fuzz_remove_tree(dir);
    fuzz_mkdir("idx");
    pos = 7 < size ? 7 : size;
    for (int i = 0; i < 4; i++) {
        if (!(i == 3 && (flags & 4))) {
            if (snprintf(path, sizeof path, "%s/%s", dir, (flags & 1) ? globbed[i] : exact[i]) >=
                (int)sizeof path)
                abort();
            fuzz_write_file(path, data + pos, len[i]);
        }
        pos += len[i];
    }
    if ((flags & 3) == 3) {
        if (snprintf(path, sizeof path, "%s/y-train-images-idx3-ubyte", dir) >= (int)sizeof path)
            abort();
        fuzz_write_file(path, data, 0);
    }

    vit_dataset train, test;
    int rc = vit_data_load_idx(dir, &train, &test);
    if (rc != VIT_OK) {
        FUZZ_CHECK_FAILURE(rc);
        FUZZ_CHECK(is_zeroed(&train) && is_zeroed(&test));
        return 0;
    }
    check_set(&train, size);
    check_set(&test, size);
    FUZZ_CHECK(train.height == test.height && train.width == test.width);
    FUZZ_CHECK(train.classes == test.classes);
    vit_dataset_free(&train);
    vit_dataset_free(&test);
    return 0;
}
