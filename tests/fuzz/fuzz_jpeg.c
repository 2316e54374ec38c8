/*
 * Fuzz harness: the JPEG reader, one file (vit_image_read) and class
 * folders (vit_data_load_png_dir).
 *
 * The input is one JPEG file.  It is read on its own (vit_image_read tells
 * JPEG from PNG by content; inputs that do not start like a JPEG are
 * forced to, so that the JPEG path is what runs), then as the only image
 * of class "a" (a/1.jpg) in a folder whose class "b" holds a fixed valid
 * 2x2 grayscale PNG, so the size and channel comparison runs too.
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
    fuzz_mkdir("jpeg");
    fuzz_mkdir("jpeg/a");
    fuzz_mkdir("jpeg/b");
    FUZZ_CHECK(vit_png_write(fuzz_path(p, sizeof p, "jpeg/b/1.png"), px, 2, 2, 1) == VIT_OK);
    done = 1;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char path[512], dir[512];
    vit_real *px = NULL;
    int h = -1, w = -1, c = -1;
    uint8_t *buf = malloc(size + 3);
    if (buf == NULL)
        abort();
    /* The JPEG signature (SOI, then a marker's FF) in front unless there. */
    size_t n = 0;
    if (size < 3 || data[0] != 0xFF || data[1] != 0xD8 || data[2] != 0xFF) {
        buf[0] = 0xFF, buf[1] = 0xD8, buf[2] = 0xFF;
        n = 3;
    }
    if (size > 0)
        memcpy(buf + n, data, size);
    n += size;
    setup_folder();
    fuzz_write_file(fuzz_path(path, sizeof path, "jpeg/a/1.jpg"), buf, n);
    free(buf);

    int rc = vit_image_read(path, &px, &h, &w, &c);
    if (rc != VIT_OK) {
        FUZZ_CHECK_FAILURE(rc);
        FUZZ_CHECK(px == NULL && h == 0 && w == 0 && c == 0);
        FUZZ_CHECK(strstr(vit_last_error(), "1.jpg") != NULL);
    } else {
        FUZZ_CHECK(px != NULL && h >= 1 && w >= 1 && (c == 1 || c == 3));
        for (size_t i = 0; i < (size_t)h * (size_t)w * (size_t)c; i++)
            FUZZ_CHECK(px[i] >= 0 && px[i] <= 1);
    }

    vit_dataset ds;
    int rc2 = vit_data_load_png_dir(fuzz_path(dir, sizeof dir, "jpeg"), &ds);
    if (rc2 != VIT_OK) {
        FUZZ_CHECK_FAILURE(rc2);
        FUZZ_CHECK(ds.count == 0 && ds.images == NULL && ds.labels == NULL);
        FUZZ_CHECK(rc != VIT_OK || h != 2 || w != 2 || c != 1);
    } else {
        FUZZ_CHECK(rc == VIT_OK && h == 2 && w == 2 && c == 1);
        FUZZ_CHECK(ds.count == 2 && ds.classes == 2 && ds.labels[0] == 0 && ds.labels[1] == 1);
        FUZZ_CHECK(memcmp(ds.images, px, 4 * sizeof *px) == 0);
    }
    vit_dataset_free(&ds);
    free(px);
    return 0;
}
