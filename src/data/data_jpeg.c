/* JPEG images through libjpeg (libjpeg-turbo): 8-bit grayscale and colour
 * files, baseline or progressive.  Built without libjpeg (meson -Djpeg=
 * disabled, or libjpeg-dev absent), the reader refuses every JPEG by name.
 *
 * libjpeg reports errors through a callback that must not return; its
 * default one prints and calls exit().  Here the callback formats the
 * message and longjmps back to the reader, which turns it into VIT_EFORMAT
 * naming the file.  Warnings (corrupt entropy data, a file that ends early)
 * are treated the same way: libjpeg would otherwise fill the rest of the
 * image with guesses, and a training image must be what the file says. */
#include "vit/data.h"
#include "data_internal.h"
#include "error.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef VIT_HAVE_JPEG

#include <setjmp.h>
#include <sys/stat.h>
/* jpeglib.h needs FILE and size_t declared before it. */
#include <jerror.h>
#include <jpeglib.h>

/* The most pixels a file may claim per byte it holds.  A Huffman-coded
 * JPEG spends at least about one bit per 8x8 block and component (512
 * pixels a byte); this bound leaves twice that, and refuses a small corrupt
 * header that claims 65535 x 65535 pixels before anything is allocated. */
#define JPEG_MAX_PIXELS_PER_BYTE 1024
/* A progressive file may hold any number of scans, each a pass over the
 * whole image; real encoders write about ten.  More is refused, so that a
 * small file cannot keep the decoder busy for minutes. */
#define JPEG_MAX_SCANS 200

/* libjpeg's error manager, with where to jump back to and the message. */
typedef struct {
    struct jpeg_error_mgr mgr;
    jmp_buf back;
    struct jpeg_progress_mgr progress;
    int ours; /* msg is a whole sentence of ours, not libjpeg's */
    int h, w, c; /* the image, once decoded (here, not in locals, which a
                    longjmp may leave stale) */
    char msg[JMSG_LENGTH_MAX + 64];
} jpeg_guard;

static void on_error(j_common_ptr cinfo)
{
    jpeg_guard *g = (jpeg_guard *)cinfo->err;
    g->ours = g->mgr.msg_code == JERR_BAD_PRECISION;
    if (g->ours)
        snprintf(g->msg, sizeof g->msg, "%d-bit JPEG is not supported (only 8-bit samples)",
                 g->mgr.msg_parm.i[0]);
    else
        (*g->mgr.format_message)(cinfo, g->msg);
    longjmp(g->back, 1);
}

/* Level -1 is a warning (corrupt data libjpeg would work around); higher
 * levels are trace messages, which are ignored. */
static void on_message(j_common_ptr cinfo, int level)
{
    if (level < 0)
        on_error(cinfo);
}

static void on_progress(j_common_ptr cinfo)
{
    j_decompress_ptr d = (j_decompress_ptr)cinfo;
    jpeg_guard *g = (jpeg_guard *)cinfo->err;
    if (d->input_scan_number > JPEG_MAX_SCANS) {
        g->ours = 1;
        snprintf(g->msg, sizeof g->msg, "corrupt JPEG: more than %d scans", JPEG_MAX_SCANS);
        longjmp(g->back, 1);
    }
}

/* Whether the colour space the file declares can be read as gray or RGB;
 * *c is then 1 or 3.  Otherwise *what names it. */
static int pick_channels(J_COLOR_SPACE cs, int *c, const char **what)
{
    switch (cs) {
    case JCS_GRAYSCALE:
        *c = 1;
        return 1;
    case JCS_YCbCr:
    case JCS_RGB:
        *c = 3;
        return 1;
    case JCS_CMYK:
        *what = "CMYK";
        return 0;
    case JCS_YCCK:
        *what = "YCCK (CMYK)";
        return 0;
    default:
        *what = "an unknown colour space";
        return 0;
    }
}

/* The decoding proper, between setjmp and the cleanup in the caller: what
 * it allocates goes to *px and *row, which the caller frees either way. */
static int decode(struct jpeg_decompress_struct *d, const char *path, long long file_size,
                  vit_real *volatile *px, JSAMPLE *volatile *row, int *h, int *w, int *c)
{
    const char *what = NULL;
    jpeg_read_header(d, TRUE);
    if (!pick_channels(d->jpeg_color_space, c, &what))
        return vit_fail(VIT_EFORMAT, "%s: %s JPEG is not supported (only grayscale and RGB)",
                        path, what);
    double pixels = (double)d->image_width * (double)d->image_height;
    if (pixels > (double)JPEG_MAX_PIXELS_PER_BYTE * (double)file_size)
        return vit_fail(VIT_EFORMAT, "%s: header claims %ux%u pixels, more than its %lld bytes "
                        "can hold (truncated or corrupt)", path, (unsigned)d->image_width,
                        (unsigned)d->image_height, file_size);
    d->out_color_space = *c == 1 ? JCS_GRAYSCALE : JCS_RGB;
    jpeg_start_decompress(d);
    if (d->output_components != *c)
        return vit_fail(VIT_EFORMAT, "%s: libjpeg gives %d components, expected %d", path,
                        d->output_components, *c);
    size_t stride = (size_t)d->output_width * (size_t)*c;
    *h = (int)d->output_height;
    *w = (int)d->output_width;
    *px = malloc(stride * (size_t)*h * sizeof(vit_real));
    *row = malloc(stride);
    if (*px == NULL || *row == NULL)
        return vit_fail(VIT_ENOMEM, "%s: out of memory for %dx%d pixels", path, *h, *w);
    while (d->output_scanline < d->output_height) {
        JSAMPROW rows[1] = {*row};
        vit_real *dst = *px + (size_t)d->output_scanline * stride;
        if (jpeg_read_scanlines(d, rows, 1) != 1)
            return vit_fail(VIT_EFORMAT, "%s: decoding stopped at row %u", path,
                            (unsigned)d->output_scanline);
        for (size_t i = 0; i < stride; i++)
            dst[i] = (vit_real)(*row)[i] / (vit_real)255;
    }
    jpeg_finish_decompress(d);
    return VIT_OK;
}

int vit_data_internal_read_jpeg(const char *path, vit_real **pixels, int *height, int *width,
                                int *channels)
{
    struct jpeg_decompress_struct d;
    jpeg_guard g;
    vit_real *volatile px = NULL;
    JSAMPLE *volatile row = NULL;
    volatile int rc = VIT_OK;
    struct stat st;
    *pixels = NULL;
    *height = *width = *channels = 0;
    FILE *fp = fopen(path, "rb");
    if (fp == NULL)
        return vit_fail(VIT_EIO, "%s: cannot open (%s)", path, strerror(errno));
    if (fstat(fileno(fp), &st) != 0) {
        rc = vit_fail(VIT_EIO, "%s: cannot stat (%s)", path, strerror(errno));
        fclose(fp);
        return rc;
    }
    memset(&g, 0, sizeof g);
    d.err = jpeg_std_error(&g.mgr);
    g.mgr.error_exit = on_error;
    g.mgr.emit_message = on_message;
    g.progress.progress_monitor = on_progress;
    if (setjmp(g.back) == 0) {
        jpeg_create_decompress(&d);
        d.progress = &g.progress;
        jpeg_stdio_src(&d, fp);
        rc = decode(&d, path, (long long)st.st_size, &px, &row, &g.h, &g.w, &g.c);
    } else if (ferror(fp)) {
        rc = vit_fail(VIT_EIO, "%s: read error", path);
    } else if (g.ours) {
        rc = vit_fail(VIT_EFORMAT, "%s: %s", path, g.msg);
    } else {
        rc = vit_fail(VIT_EFORMAT, "%s: corrupt JPEG (libjpeg: %s)", path, g.msg);
    }
    jpeg_destroy_decompress(&d);
    fclose(fp);
    free(row);
    if (rc != VIT_OK) {
        free(px);
        return rc;
    }
    *pixels = px;
    *height = g.h;
    *width = g.w;
    *channels = g.c;
    return VIT_OK;
}

#else /* !VIT_HAVE_JPEG */

int vit_data_internal_read_jpeg(const char *path, vit_real **pixels, int *height, int *width,
                                int *channels)
{
    *pixels = NULL;
    *height = *width = *channels = 0;
    return vit_fail(VIT_EFORMAT, "%s: a JPEG file, but this libvit was built without JPEG "
                    "support (libjpeg)", path);
}

#endif
