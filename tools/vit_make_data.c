/*
 * vit_make_data - derived data sets made from the shipped 8x8 digits, so
 * that the models/ configs for larger images have a data set anyone can
 * rebuild here, bit for bit, without a download:
 *
 *   gray28   28x28 grayscale, MNIST's IDX files (train-images-idx3-ubyte,
 *            ...): each digit scaled to 20x20 (bilinear) and set in the
 *            middle of a 28x28 black field, as MNIST's digits are.
 *   rgb32    32x32 RGB PNG folders (train/0 .. train/9, test/...): each
 *            digit scaled to 24x24, set at a random offset (0..8 in each
 *            direction), in light ink on dark paper, both colours random
 *            with the ink at least 96 brighter in every channel - so that
 *            position and colour are nuisances a model must see through.
 *
 * The split is the digits' own (first 1437 train, last 360 test), so the
 * test images are derived from digits no training image came from.  The
 * random choices come from the library's generator seeded with --seed
 * (default 1).  The files go to a folder that must not exist yet.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli.h"
#include "vit/vit.h"

static const char *prog = "vit_make_data";

static void usage(FILE *f)
{
    fprintf(f, "usage: vit_make_data gray28|rgb32 DIR [--seed N] [--count N]\n"
               "\n"
               "Writes a data set derived from the shipped 8x8 digits into DIR (which must\n"
               "not exist): gray28 as 28x28 MNIST IDX files, rgb32 as 32x32 RGB PNG folders\n"
               "with a random position and colours per image.  Train on it with\n"
               "vit_train --data DIR --config models/gray28.cfg (or models/rgb32.cfg).\n"
               "\n"
               "  --seed N    the generator's seed for rgb32's positions and colours (1)\n"
               "  --count N   only the first N training and N/4 test images (quick checks)\n");
}

/* Bilinear sample of the 8x8 image src (values 0..1) at output pixel (y, x)
 * of an s x s rendering of it. */
static double sample(const vit_real *src, int s, int y, int x)
{
    double fy = (y + 0.5) * 8.0 / s - 0.5, fx = (x + 0.5) * 8.0 / s - 0.5;
    fy = fy < 0 ? 0 : fy > 7 ? 7 : fy;
    fx = fx < 0 ? 0 : fx > 7 ? 7 : fx;
    int y0 = (int)fy, x0 = (int)fx;
    int y1 = y0 < 7 ? y0 + 1 : 7, x1 = x0 < 7 ? x0 + 1 : 7;
    double wy = fy - y0, wx = fx - x0;
    return (1 - wy) * ((1 - wx) * src[y0 * 8 + x0] + wx * src[y0 * 8 + x1]) +
           wy * ((1 - wx) * src[y1 * 8 + x0] + wx * src[y1 * 8 + x1]);
}

static unsigned char to_byte(double v)
{
    v = v < 0 ? 0 : v > 1 ? 1 : v;
    return (unsigned char)(v * 255 + 0.5);
}

static int put_u32(FILE *f, unsigned v)
{
    unsigned char b[4] = {(unsigned char)(v >> 24), (unsigned char)(v >> 16),
                          (unsigned char)(v >> 8), (unsigned char)v};
    return fwrite(b, 1, 4, f) == 4;
}

/* DIR/SPLIT-images-idx3-ubyte: [count, 28, 28] bytes after the header. */
static int idx_images(FILE *f, const vit_dataset *ds)
{
    int ok = put_u32(f, 0x803) && put_u32(f, (unsigned)ds->count) && put_u32(f, 28) &&
             put_u32(f, 28);
    for (int i = 0; ok && i < ds->count; i++) {
        unsigned char img[28 * 28] = {0};
        for (int y = 0; y < 20; y++)
            for (int x = 0; x < 20; x++)
                img[(y + 4) * 28 + x + 4] = to_byte(sample(ds->images + (size_t)i * 64, 20, y, x));
        ok = fwrite(img, 1, sizeof img, f) == sizeof img;
    }
    return ok;
}

/* DIR/SPLIT-labels-idx1-ubyte: one byte per image after the header. */
static int idx_labels(FILE *f, const vit_dataset *ds)
{
    int ok = put_u32(f, 0x801) && put_u32(f, (unsigned)ds->count);
    for (int i = 0; ok && i < ds->count; i++)
        ok = fputc(ds->labels[i], f) != EOF;
    return ok;
}

/* One split as IDX, each file written whole or not at all. */
static int write_idx(const char *dir, const char *split, const vit_dataset *ds)
{
    static const char *const suffix[2] = {"images-idx3-ubyte", "labels-idx1-ubyte"};
    int (*const body[2])(FILE *, const vit_dataset *) = {idx_images, idx_labels};
    for (int k = 0; k < 2; k++) {
        char path[4200];
        snprintf(path, sizeof path, "%s/%s-%s", dir, split, suffix[k]);
        FILE *f = NULL;
        char *tmp = NULL;
        int rc = vit_atomic_open(path, &f, &tmp);
        if (rc == VIT_OK && !body[k](f, ds))
            rc = vit_set_error(VIT_EIO, "%s: write failed: %s", path, strerror(errno));
        if (f) /* opened: close it, keeping the file only if all was written */
            rc = vit_atomic_close(f, tmp, path, rc);
        if (rc != VIT_OK)
            return cli_fail(prog, NULL);
    }
    return 0;
}

/* One split as PNG folders DIR/split/LABEL/NNNNN.png. */
static int write_rgb(const char *dir, const char *split, const vit_dataset *ds, vit_rng *rng,
                     int first)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/%s", dir, split);
    if (mkdir(path, 0755) != 0)
        goto io;
    for (int k = 0; k < 10; k++) {
        snprintf(path, sizeof path, "%s/%s/%d", dir, split, k);
        if (mkdir(path, 0755) != 0)
            goto io;
    }
    for (int i = 0; i < ds->count; i++) {
        int oy = (int)vit_rng_below(rng, 9), ox = (int)vit_rng_below(rng, 9);
        /* Light ink on dark paper, each channel at least 96 apart, the
         * colours otherwise uniform. */
        int ink[3], paper[3];
        for (int ch = 0; ch < 3; ch++) {
            paper[ch] = (int)vit_rng_below(rng, 160);                                /* 0 .. 159 */
            ink[ch] = paper[ch] + 96 + (int)vit_rng_below(rng, (uint32_t)(160 - paper[ch])); /* .. 255 */
        }
        unsigned char img[32 * 32 * 3];
        for (int y = 0; y < 32; y++)
            for (int x = 0; x < 32; x++) {
                int gy = y - oy, gx = x - ox;
                double v = gy >= 0 && gy < 24 && gx >= 0 && gx < 24
                               ? sample(ds->images + (size_t)i * 64, 24, gy, gx) : 0;
                for (int ch = 0; ch < 3; ch++)
                    img[(y * 32 + x) * 3 + ch] = to_byte((v * ink[ch] + (1 - v) * paper[ch]) / 255);
            }
        snprintf(path, sizeof path, "%s/%s/%d/%05d.png", dir, split, ds->labels[i], first + i);
        if (vit_png_write(path, img, 32, 32, 3) != VIT_OK)
            return cli_fail(prog, NULL);
    }
    return 0;
io:
    fprintf(stderr, "%s: %s: %s\n", prog, path, strerror(errno));
    return 1;
}

int main(int argc, char **argv)
{
    const char *kind = NULL, *dir = NULL;
    int seed = 1, count = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            usage(stdout);
            return 0;
        }
        int is_seed = strncmp(argv[i], "--seed", 6) == 0 && (!argv[i][6] || argv[i][6] == '=');
        int is_count = strncmp(argv[i], "--count", 7) == 0 && (!argv[i][7] || argv[i][7] == '=');
        if (is_seed || is_count) {
            const char *eq = strchr(argv[i], '='), *name = is_seed ? "--seed" : "--count";
            const char *v = eq ? eq + 1 : i + 1 < argc ? argv[++i] : NULL;
            if (!v) {
                fprintf(stderr, "%s: %s needs a value\n", prog, name);
                return 2;
            }
            if (!cli_int(prog, name, v, is_seed ? 0 : 4, 1 << 30, is_seed ? &seed : &count))
                return 2;
        } else if (argv[i][0] == '-') {
            fprintf(stderr, "%s: unknown option '%s' (see --help)\n", prog, argv[i]);
            return 2;
        } else if (!kind) {
            kind = argv[i];
        } else if (!dir) {
            dir = argv[i];
        } else {
            fprintf(stderr, "%s: unexpected argument '%s'\n", prog, argv[i]);
            return 2;
        }
    }
    if (!kind || !dir || (strcmp(kind, "gray28") != 0 && strcmp(kind, "rgb32") != 0)) {
        fprintf(stderr, "%s: %s (see --help)\n", prog,
                !kind ? "no kind given (gray28 or rgb32)"
                : !dir ? "no folder given"
                       : "the kind is gray28 or rgb32");
        return 2;
    }
    if (mkdir(dir, 0755) != 0) {
        fprintf(stderr, "%s: %s: %s%s\n", prog, dir, strerror(errno),
                errno == EEXIST ? " (give a new folder: nothing is overwritten)" : "");
        return 1;
    }
    vit_dataset train = {0}, test = {0};
    if (vit_data_load_digits(cli_digits_path(), 1437, &train, &test))
        return cli_fail(prog, NULL);
    if (count > 0 && count < train.count) {
        train.count = count;
        test.count = (count + 3) / 4;
    }
    int rc;
    if (strcmp(kind, "gray28") == 0) {
        rc = write_idx(dir, "train", &train) || write_idx(dir, "t10k", &test);
    } else {
        vit_rng rng;
        vit_rng_seed(&rng, (uint64_t)seed);
        rc = write_rgb(dir, "train", &train, &rng, 0) ||
             write_rgb(dir, "test", &test, &rng, train.count);
    }
    if (rc == 0)
        printf("wrote %s: %s, %d train and %d test images\n", dir,
               strcmp(kind, "gray28") == 0 ? "28x28 gray IDX" : "32x32 RGB PNG folders",
               train.count, test.count);
    vit_dataset_free(&train);
    vit_dataset_free(&test);
    return rc;
}
