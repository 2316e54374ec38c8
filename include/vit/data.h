/*
 * vit/data.h - loading image classification data sets for the trainer.
 *
 * These on-disk formats are understood:
 *   - the 8x8 "digits" CSV shipped in data/digits.csv.gz (see data/README.md),
 *   - MNIST-style IDX files (MNIST, Fashion-MNIST, ...), gray or colour,
 *   - CIFAR-10 and CIFAR-100 binary batches,
 *   - folders of PNG and JPEG files, one subfolder per class, with train/
 *     and test/ halves or split by fractions (vit_dataset_split).
 * Every loader produces a vit_dataset: images as one flat [count, H, W, C]
 * buffer of vit_real in [0, 1] (channels last, row-major, top row first) and
 * one int label per image, and the name of each class.
 *
 * Ownership: a loader allocates images, labels and class names with malloc
 * and hands them to the caller, who releases them with vit_dataset_free.  Output structs are
 * overwritten without freeing what they held, so pass zeroed or freed structs.
 * On failure every output struct is left zeroed and nothing leaks.
 *
 * Errors: VIT_EINVAL (bad argument), VIT_EIO (a file or folder cannot be
 * opened, read or written), VIT_EFORMAT (malformed content), VIT_ENOMEM.
 * The message from vit_last_error() names the file (and the line or field
 * where that applies) and the problem.
 *
 * Thread safety: every function is reentrant; separate calls may run on
 * separate threads as long as they do not share output structs (and, for
 * the writer, the output path).
 */
#ifndef VIT_DATA_H
#define VIT_DATA_H

#include "vit/core.h"

VIT_BEGIN_DECLS

/* A labelled image set held in memory. */
typedef struct vit_dataset {
    int count;        /* number of images */
    int height;       /* H, pixels per column */
    int width;        /* W, pixels per row */
    int channels;     /* C: 1 for grayscale, 3 for RGB */
    int classes;      /* K: labels are 0..K-1 */
    vit_real *images; /* [count, H, W, C], pixel values scaled to [0, 1] */
    int *labels;      /* [count], each in 0..classes-1 */
    char **class_names; /* [classes] NUL-terminated names, class_names[k]
                           naming label k: the class folder names for PNG
                           folders, "0", "1", ... for digits and IDX.  The
                           array and each string are malloc'd by the loader
                           and freed by vit_dataset_free.  NULL in a set
                           built by hand, which the library reads as
                           "0" .. "K-1". */
} vit_dataset;

/* Frees images, labels and class names and zeroes every field.  Safe on a zeroed struct
 * (and on NULL), so calling it twice is harmless. */
void vit_dataset_free(vit_dataset *ds);

/* Reads the digits CSV at path, gzip-compressed or plain: one image per line,
 * 64 comma-separated integers 0..16 (8x8 pixels, row-major) and then the
 * label 0..9.  Blank lines are allowed only at the end of the file.
 * The first n_train lines (file order) go to train, the rest to test;
 * both get H = W = 8, C = 1, classes = 10 (named "0" .. "9") and pixels
 * value/16.
 * Errors: VIT_EINVAL for a NULL argument, train == test or n_train < 1;
 * VIT_EIO if the file cannot be opened or read; VIT_EFORMAT, naming the file
 * and line, for a wrong field count, a non-integer field, a pixel or label
 * out of range, a truncated file, or fewer than n_train + 1 lines. */
int vit_data_load_digits(const char *path, int n_train, vit_dataset *train,
                         vit_dataset *test);

/* Reads MNIST-format IDX files from the folder dir:
 *   train-images-idx3-ubyte, train-labels-idx1-ubyte,
 *   t10k-images-idx3-ubyte,  t10k-labels-idx1-ubyte,
 * each plain or gzip-compressed with a ".gz" suffix.  When an exact name is
 * absent, the single file matching *train*images*idx3-ubyte* (labels:
 * *train*labels*idx1-ubyte*; test: *t10k*... or *test*...) is used instead.
 * Images: big-endian magic 0x00000803, count, rows, cols, then count*rows*cols
 * unsigned bytes; labels: magic 0x00000801, count, then count bytes.
 * Output: H = rows, W = cols, C = 1, pixels byte/255, and on both sets
 * classes = (largest label in train or test) + 1, at least 2, named "0",
 * "1", ... after their labels.
 * The headers are checked (magic, nonzero sizes, image and label counts
 * agree, train and test image sizes agree) and the data must be exactly as
 * long as the header says; memory is only allocated for bytes actually
 * present, so absurd dimensions are rejected without a huge allocation.
 * Errors: VIT_EINVAL (NULL argument, train == test), VIT_EIO (a file is
 * missing or unreadable), VIT_EFORMAT (bad header, short or long data, ...),
 * VIT_ENOMEM. */
int vit_data_load_idx(const char *dir, vit_dataset *train, vit_dataset *test);

/* Reads a folder of PNG and JPEG images: dir holds one subfolder per class,
 * class ids 0..K-1 following the subfolder names sorted with strcmp, which
 * become ds->class_names (class k is the k-th name in that order); inside
 * each, the files whose name ends in ".png", ".jpg" or ".jpeg" (any case)
 * are read in strcmp order of their names, other files are ignored.  Whether
 * a file is read as PNG or JPEG follows its first bytes (a JPEG starts
 * FF D8 FF), not its name.  Entries whose name starts with '.' are skipped.
 * Images are stored class by class (class 0 first).
 * JPEG (through libjpeg-turbo; a library built without libjpeg refuses
 * every JPEG by name): 8-bit grayscale files load as C = 1, 8-bit colour
 * files (YCbCr or RGB, baseline or progressive) as C = 3, pixels
 * sample / 255 as libjpeg decodes them (its default IDCT and chroma
 * upsampling).  Refused with VIT_EFORMAT naming the file: CMYK and YCCK
 * files, 12-bit files, files libjpeg finds corrupt or even warns about
 * (corrupt entropy data, a premature end), more than 200 scans, and headers
 * claiming more than 1024 pixels per byte of file.
 * Grayscale PNGs load as C = 1, colour (and palette) PNGs as C = 3; an alpha
 * channel is dropped (colour values kept, not composited onto a background;
 * in 16-bit files the colour of a fully transparent pixel reads as 0).
 * Pixels are sample / 255 for 8-bit files and sample / 65535 for 16-bit ones
 * (bit depths below 8 are scaled up to 8 first).  Samples are taken as
 * stored, except that libpng re-encodes a file whose gAMA chunk differs from
 * the default for its depth (sRGB for 8-bit, linear for 16-bit).
 * All images must share height, width and channel count.
 * Errors: VIT_EINVAL (NULL argument), VIT_EIO (unreadable folder or file),
 * VIT_EFORMAT: no class subfolders, an empty class folder (named), a file
 * that is not a valid PNG, or the first image whose size or channel count
 * differs from the first image's (message names both and the difference). */
int vit_data_load_png_dir(const char *dir, vit_dataset *ds);

/* Reads the binary version of CIFAR-10 or CIFAR-100 from the folder dir
 * (what the cifar-10-binary / cifar-100-binary archives unpack to):
 *   CIFAR-10:  data_batch_1.bin .. data_batch_5.bin (train, in that order)
 *              and test_batch.bin; each record is 1 label byte 0..9 and
 *              3072 image bytes; class names from batches.meta.txt;
 *   CIFAR-100: train.bin and test.bin, chosen when train.bin exists; each
 *              record is a coarse label byte 0..19, a fine label byte
 *              0..99 and 3072 image bytes; the fine label is used (the
 *              coarse one when coarse is nonzero), class names from
 *              fine_label_names.txt (coarse_label_names.txt).
 * The 3072 image bytes are a 32x32 colour image stored channel-planar:
 * 1024 red bytes, 1024 green, 1024 blue, each plane row by row from the
 * top.  Output: H = W = 32, C = 3 in the [H, W, C] layout of vit_dataset,
 * pixels byte/255, classes = 10, 100 or 20, records in file order.  A
 * names file holds one name a line (surrounding white space dropped, blank
 * lines skipped) and must hold exactly as many as there are classes; when
 * it is absent the classes are named "0", "1", ....  A file may hold any
 * whole number (at least one) of records.
 * Errors: VIT_EINVAL (NULL argument, train == test, coarse for CIFAR-10),
 * VIT_EIO (a file missing - named with the list of files the layout needs -
 * or unreadable), VIT_EFORMAT (a file whose size is not a whole number of
 * records, named with its byte count and the record size; a label out of
 * range, named with its record; a names file with the wrong number of
 * names), VIT_ENOMEM. */
int vit_data_load_cifar(const char *dir, int coarse, vit_dataset *train, vit_dataset *test);

/* How many images of ds carry each label: counts[k] for k in
 * 0..ds->classes-1 (counts has room for ds->classes ints and is
 * overwritten).  For a data line or a warning about classes with few
 * images; nothing is printed.
 * Errors: VIT_EINVAL (NULL argument, ds->classes < 1, or a label outside
 * 0..classes-1, which leaves counts partly written). */
int vit_dataset_class_counts(const vit_dataset *ds, int *counts);

/* How a data set is cut into parts: per class, the fraction of its images
 * held out for validation and for testing, and the seed that picks them.
 * All zero: no split. */
typedef struct vit_data_split {
    double val;              /* in [0, 1) */
    double test;             /* in [0, 1); val + test < 1 */
    unsigned long long seed; /* any value */
} vit_data_split;

/* The test fraction of a folder of class folders (no train/ and test/)
 * when none is given: a fifth of each class. */
#define VIT_DATA_TEST_FRACTION 0.2

/* Splits ds into three new sets, train, val and test, stratified: each
 * class on its own, with the same fractions.  For a class of n images,
 * the test part gets t = floor(split->test * n + 0.5) and the validation
 * part v = floor(split->val * n + 0.5) of them; a part whose fraction is
 * positive gets at least one when the class has n >= 1 + P images (P the
 * number of parts with a positive fraction, 1 or 2); then, while t + v >
 * n - 1, the larger of v and t (v on a tie) loses one, so that every class
 * keeps at least one training image.  Which images: the class's image
 * indices (in ds order) are shuffled by vit_rng_shuffle with one vit_rng
 * seeded with split->seed and used for the classes in label order; the
 * first t go to test, the next v to val, the rest to train.  Each part
 * keeps ds's order (class by class for a PNG folder), and copies ds's
 * image size, classes and class names (NULL names stay NULL).  Integer
 * arithmetic and one double product per class: the same split on every
 * platform and in the float32 and float64 builds.  The parts are new
 * (free each with vit_dataset_free; a part may have count 0); ds is only
 * read.  train, val and test must be distinct and are overwritten.
 * Errors: VIT_EINVAL (NULL argument, the same struct twice, ds without
 * images or with a label outside 0..classes-1, a fraction not in [0, 1)
 * or val + test >= 1), VIT_ENOMEM; on error the parts are zeroed. */
int vit_dataset_split(const vit_dataset *ds, const vit_data_split *split, vit_dataset *train,
                      vit_dataset *val, vit_dataset *test);

/* vit_data_load (below) with a split.  For a folder of class folders
 * without train/ and test/ ("flat"): all its images are read as
 * vit_data_load_png_dir does, then split by vit_dataset_split with
 * split->test (VIT_DATA_TEST_FRACTION when it is 0), split->val and
 * split->seed.  For every other layout, which brings its own test set,
 * split->test must be 0, and split->val > 0 splits the training set (the
 * same way, test fraction 0).  *train is the training part followed by
 * the validation part (as vit_train_opts.val_count expects a validation
 * tail) and *val_count (when not NULL) the size of that tail, 0 without
 * one.  *used (when not NULL) gets the split applied (the default test
 * fraction filled in; all zero when nothing was split), to record with a
 * run (vit_run_data.split).  split NULL is all zero.
 * Errors: those of vit_data_load; VIT_EINVAL for fractions as
 * vit_dataset_split refuses, a test fraction for a layout with its own
 * test set, or a split that leaves the test set empty (every class too
 * small), naming spec. */
int vit_data_load_split(const char *spec, const char *digits_path, const vit_data_split *split,
                        vit_dataset *train, vit_dataset *test, vit_data_split *used,
                        int *val_count);

/* How every image of a data set is made one shape on load (the transform
 * vit_data_load_opts applies, recorded with a run: vit_run_data.fit).
 * height and width: both > 0 resize every image to height x width with
 * vit_image_fit's filter; both 0 keep the images' own size when they all
 * share it, else the rule below picks one.  channels: 1 or 3 converts
 * every image (vit_image_fit: gray copied into R, G and B; RGB to gray by
 * luma); 0 keeps the images' own when they all share it, else 3.
 * The rule for a folder of images of different sizes: the median height
 * and the median width of the images read (the upper median of an even
 * count); when the larger of the two exceeds VIT_DATA_FIT_MAX_SIDE both
 * are scaled down so that it is VIT_DATA_FIT_MAX_SIDE (aspect kept); then
 * each is rounded to the nearest multiple of 8 (at least 8), which the
 * patch sizes divide.  A PNG with an alpha channel is composited over
 * white (value 1) in this load: colour x alpha + (1 - alpha). */
typedef struct vit_data_fit {
    int height, width; /* both > 0, or both 0 */
    int channels;      /* 0, 1 or 3 */
} vit_data_fit;

/* The largest side the rule picks for a folder of mixed sizes. */
#define VIT_DATA_FIT_MAX_SIDE 64

/* How many skipped files a vit_data_report names. */
#define VIT_DATA_REPORT_NAMES 3

/* What vit_data_load_opts did, for a person: every field is filled. */
typedef struct vit_data_report {
    vit_data_fit fit;        /* the shape every image now has (never 0) */
    int ruled;               /* 1 when the images differed in size or
                                channels and the rule (not the caller)
                                picked the size (bit 1) or channels (2) */
    int min_h, max_h, min_w, max_w; /* the sizes read (before fitting) */
    int gray, colour;        /* images read as grayscale / colour */
    int resized, converted;  /* images whose size / channels changed */
    int ignored;             /* files in class folders skipped for their
                                name (not .png, .jpg, .jpeg); hidden
                                entries (a leading '.') are not counted */
    int skipped;             /* unreadable image files skipped (skip_bad) */
    char skipped_why[VIT_DATA_REPORT_NAMES][320]; /* the first of them:
                                vit_last_error's message, naming the file */
    vit_data_split split;    /* the split applied (as *used of
                                vit_data_load_split) */
    int unreadable;          /* on failure: 1 when it was an image file that
                                could not be read (skip_bad would have
                                skipped it), else 0 */
} vit_data_report;

/* What vit_data_load_opts is asked to do. */
typedef struct vit_data_opts {
    vit_data_split split; /* as vit_data_load_split's split */
    vit_data_fit fit;     /* the shape asked for (all 0: the images' own,
                             or the rule for a folder of mixed images) */
    int skip_bad;         /* 1: an image file that cannot be read (VIT_EIO
                             or VIT_EFORMAT) is skipped and counted in the
                             report instead of failing the load; a class
                             left without images still fails */
} vit_data_opts;

/* vit_data_load_split with a transform: reads spec as vit_data_load does
 * (the split as vit_data_load_split, from opts->split), except that the
 * images of an image folder (with or without train/ and test/) need not
 * share a size or channel count: each is fitted on load to opts->fit, or
 * when that is 0 and they differ, to the rule's shape (vit_data_fit), the
 * test half to the training half's.  Without such differences, and with
 * opts->fit 0, the result is that of vit_data_load_split, except for
 * alpha (composited over white here, dropped there).  Digits, IDX and
 * CIFAR sets are fitted to opts->fit when it is given.  A folder whose
 * images differ is read twice (the sizes first).  opts NULL is all zero.
 * report (may be NULL) says what was done (on failure, only its
 * unreadable field).
 * Errors: those of vit_data_load_split; VIT_EINVAL for a fit with one
 * side 0, a side above 4096 or channels not 0, 1 or 3; with skip_bad, a
 * class whose every file was skipped is VIT_EFORMAT naming its folder. */
int vit_data_load_opts(const char *spec, const char *digits_path, const vit_data_opts *opts,
                       vit_dataset *train, vit_dataset *test, int *val_count,
                       vit_data_report *report);

/* Fits every image of ds to fit (both sides > 0 or both 0: unchanged
 * size; channels 0: unchanged) with vit_image_fit, in place (the images
 * buffer is replaced).  report, when not NULL, gets resized and converted
 * added.  Errors: VIT_EINVAL (NULL ds, a bad fit), VIT_ENOMEM (ds is then
 * unchanged). */
int vit_dataset_fit(vit_dataset *ds, const vit_data_fit *fit, vit_data_report *report);

/* Reads one image as vit_data_load_opts reads a folder's (alpha
 * composited over white) and, when fit is not NULL, fits it to fit's
 * height, width (both 0: kept) and channels (0: kept).  Output and
 * ownership as vit_image_read; errors as vit_image_read, and VIT_EINVAL
 * for a bad fit. */
int vit_image_load(const char *path, const vit_data_fit *fit, vit_real **pixels, int *height,
                   int *width, int *channels);

/* What `vit_train --data SPEC` calls.  spec is one of (checked in order)
 *   "digits"   -> vit_data_load_digits(digits_path, 1437, train, test),
 *   a folder holding IDX files (a name containing "-idx3-ubyte" or
 *              "-idx4-ubyte", or those with '.' for '-')
 *              -> vit_data_load_idx(spec, train, test),
 *   a folder holding CIFAR files (data_batch_1.bin, test_batch.bin,
 *              train.bin or test.bin)
 *              -> vit_data_load_cifar(spec, 0, train, test),
 *   a folder with train/ and test/ subfolders of class folders
 *              -> vit_data_load_png_dir on each; both must have the same
 *                 class names, image size and channel count,
 *   a folder of class folders without train/ and test/ (and without
 *              only one of them), one at least holding an image file
 *              -> vit_data_load_png_dir, then a fifth of each class held
 *                 out as the test set (vit_data_load_split with the
 *                 default split: test VIT_DATA_TEST_FRACTION, seed 0).
 * digits_path is only used (and must be non-NULL) for "digits".
 * A spec that does not exist fails with VIT_EIO and "SPEC: no such file or
 * folder"; a file, or a folder of none of these layouts, with VIT_EINVAL
 * and a message starting "SPEC: not a data set", which lists the layouts
 * and says what was found instead (the subfolders and files, for instance
 * subfolders without images, or train/ without test/).
 * Other errors as for the loader called. */
int vit_data_load(const char *spec, const char *digits_path, vit_dataset *train,
                  vit_dataset *test);

/* Reads one PNG or JPEG image (e.g. an image to classify), told apart by the
 * file's first bytes, not its name; PNGs as in vit_png_read, JPEGs as in
 * vit_data_load_png_dir.  Output, ownership and errors as for
 * vit_png_read, plus VIT_EFORMAT for a JPEG this reader refuses. */
int vit_image_read(const char *path, vit_real **pixels, int *height, int *width,
                   int *channels);

/* Fits an image src [h, w, c] to the size a model expects, writing dst
 * [out_h, out_w, out_c] (overwritten; it must not overlap src).  c and
 * out_c are 1 or 3.  Channels are converted first: gray to RGB copies the
 * value into all three, RGB to gray takes the luma 0.299 R + 0.587 G +
 * 0.114 B (ITU-R BT.601).  Then each axis is resampled with a triangle
 * (bilinear) filter on pixel centres: output pixel o of an axis of n
 * inputs and m outputs sits at (o + 0.5) n / m in input coordinates and
 * averages the inputs within s = max(1, n / m) of it, input i (centre
 * i + 0.5) weighted by max(0, 1 - |i + 0.5 - pos| / s), the weights
 * normalised to sum to 1 (so edges are clamped).  Enlarging is plain
 * bilinear interpolation; shrinking widens the filter, as Pillow's
 * Image.resize(..., BILINEAR) does, so no input pixel is skipped.  The
 * same size and channels copy src exactly.
 * Errors: VIT_EINVAL (NULL pointer, a size < 1, channels not 1 or 3),
 * VIT_ENOMEM.  Reentrant. */
int vit_image_fit(const vit_real *src, int h, int w, int c, vit_real *dst, int out_h,
                  int out_w, int out_c);

/* Reads one PNG (e.g. an image to classify) as in vit_data_load_png_dir.
 * On success *pixels is a malloc'd [H, W, C] buffer in [0, 1] that the caller
 * frees with free(), and *height, *width, *channels (1 or 3) describe it.
 * On failure *pixels is NULL and the sizes are 0.
 * Errors: VIT_EINVAL (NULL argument), VIT_EIO (cannot open or read),
 * VIT_EFORMAT (not a valid PNG), VIT_ENOMEM. */
int vit_png_read(const char *path, vit_real **pixels, int *height, int *width,
                 int *channels);

/* Writes pixels [height, width, channels] (8-bit values, row-major) to path as
 * an 8-bit grayscale (channels = 1) or RGB (channels = 3) PNG.  The data go to
 * a temporary file next to path that is renamed over path only once complete
 * and flushed to disk, so a failure never leaves a partial file at path.
 * The new file gets mode 0644.
 * Errors: VIT_EINVAL (NULL argument, non-positive size, channels not 1 or 3),
 * VIT_EIO (cannot create, write or rename), VIT_ENOMEM. */
int vit_png_write(const char *path, const unsigned char *pixels, int height,
                  int width, int channels);

VIT_END_DECLS

#endif
