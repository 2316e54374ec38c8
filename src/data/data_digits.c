/* The 8x8 digits CSV (data/digits.csv.gz): one image a line, 64 pixel counts
 * 0..16 and a label 0..9.  zlib's gzopen reads gzip and plain text alike, so
 * one code path serves both. */
#include "vit/data.h"
#include "data_internal.h"
#include "error.h"

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#define DIGITS_SIDE 8
#define DIGITS_PIXELS (DIGITS_SIDE * DIGITS_SIDE)
#define DIGITS_FIELDS (DIGITS_PIXELS + 1) /* pixels, then the label */
#define DIGITS_MAXVAL 16
#define DIGITS_CLASSES 10

/* The parsed file: one record of DIGITS_FIELDS bytes per line, grown by
 * doubling since the line count is only known at the end. */
typedef struct {
    unsigned char *rec;
    int n, cap;
} records;

static int records_push(records *r, const char *path)
{
    if (r->n == r->cap) {
        unsigned char *p;
        if (r->cap > INT_MAX / 2)
            return vit_fail(VIT_ENOMEM, "%s: too many lines", path);
        int cap = r->cap ? 2 * r->cap : 256;
        p = realloc(r->rec, (size_t)cap * DIGITS_FIELDS);
        if (p == NULL)
            return vit_fail(VIT_ENOMEM, "%s: out of memory after %d lines", path, r->n);
        r->rec = p;
        r->cap = cap;
    }
    r->n++;
    return VIT_OK;
}

static int is_blank(const char *s)
{
    while (*s != '\0' && isspace((unsigned char)*s))
        s++;
    return *s == '\0';
}

/* Parses one line (newline stripped) into out[DIGITS_FIELDS]. */
static int parse_line(const char *path, int lineno, char *line, unsigned char *out)
{
    int fields = 1;
    for (const char *c = line; *c != '\0'; c++)
        fields += *c == ',';
    if (fields != DIGITS_FIELDS)
        return vit_fail(VIT_EFORMAT, "%s:%d: %d fields, expected %d (%d pixels and a label)",
                        path, lineno, fields, DIGITS_FIELDS, DIGITS_PIXELS);

    char *p = line;
    for (int i = 0; i < DIGITS_FIELDS; i++) {
        char *end;
        const char *what = i < DIGITS_PIXELS ? "pixel" : "label";
        long maxval = i < DIGITS_PIXELS ? DIGITS_MAXVAL : DIGITS_CLASSES - 1;
        int len = (int)strcspn(p, ",");
        errno = 0;
        long v = strtol(p, &end, 10);
        while (end < p + len && isspace((unsigned char)*end))
            end++; /* trailing spaces are fine, other junk is not */
        if (end == p || end != p + len)
            return vit_fail(VIT_EFORMAT, "%s:%d: field %d (%s) '%.*s' is not an integer",
                            path, lineno, i + 1, what, len > 20 ? 20 : len, p);
        if (errno == ERANGE || v < 0 || v > maxval)
            return vit_fail(VIT_EFORMAT, "%s:%d: field %d (%s) = %.*s is out of range 0..%ld",
                            path, lineno, i + 1, what, len > 20 ? 20 : len, p, maxval);
        out[i] = (unsigned char)v;
        p += len + (p[len] == ',');
    }
    return VIT_OK;
}

/* Reads every line of the file into r.  A line without a final newline is
 * either the last line of a clean file or the sign of a truncated stream;
 * gzerror tells which. */
static int read_records(gzFile f, const char *path, records *r)
{
    char buf[1024];
    int lineno = 0, first_blank = 0, err, rc;
    while (gzgets(f, buf, (int)sizeof buf) != NULL) {
        size_t len = strlen(buf);
        lineno++;
        if (len == 0 || buf[len - 1] != '\n') {
            if (len == sizeof buf - 1)
                return vit_fail(VIT_EFORMAT, "%s:%d: line longer than %d characters",
                                path, lineno, (int)sizeof buf - 2);
            const char *msg = vit_data_internal_zlib_message(f, path, &err);
            if (err != Z_OK)
                return vit_fail(err == Z_ERRNO ? VIT_EIO : VIT_EFORMAT,
                                "%s:%d: file is truncated or corrupt (zlib: %s)",
                                path, lineno, msg);
        }
        while (len > 0 && (buf[len - 1] == '\n' || buf[len - 1] == '\r'))
            buf[--len] = '\0';
        if (is_blank(buf)) {
            if (first_blank == 0)
                first_blank = lineno;
            continue;
        }
        if (first_blank != 0)
            return vit_fail(VIT_EFORMAT, "%s:%d: blank line in the middle of the data",
                            path, first_blank);
        if ((rc = records_push(r, path)))
            return rc;
        if ((rc = parse_line(path, lineno, buf, r->rec + (size_t)(r->n - 1) * DIGITS_FIELDS)))
            return rc;
    }
    const char *msg = vit_data_internal_zlib_message(f, path, &err);
    if (err != Z_OK)
        return vit_fail(err == Z_ERRNO ? VIT_EIO : VIT_EFORMAT,
                        "%s:%d: file is truncated or corrupt (zlib: %s)", path, lineno + 1, msg);
    return VIT_OK;
}

/* Copies records [first, first + count) into a freshly allocated ds. */
static int fill(vit_dataset *ds, const records *r, int first, int count, const char *path)
{
    int rc = vit_data_internal_alloc(ds, count, DIGITS_SIDE, DIGITS_SIDE, 1, path);
    if (rc)
        return rc;
    ds->classes = DIGITS_CLASSES;
    for (int i = 0; i < count; i++) {
        const unsigned char *rec = r->rec + (size_t)(first + i) * DIGITS_FIELDS;
        vit_real *img = ds->images + (size_t)i * DIGITS_PIXELS;
        for (int j = 0; j < DIGITS_PIXELS; j++)
            img[j] = (vit_real)rec[j] / (vit_real)DIGITS_MAXVAL;
        ds->labels[i] = rec[DIGITS_PIXELS];
    }
    return vit_data_internal_number_names(ds, path);
}

int vit_data_load_digits(const char *path, int n_train, vit_dataset *train,
                         vit_dataset *test)
{
    static const char *fn = "vit_data_load_digits";
    records r = {NULL, 0, 0};
    gzFile f;
    int rc;
    if ((rc = vit_data_internal_begin(fn, "path", path, train, test)))
        return rc;
    if (n_train < 1 || n_train == INT_MAX)
        return vit_fail(VIT_EINVAL, "%s: n_train must be in 1..%d, got %d", fn, INT_MAX - 1,
                        n_train);

    errno = 0;
    f = gzopen(path, "rb");
    if (f == NULL)
        return vit_fail(errno ? VIT_EIO : VIT_ENOMEM, "%s: cannot open (%s)", path,
                        errno ? strerror(errno) : "out of memory");
    rc = read_records(f, path, &r);
    gzclose(f);
    if (rc == VIT_OK && r.n < n_train + 1)
        rc = vit_fail(VIT_EFORMAT,
                      "%s:%d: file ends after %d data lines; need at least %d (%d to train, "
                      "at least one to test)", path, r.n + 1, r.n, n_train + 1, n_train);
    if (rc == VIT_OK)
        rc = fill(train, &r, 0, n_train, path);
    if (rc == VIT_OK)
        rc = fill(test, &r, n_train, r.n - n_train, path);
    if (rc != VIT_OK) {
        vit_dataset_free(train);
        vit_dataset_free(test);
    }
    free(r.rec);
    return rc;
}
