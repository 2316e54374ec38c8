/*
 * Fuzz harness: the CIFAR-10/100 binary reader (vit_data_load_cifar).
 *
 * A valid CIFAR folder is six files of 3073-byte records (or two of 3074),
 * far more than a fuzzer's input, so the input describes the files and the
 * harness writes them:
 *   byte 0        flags: bit 0 CIFAR-100 (train.bin, test.bin) instead of
 *                 CIFAR-10 (data_batch_1..5.bin, test_batch.bin); bit 1
 *                 ask for coarse labels; bit 2 write the names file; bit 3
 *                 leave the last file out
 *   bytes 1..6    one per file: bits 0-1 its record count (0..3), bits 2-7
 *                 how many bytes to cut from its end (0..63)
 *   bytes 7..8    little-endian u16: length of the names file's text
 *   then          the names text, then the payload P
 * Record bytes (labels and pixels alike) are P repeated from an offset
 * that differs per record, so the payload decides labels and pixels.
 * Checked besides memory safety: a failure zeroes both sets and leaves a
 * message; a success has exactly the records written, labels as stored and
 * in range, and pixel (0, 0) of each image equal to the first byte of each
 * colour plane.
 */
#include "fuzz_util.h"
#include "vit/data.h"

#define MAX_FILES 6

static int is_zeroed(const vit_dataset *ds)
{
    return ds->count == 0 && ds->images == NULL && ds->labels == NULL && ds->classes == 0 &&
           ds->class_names == NULL;
}

/* Byte k of record j of file i. */
static uint8_t rec_byte(const uint8_t *p, size_t np, int i, int j, size_t k)
{
    return np == 0 ? 0 : p[((size_t)(i * 4 + j) * 131 + k) % np];
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const char *c10[MAX_FILES] = {"data_batch_1.bin", "data_batch_2.bin",
                                         "data_batch_3.bin", "data_batch_4.bin",
                                         "data_batch_5.bin", "test_batch.bin"};
    static const char *c100[2] = {"train.bin", "test.bin"};
    char dir[512], path[1024];
    if (size < 9)
        return 0;
    int flags = data[0], is100 = flags & 1, coarse = (flags >> 1) & 1;
    int nfiles = is100 ? 2 : MAX_FILES, lab_bytes = is100 ? 2 : 1;
    size_t rec = (size_t)lab_bytes + 3072;
    size_t nnames = fuzz_le16(data + 7), pos = 9;
    if (nnames > size - pos)
        nnames = size - pos;
    const uint8_t *names = data + pos, *p = data + pos + nnames;
    size_t np = size - pos - nnames;

    fuzz_path(dir, sizeof dir, "cifar");
    fuzz_remove_tree(dir);
    fuzz_mkdir("cifar");
    int records[MAX_FILES], whole[MAX_FILES];
    uint8_t *buf = malloc(3 * rec);
    if (buf == NULL)
        abort();
    for (int i = 0; i < nfiles; i++) {
        records[i] = data[1 + i] & 3;
        size_t len = (size_t)records[i] * rec, cut = (size_t)(data[1 + i] >> 2);
        len = cut < len ? len - cut : 0;
        whole[i] = len % rec == 0 && len > 0;
        for (int j = 0; j < records[i]; j++)
            for (size_t k = 0; k < rec; k++)
                buf[(size_t)j * rec + k] = rec_byte(p, np, i, j, k);
        if (i == nfiles - 1 && (flags & 8))
            break;
        if (snprintf(path, sizeof path, "%s/%s", dir, is100 ? c100[i] : c10[i]) >= (int)sizeof path)
            abort();
        fuzz_write_file(path, buf, len);
    }
    free(buf);
    if (flags & 4) {
        const char *nf = !is100 ? "batches.meta.txt"
                         : coarse ? "coarse_label_names.txt" : "fine_label_names.txt";
        if (snprintf(path, sizeof path, "%s/%s", dir, nf) >= (int)sizeof path)
            abort();
        fuzz_write_file(path, names, nnames);
    }

    vit_dataset train, test;
    int rc = vit_data_load_cifar(dir, coarse, &train, &test);
    if (rc != VIT_OK) {
        FUZZ_CHECK_FAILURE(rc);
        FUZZ_CHECK(is_zeroed(&train) && is_zeroed(&test));
        return 0;
    }
    FUZZ_CHECK(!(flags & 8) && !(coarse && !is100));
    int classes = !is100 ? 10 : coarse ? 20 : 100, at = 0;
    for (int i = 0; i < nfiles; i++) {
        FUZZ_CHECK(whole[i]);
        vit_dataset *ds = i == nfiles - 1 ? &test : &train;
        if (i == nfiles - 1) {
            FUZZ_CHECK(at == train.count);
            at = 0;
        }
        for (int j = 0; j < records[i]; j++, at++) {
            int label = rec_byte(p, np, i, j, is100 && !coarse ? 1 : 0);
            FUZZ_CHECK(at < ds->count && ds->labels[at] == label && label < classes);
            for (int ch = 0; ch < 3; ch++) {
                vit_real want = (vit_real)rec_byte(p, np, i, j, (size_t)lab_bytes +
                                                   (size_t)ch * 1024) / (vit_real)255;
                FUZZ_CHECK(ds->images[(size_t)at * 3072 + (size_t)ch] == want);
            }
        }
        FUZZ_CHECK(i < nfiles - 1 || at == test.count);
    }
    FUZZ_CHECK(train.classes == classes && test.classes == classes);
    FUZZ_CHECK(train.height == 32 && train.width == 32 && train.channels == 3);
    for (int k = 0; k < classes; k++)
        FUZZ_CHECK(train.class_names[k] != NULL && train.class_names[k][0] != '\0' &&
                   strcmp(train.class_names[k], test.class_names[k]) == 0);
    vit_dataset_free(&train);
    vit_dataset_free(&test);
    return 0;
}
