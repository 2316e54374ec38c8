/* Internal: what the data loaders (data.c, data_digits.c, data_idx.c,
 * data_png.c, data_jpeg.c, data_cifar.c) share.  Everything is defined in
 * data.c except the PNG pair (data_png.c) and the JPEG reader (data_jpeg.c). */
#ifndef VIT_SRC_DATA_INTERNAL_H
#define VIT_SRC_DATA_INTERNAL_H

#include <zlib.h>
#include "vit/data.h"

/* The start of every loader that fills a train and a test set: src (named
 * src_name in the message), train and test non-NULL, train != test; then
 * both zeroed, so that the caller may free them whatever happens next.
 * Returns VIT_OK or VIT_EINVAL with a message prefixed with fn. */
int vit_data_internal_begin(const char *fn, const char *src_name, const void *src,
                            vit_dataset *train, vit_dataset *test);

/* Allocates images [count, H, W, C] and labels [count] of a zeroed ds and
 * fills in the sizes (classes is left to the caller).  The size products are
 * checked for overflow first.  what names the source in the error message. */
int vit_data_internal_alloc(vit_dataset *ds, int count, int height, int width,
                            int channels, const char *what);

/* The strings "0", "1", ... "n-1" in a malloc'd array of n malloc'd
 * strings, or NULL when out of memory. */
char **vit_data_internal_numbers(int n);

/* Names the classes of ds (ds->classes of them) "0", "1", ... after their
 * labels.  On failure ds is freed (zeroed) and VIT_ENOMEM names what. */
int vit_data_internal_number_names(vit_dataset *ds, const char *what);

/* dir + "/" + name + suffix in a malloc'd string, or NULL when out of
 * memory. */
char *vit_data_internal_join(const char *dir, const char *name, const char *suffix);

/* gzerror's message for g, without the "path: " prefix zlib puts in front;
 * the zlib error code goes to *err. */
const char *vit_data_internal_zlib_message(gzFile g, const char *path, int *err);

/* Reads the JPEG at path (data_jpeg.c) as vit_image_read does: *pixels a
 * malloc'd [H, W, C] buffer in [0, 1], or NULL and zero sizes on failure
 * (VIT_EIO cannot open; VIT_EFORMAT corrupt, CMYK, 12-bit, or a library
 * built without libjpeg; VIT_ENOMEM). */
int vit_data_internal_read_jpeg(const char *path, vit_real **pixels, int *height, int *width,
                                int *channels);

/* How an image folder is read: NULL (vit_data_load_png_dir's contract:
 * alpha dropped, every image the first one's shape), or tolerant
 * (vit_data_load_opts): alpha composited over white, images fitted to fit
 * (parts 0: the images' own, or the rule when they differ), unreadable
 * files skipped with skip_bad; what was done added to *rep (not NULL). */
typedef struct vit_data_how {
    vit_data_fit fit;
    int skip_bad;
    vit_data_report *rep;
} vit_data_how;

/* The train/ and test/ halves of a PNG data set (data_png.c); the test
 * half fitted to the training half's shape when how is not NULL. */
int vit_data_internal_png_pair(const char *train_dir, const char *test_dir,
                               const vit_data_how *how, vit_dataset *train, vit_dataset *test);

/* A folder of class folders read as vit_data_load_png_dir does, or
 * tolerantly with how (data_png.c). */
int vit_data_internal_png_dir(const char *dir, const vit_data_how *how, vit_dataset *ds);

/* Adds what ds holds (sizes, gray or colour images) to rep's figures, for
 * the loaders that read one shape (data.c). */
void vit_data_internal_note_shape(const vit_dataset *ds, vit_data_report *rep);

/* Checks a fit's values (data_fit.c): VIT_EINVAL naming fn otherwise. */
int vit_data_internal_check_fit(const char *fn, const vit_data_fit *fit);

/* vit_data_load without the split (data.c): a flat folder of class
 * folders (no train/ and test/) is read whole into *train, *test left
 * zeroed, and *flat set to 1 (else 0).  how as for the PNG pair; digits,
 * IDX and CIFAR sets are fitted to how->fit when it is given. */
int vit_data_internal_load(const char *spec, const char *digits_path, const vit_data_how *how,
                           vit_dataset *train, vit_dataset *test, int *flat);

#endif
