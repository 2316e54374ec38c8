/*
 * Fuzz harness: the PNG reader, one file (vit_png_read) and class folders
 * (vit_data_load_png_dir).
 *
 * The input is one PNG file.  It is read on its own, then as the only
 * image of class "a" in a folder whose class "b" holds a fixed valid 2x2
 * grayscale PNG (plus a hidden file and a non-PNG file, which the loader
 * must skip), so the size and channel comparison between images runs too.
 * Checked besides memory safety: failures leave the outputs empty and a
 * message; successes have sizes >= 1, 1 or 3 channels and pixels in
 * [0, 1], and the folder load agrees with the single-file read.
 */
#include "fuzz_util.h"
#include "vit/data.h"

static void setup_folder(void)
{
    static int done;
    static const unsigned char px[4] = {0, 85, 170, 255};
    char p[512];
    if (done)
        return;
    fuzz_mkdir("png");
    fuzz_mkdir("png/a");
    fuzz_mkdir("png/b");
    FUZZ_CHECK(vit_png_write(fuzz_path(p, sizeof p, "png/b/1.png"), px, 2, 2, 1) == VIT_OK);
    fuzz_write_file(fuzz_path(p, sizeof p, "png/b/.hidden.png"), px, 1);
    fuzz_write_file(fuzz_path(p, sizeof p, "png/b/notes.txt"), px, 1);
    done = 1;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char path[512], dir[512];
    vit_real *px = NULL;
    int h = -1, w = -1, c = -1;
    setup_folder();
    fuzz_write_file(fuzz_path(path, sizeof path, "png/a/1.png"), data, size);

    int rc = vit_png_read(path, &px, &h, &w, &c);
    if (rc != VIT_OK) {
        FUZZ_CHECK_FAILURE(rc);
        FUZZ_CHECK(px == NULL && h == 0 && w == 0 && c == 0);
    } else {
        FUZZ_CHECK(px != NULL && h >= 1 && w >= 1 && (c == 1 || c == 3));
        for (size_t i = 0; i < (size_t)h * (size_t)w * (size_t)c; i++)
            FUZZ_CHECK(px[i] >= 0 && px[i] <= 1);
    }

    vit_dataset ds;
    int rc2 = vit_data_load_png_dir(fuzz_path(dir, sizeof dir, "png"), &ds);
    if (rc2 != VIT_OK) {
        FUZZ_CHECK_FAILURE(rc2);
        FUZZ_CHECK(ds.count == 0 && ds.images == NULL && ds.labels == NULL);
        /* Only a bad image or one that differs from the 2x2 gray one fails. */
        FUZZ_CHECK(rc != VIT_OK || h != 2 || w != 2 || c != 1);
    } else {
        FUZZ_CHECK(rc == VIT_OK && h == 2 && w == 2 && c == 1);
        FUZZ_CHECK(ds.count == 2 && ds.classes == 2 && ds.labels[0] == 0 && ds.labels[1] == 1);
        FUZZ_CHECK(ds.class_names != NULL && strcmp(ds.class_names[0], "a") == 0 &&
                   strcmp(ds.class_names[1], "b") == 0);
        FUZZ_CHECK(memcmp(ds.images, px, 4 * sizeof *px) == 0);
    }
    vit_dataset_free(&ds);
    free(px);
    return 0;
}
