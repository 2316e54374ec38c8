/* Checkpoint files: portable little-endian encoding, atomic replacement on
 * write, and a reader that trusts nothing in the file.  The byte layout is
 * documented in include/vit/checkpoint.h. */
#include "vit/checkpoint.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "atomic_file_internal.h"
#include "checkpoint_internal.h"
#include "error.h"

_Static_assert(sizeof(float) == 4, "float must be IEEE 754 binary32");

static const char ckpt_magic[8] = {'V', 'I', 'T', 'C', 'K', 'P', 'T', '1'};

/* Smallest possible tensor record: u16 name length, a 1-byte name, u32
 * ndim, one u64 dim and one float32 value.  Bounds the tensor count a
 * file of a given length can hold. */
#define MIN_TENSOR_RECORD (2 + 1 + 4 + 8 + 4)

/* ---- little-endian encoding, one byte at a time ---- */

static void put_u16(unsigned char *b, unsigned v)
{
    b[0] = (unsigned char)(v & 0xff);
    b[1] = (unsigned char)((v >> 8) & 0xff);
}

static void put_u32(unsigned char *b, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        b[i] = (unsigned char)((v >> (8 * i)) & 0xff);
}

static void put_u64(unsigned char *b, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        b[i] = (unsigned char)((v >> (8 * i)) & 0xff);
}

static unsigned get_u16(const unsigned char *b) { return (unsigned)b[0] | (unsigned)b[1] << 8; }

static uint32_t get_u32(const unsigned char *b)
{
    uint32_t v = 0;
    for (int i = 3; i >= 0; i--)
        v = (v << 8) | b[i];
    return v;
}

static uint64_t get_u64(const unsigned char *b)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = (v << 8) | b[i];
    return v;
}

/* float32 bit pattern <-> u32, through memcpy to stay within the aliasing
 * rules. */
static uint32_t float_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

static float bits_float(uint32_t u)
{
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* zlib's crc32 takes a 32-bit length; feed large buffers in pieces. */
static uint32_t crc_update(uint32_t crc, const unsigned char *p, size_t n)
{
    uLong c = crc;
    while (n > 0) {
        uInt k = n > (1u << 30) ? (1u << 30) : (uInt)n;
        c = crc32(c, p, k);
        p += k;
        n -= k;
    }
    return (uint32_t)c;
}

static void errno_text(int err, char *buf, size_t size)
{
    if (strerror_r(err, buf, size) != 0)
        snprintf(buf, size, "error %d", err);
}

/* ---- writing ---- */

/* Number of values of a tensor, or 0 (with a message) when its shape is
 * invalid or the byte count would overflow. */
static size_t tensor_count(const vit_ckpt_tensor *t, int idx, int *rc)
{
    const char *fn = "vit_ckpt_write";
    if (t->ndim < 1 || t->ndim > 4) {
        *rc = vit_fail(VIT_EINVAL, "%s: tensors[%d].ndim = %d must be in 1..4", fn, idx, t->ndim);
        return 0;
    }
    size_t count = 1;
    for (int k = 0; k < t->ndim; k++) {
        if (t->dims[k] < 1) {
            *rc = vit_fail(VIT_EINVAL, "%s: tensors[%d] ('%s') dims[%d] = %lld must be >= 1", fn,
                           idx, t->name, k, t->dims[k]);
            return 0;
        }
        if ((unsigned long long)t->dims[k] > SIZE_MAX / 4 / count) {
            *rc = vit_fail(VIT_ENOMEM, "%s: tensors[%d] ('%s') is too large", fn, idx, t->name);
            return 0;
        }
        count *= (size_t)t->dims[k];
    }
    return count;
}

/* Everything that can be wrong with c, checked before any file exists. */
static int validate_for_write(const vit_ckpt *c)
{
    const char *fn = "vit_ckpt_write";
    if (c->ntensors < 0)
        return vit_fail(VIT_EINVAL, "%s: ntensors = %d is negative", fn, c->ntensors);
    if (c->ntensors > 0 && c->tensors == NULL)
        return vit_fail(VIT_EINVAL, "%s: tensors is NULL with ntensors = %d", fn, c->ntensors);
    if (c->norder < 0 || (c->norder > 0 && c->order == NULL))
        return vit_fail(VIT_EINVAL, "%s: norder = %d with order %s", fn, c->norder,
                        c->order ? "set" : "NULL");
    for (int i = 0; i < c->norder; i++)
        if (c->order[i] < 0)
            return vit_fail(VIT_EINVAL, "%s: order[%d] = %d is negative", fn, i, c->order[i]);
    if (c->nclass_names < 0 || c->nclass_names > VIT_CKPT_CLASSES_MAX ||
        (c->nclass_names > 0 && c->class_names == NULL))
        return vit_fail(VIT_EINVAL, "%s: nclass_names = %d (0 .. %d) with class_names %s", fn,
                        c->nclass_names, VIT_CKPT_CLASSES_MAX, c->class_names ? "set" : "NULL");
    for (int i = 0; i < c->nclass_names; i++) {
        const char *name = c->class_names[i];
        size_t len = name ? strlen(name) : 0;
        if (len < 1 || len >= VIT_CKPT_CLASS_NAME_MAX)
            return vit_fail(VIT_EINVAL, "%s: class_names[%d] is %s (a class name is 1 .. %d bytes)",
                            fn, i, !name ? "NULL" : len ? "too long" : "empty",
                            VIT_CKPT_CLASS_NAME_MAX - 1);
    }
    if (c->config && strlen(c->config) > UINT32_MAX)
        return vit_fail(VIT_EINVAL, "%s: config text is longer than 4 GiB", fn);
    if (c->data && strlen(c->data) > VIT_CKPT_DATA_MAX)
        return vit_fail(VIT_EINVAL, "%s: data record is longer than %d bytes", fn, VIT_CKPT_DATA_MAX);
    for (int i = 0; i < c->ntensors; i++) {
        const vit_ckpt_tensor *t = &c->tensors[i];
        const char *nul = memchr(t->name, '\0', sizeof t->name);
        if (nul == NULL)
            return vit_fail(VIT_EINVAL, "%s: tensors[%d].name is not NUL-terminated within %d bytes",
                            fn, i, VIT_CKPT_NAME_MAX);
        if (nul == t->name)
            return vit_fail(VIT_EINVAL, "%s: tensors[%d].name is empty", fn, i);
        for (int j = 0; j < i; j++)
            if (strcmp(c->tensors[j].name, t->name) == 0)
                return vit_fail(VIT_EINVAL, "%s: tensors[%d] and tensors[%d] are both named '%s'",
                                fn, j, i, t->name);
        int rc = VIT_OK;
        size_t count = tensor_count(t, i, &rc);
        if (rc)
            return rc;
        if (t->data == NULL)
            return vit_fail(VIT_EINVAL, "%s: tensors[%d] ('%s') data is NULL", fn, i, t->name);
        /* Check the value that will be stored: a finite double beyond
         * FLT_MAX becomes infinity as float32 and would make the file
         * unreadable. */
        for (size_t k = 0; k < count; k++)
            if (!isfinite((float)t->data[k]))
                return vit_fail(VIT_ENUM, "%s: tensor '%s' value [%zu] = %g is not finite as float32",
                                fn, t->name, k, (double)t->data[k]);
    }
    return VIT_OK;
}

/* Output file plus the running CRC; err holds the errno of the first
 * failure and turns every later write into a no-op. */
typedef struct ckpt_writer {
    FILE *f;
    uint32_t crc;
    int err;
} ckpt_writer;

static void w_bytes(ckpt_writer *w, const unsigned char *p, size_t n)
{
    if (w->err || n == 0)
        return;
    w->crc = crc_update(w->crc, p, n);
    errno = 0;
    if (fwrite(p, 1, n, w->f) != n)
        w->err = errno ? errno : EIO;
}

static void w_u16(ckpt_writer *w, unsigned v)
{
    unsigned char b[2];
    put_u16(b, v);
    w_bytes(w, b, 2);
}

static void w_u32(ckpt_writer *w, uint32_t v)
{
    unsigned char b[4];
    put_u32(b, v);
    w_bytes(w, b, 4);
}

static void w_u64(ckpt_writer *w, uint64_t v)
{
    unsigned char b[8];
    put_u64(b, v);
    w_bytes(w, b, 8);
}

/* Values go out in blocks so that the CRC and fwrite see large runs. */
static void w_values(ckpt_writer *w, const vit_real *x, size_t n)
{
    unsigned char block[4096];
    while (n > 0 && !w->err) {
        size_t k = n < sizeof block / 4 ? n : sizeof block / 4;
        for (size_t i = 0; i < k; i++)
            put_u32(block + 4 * i, float_bits((float)x[i]));
        w_bytes(w, block, 4 * k);
        x += k;
        n -= k;
    }
}

static void w_checkpoint(ckpt_writer *w, const vit_ckpt *c)
{
    w_bytes(w, (const unsigned char *)ckpt_magic, sizeof ckpt_magic);
    w_u32(w, VIT_CKPT_VERSION);
    w_u32(w, (uint32_t)sizeof(vit_real));
    w_u64(w, c->step);
    w_u64(w, c->epoch);
    for (int i = 0; i < 4; i++)
        w_u64(w, c->rng[i]);
    w_u64(w, c->epoch_step);
    for (int i = 0; i < 3; i++) {
        uint64_t bits;
        memcpy(&bits, &c->epoch_sums[i], 8);
        w_u64(w, bits);
    }
    w_u32(w, (uint32_t)c->norder);
    for (int i = 0; i < c->norder; i++)
        w_u32(w, (uint32_t)c->order[i]);
    size_t clen = c->config ? strlen(c->config) : 0;
    w_u32(w, (uint32_t)clen);
    w_bytes(w, (const unsigned char *)c->config, clen);
    w_u32(w, (uint32_t)c->nclass_names);
    for (int i = 0; i < c->nclass_names; i++) {
        size_t nlen = strlen(c->class_names[i]);
        w_u16(w, (unsigned)nlen);
        w_bytes(w, (const unsigned char *)c->class_names[i], nlen);
    }
    size_t dlen = c->data ? strlen(c->data) : 0;
    w_u32(w, (uint32_t)dlen);
    w_bytes(w, (const unsigned char *)c->data, dlen);
    w_u32(w, (uint32_t)c->ntensors);
    for (int i = 0; i < c->ntensors; i++) {
        const vit_ckpt_tensor *t = &c->tensors[i];
        size_t nlen = strlen(t->name);
        w_u16(w, (unsigned)nlen);
        w_bytes(w, (const unsigned char *)t->name, nlen);
        w_u32(w, (uint32_t)t->ndim);
        size_t count = 1;
        for (int k = 0; k < t->ndim; k++) {
            w_u64(w, (uint64_t)t->dims[k]);
            count *= (size_t)t->dims[k];
        }
        w_values(w, t->data, count);
    }
    /* The CRC covers everything before it, so it is computed before being
     * written and does not feed into itself. */
    uint32_t crc = w->crc;
    w_u32(w, crc);
}

static int write_failed(const char *path, const char *step, int err)
{
    char why[128];
    errno_text(err, why, sizeof why);
    return vit_fail(VIT_EIO, "vit_ckpt_write: '%s': %s failed: %s", path, step, why);
}

/* vit_ckpt_write's contents, for the library's one writer. */
typedef struct ckpt_fill_ctx {
    const char *path;
    const vit_ckpt *c;
} ckpt_fill_ctx;

/* c, checked, to f, CRC included. */
static int stream(FILE *f, const vit_ckpt *c, const char *path)
{
    ckpt_writer w = {f, (uint32_t)crc32(0L, Z_NULL, 0), 0};
    w_checkpoint(&w, c);
    return w.err ? write_failed(path, "writing", w.err) : VIT_OK;
}

static int ckpt_fill(FILE *f, void *ctx)
{
    const ckpt_fill_ctx *x = ctx;
    return stream(f, x->c, x->path);
}

int vit_ckpt_write(const char *path, const vit_ckpt *c)
{
    const char *fn = "vit_ckpt_write";
    int rc;
    if ((rc = vit_check_ptr(fn, "path", path)) || (rc = vit_check_ptr(fn, "c", c)))
        return rc;
    if ((rc = validate_for_write(c)))
        return rc;
    ckpt_fill_ctx x = {path, c};
    return vit_atomic_write(fn, path, ckpt_fill, &x);
}

int vit_ckpt_stream(FILE *f, const vit_ckpt *c, const char *path)
{
    int rc = validate_for_write(c);
    return rc ? rc : stream(f, c, path);
}

/* ---- reading ---- */

/* The file (or its first len bytes, when reading the header alone) in
 * memory and a cursor.  Every read goes through need(), which compares
 * against the bytes in memory; lengths are checked against the real file
 * length, file_len. */
typedef struct ckpt_reader {
    const char *path;
    const unsigned char *buf;
    size_t len, pos, file_len;
} ckpt_reader;

/* need()'s answer when the bytes are in the file but not yet in memory
 * (a header read then reads more of the file); never returned outside. */
#define CKPT_MORE 1

static int need(const ckpt_reader *r, size_t n, const char *what)
{
    if (n > r->len - r->pos && r->len < r->file_len)
        return CKPT_MORE;
    if (n > r->len - r->pos)
        return vit_fail(VIT_EFORMAT,
                        "vit_ckpt_read: '%s': truncated at byte %zu (%s needs %zu bytes at offset %zu)",
                        r->path, r->len, what, n, r->pos);
    return VIT_OK;
}

static int bad(const ckpt_reader *r, const char *problem)
{
    return vit_fail(VIT_EFORMAT, "vit_ckpt_read: '%s': %s (at byte %zu)", r->path, problem, r->pos);
}

static int r_u16(ckpt_reader *r, unsigned *v, const char *what)
{
    int rc = need(r, 2, what);
    if (rc == VIT_OK) {
        *v = get_u16(r->buf + r->pos);
        r->pos += 2;
    }
    return rc;
}

static int r_u32(ckpt_reader *r, uint32_t *v, const char *what)
{
    int rc = need(r, 4, what);
    if (rc == VIT_OK) {
        *v = get_u32(r->buf + r->pos);
        r->pos += 4;
    }
    return rc;
}

static int r_u64(ckpt_reader *r, uint64_t *v, const char *what)
{
    int rc = need(r, 8, what);
    if (rc == VIT_OK) {
        *v = get_u64(r->buf + r->pos);
        r->pos += 8;
    }
    return rc;
}

/* Loads the file, or its first max bytes, into a new buffer of *len
 * bytes.  The file's length *file_len comes from fstat and is the ground
 * truth every field is later checked against. */
static int load_file(const char *path, size_t max, unsigned char **out, size_t *len,
                     size_t *file_len)
{
    char why[128];
    FILE *f = fopen(path, "rb");
    if (f == NULL) {
        errno_text(errno, why, sizeof why);
        return vit_fail(VIT_EIO, "vit_ckpt_read: cannot open '%s': %s", path, why);
    }
    struct stat st;
    if (fstat(fileno(f), &st) != 0) {
        errno_text(errno, why, sizeof why);
        fclose(f);
        return vit_fail(VIT_EIO, "vit_ckpt_read: cannot stat '%s': %s", path, why);
    }
    if (!S_ISREG(st.st_mode)) {
        fclose(f);
        return vit_fail(VIT_EIO, "vit_ckpt_read: '%s' is not a regular file", path);
    }
    if ((unsigned long long)st.st_size > SIZE_MAX - 1) {
        fclose(f);
        return vit_fail(VIT_ENOMEM, "vit_ckpt_read: '%s' is too large to load", path);
    }
    *file_len = (size_t)st.st_size;
    size_t n = *file_len < max ? *file_len : max;
    unsigned char *buf = malloc(n ? n : 1);
    if (buf == NULL) {
        fclose(f);
        return vit_fail(VIT_ENOMEM, "vit_ckpt_read: '%s': cannot allocate %zu bytes", path, n);
    }
    size_t got = fread(buf, 1, n, f);
    int read_err = ferror(f) ? errno : 0;
    fclose(f);
    if (got != n) {
        free(buf);
        if (read_err) {
            errno_text(read_err, why, sizeof why);
            return vit_fail(VIT_EIO, "vit_ckpt_read: cannot read '%s': %s", path, why);
        }
        return vit_fail(VIT_EIO, "vit_ckpt_read: '%s' shrank while being read", path);
    }
    *out = buf;
    *len = n;
    return VIT_OK;
}

/* Format 2's position inside an epoch: step, sums and the order, whose
 * length is checked against the bytes left before it is allocated. */
static int parse_position(ckpt_reader *r, vit_ckpt *c)
{
    uint64_t v;
    int rc;
    if ((rc = r_u64(r, &v, "epoch step")))
        return rc;
    c->epoch_step = v;
    for (int i = 0; i < 3; i++) {
        if ((rc = r_u64(r, &v, "epoch sums")))
            return rc;
        memcpy(&c->epoch_sums[i], &v, 8);
    }
    uint32_t n;
    if ((rc = r_u32(r, &n, "order length")))
        return rc;
    if (n > INT_MAX || n > (r->file_len - r->pos) / 4)
        return vit_fail(VIT_EFORMAT,
                        "vit_ckpt_read: '%s': order length %u cannot fit in the %zu bytes left "
                        "(truncated or corrupt)",
                        r->path, (unsigned)n, r->file_len - r->pos);
    if (n == 0)
        return VIT_OK;
    if ((rc = need(r, (size_t)n * 4, "order")))
        return rc; /* only when reading the header alone: more of the file */
    c->order = malloc((size_t)n * sizeof *c->order);
    if (c->order == NULL)
        return vit_fail(VIT_ENOMEM, "vit_ckpt_read: '%s': cannot allocate the order", r->path);
    c->norder = (int)n;
    for (uint32_t i = 0; i < n; i++) {
        uint32_t x = get_u32(r->buf + r->pos);
        r->pos += 4;
        if (x > INT_MAX)
            return bad(r, "order value above 2^31 - 1");
        c->order[i] = (int)x;
    }
    return VIT_OK;
}

/* Format 2's class names.  The count is checked against its limit and
 * the bytes left (each name takes at least 3) before anything is
 * allocated; each name is counted as soon as it exists, so vit_ckpt_free
 * releases exactly what was allocated if a later one fails. */
static int parse_class_names(ckpt_reader *r, vit_ckpt *c)
{
    uint32_t n;
    int rc;
    if ((rc = r_u32(r, &n, "class name count")))
        return rc;
    if (n > VIT_CKPT_CLASSES_MAX || n > (r->file_len - r->pos) / 3)
        return vit_fail(VIT_EFORMAT,
                        "vit_ckpt_read: '%s': class name count %u is above %d or cannot fit in the "
                        "%zu bytes left (truncated or corrupt)",
                        r->path, (unsigned)n, VIT_CKPT_CLASSES_MAX, r->file_len - r->pos);
    if (n == 0)
        return VIT_OK;
    c->class_names = calloc(n, sizeof *c->class_names);
    if (c->class_names == NULL)
        return vit_fail(VIT_ENOMEM, "vit_ckpt_read: '%s': cannot allocate %u class names", r->path,
                        (unsigned)n);
    for (uint32_t i = 0; i < n; i++) {
        unsigned len;
        if ((rc = r_u16(r, &len, "class name length")))
            return rc;
        if (len < 1 || len >= VIT_CKPT_CLASS_NAME_MAX)
            return vit_fail(VIT_EFORMAT,
                            "vit_ckpt_read: '%s': class name %u length %u not in 1..%d", r->path,
                            (unsigned)i, len, VIT_CKPT_CLASS_NAME_MAX - 1);
        if ((rc = need(r, len, "class name")))
            return rc;
        if (memchr(r->buf + r->pos, '\0', len) != NULL)
            return bad(r, "class name contains a NUL byte");
        if ((c->class_names[i] = malloc((size_t)len + 1)) == NULL)
            return vit_fail(VIT_ENOMEM, "vit_ckpt_read: '%s': cannot allocate a class name",
                            r->path);
        c->nclass_names = (int)i + 1;
        memcpy(c->class_names[i], r->buf + r->pos, len);
        c->class_names[i][len] = '\0';
        r->pos += len;
    }
    return VIT_OK;
}

/* Format 5's data record: text like the config's, without NUL bytes. */
static int parse_data_text(ckpt_reader *r, vit_ckpt *c)
{
    uint32_t dlen;
    int rc;
    if ((rc = r_u32(r, &dlen, "data record length")) || (rc = need(r, dlen, "data record")))
        return rc;
    if (dlen > VIT_CKPT_DATA_MAX)
        return vit_fail(VIT_EFORMAT, "vit_ckpt_read: '%s': data record of %u bytes (at most %d)",
                        r->path, (unsigned)dlen, VIT_CKPT_DATA_MAX);
    if (memchr(r->buf + r->pos, '\0', dlen) != NULL)
        return bad(r, "data record contains a NUL byte");
    if (dlen == 0)
        return VIT_OK;
    if ((c->data = malloc((size_t)dlen + 1)) == NULL)
        return vit_fail(VIT_ENOMEM, "vit_ckpt_read: '%s': cannot allocate the data record", r->path);
    memcpy(c->data, r->buf + r->pos, dlen);
    c->data[dlen] = '\0';
    r->pos += dlen;
    return VIT_OK;
}

/* Fixed header up to and including the config text (and, from format 2,
 * the class names after it). */
static int parse_header(ckpt_reader *r, vit_ckpt *c)
{
    int rc;
    if ((rc = need(r, sizeof ckpt_magic, "magic")))
        return rc;
    if (memcmp(r->buf, ckpt_magic, sizeof ckpt_magic) != 0)
        return bad(r, "bad magic, not a vit checkpoint");
    r->pos += sizeof ckpt_magic;
    uint32_t version, real_size;
    if ((rc = r_u32(r, &version, "format version")))
        return rc;
    if (version < VIT_CKPT_VERSION_MIN || version > VIT_CKPT_VERSION)
        return vit_fail(VIT_EFORMAT,
                        "vit_ckpt_read: '%s': unsupported format version %u (this build reads %d to %d)",
                        r->path, (unsigned)version, VIT_CKPT_VERSION_MIN, VIT_CKPT_VERSION);
    c->version = (unsigned)version;
    if ((rc = r_u32(r, &real_size, "real size")))
        return rc;
    if (real_size != 4 && real_size != 8)
        return vit_fail(VIT_EFORMAT, "vit_ckpt_read: '%s': writer real size %u is neither 4 nor 8",
                        r->path, (unsigned)real_size);
    uint64_t v;
    if ((rc = r_u64(r, &v, "step")))
        return rc;
    c->step = v;
    if ((rc = r_u64(r, &v, "epoch")))
        return rc;
    c->epoch = v;
    for (int i = 0; i < 4; i++) {
        if ((rc = r_u64(r, &v, "rng state")))
            return rc;
        c->rng[i] = v;
    }
    if (version >= 2 && (rc = parse_position(r, c)))
        return rc;
    uint32_t clen;
    if ((rc = r_u32(r, &clen, "config length")) || (rc = need(r, clen, "config text")))
        return rc;
    if (memchr(r->buf + r->pos, '\0', clen) != NULL)
        return bad(r, "config text contains a NUL byte");
    c->config = malloc((size_t)clen + 1);
    if (c->config == NULL)
        return vit_fail(VIT_ENOMEM, "vit_ckpt_read: '%s': cannot allocate the config", r->path);
    memcpy(c->config, r->buf + r->pos, clen);
    c->config[clen] = '\0';
    r->pos += clen;
    if (version >= 2 && (rc = parse_class_names(r, c)))
        return rc;
    return version >= 5 ? parse_data_text(r, c) : VIT_OK;
}

/* Where the first non-finite value sits, reported only after the CRC has
 * been checked, so a flipped bit reads as "checksum mismatch". */
typedef struct bad_value {
    int tensor;
    size_t index;
} bad_value;

/* One tensor record into t.  Dims are checked against the bytes left
 * before data is allocated. */
static int parse_tensor(ckpt_reader *r, vit_ckpt *c, int idx, bad_value *nonfinite)
{
    const char *path = r->path;
    vit_ckpt_tensor *t = &c->tensors[idx];
    unsigned nlen;
    int rc;
    if ((rc = r_u16(r, &nlen, "tensor name length")))
        return rc;
    if (nlen < 1 || nlen >= VIT_CKPT_NAME_MAX)
        return vit_fail(VIT_EFORMAT, "vit_ckpt_read: '%s': tensor %d name length %u not in 1..%d",
                        path, idx, nlen, VIT_CKPT_NAME_MAX - 1);
    if ((rc = need(r, nlen, "tensor name")))
        return rc;
    if (memchr(r->buf + r->pos, '\0', nlen) != NULL)
        return bad(r, "tensor name contains a NUL byte");
    memcpy(t->name, r->buf + r->pos, nlen);
    t->name[nlen] = '\0';
    r->pos += nlen;
    for (int j = 0; j < idx; j++)
        if (strcmp(c->tensors[j].name, t->name) == 0)
            return vit_fail(VIT_EFORMAT, "vit_ckpt_read: '%s': tensor name '%s' appears twice",
                            path, t->name);

    uint32_t ndim;
    if ((rc = r_u32(r, &ndim, "tensor ndim")))
        return rc;
    if (ndim < 1 || ndim > 4)
        return vit_fail(VIT_EFORMAT, "vit_ckpt_read: '%s': tensor '%s' ndim %u not in 1..4", path,
                        t->name, (unsigned)ndim);
    t->ndim = (int)ndim;
    uint64_t dims[4];
    for (uint32_t k = 0; k < ndim; k++)
        if ((rc = r_u64(r, &dims[k], "tensor dims")))
            return rc;
    /* The values must fit in what is left of the file; checking each
     * factor against that bound keeps the product from overflowing and
     * caps the allocation at the file size. */
    uint64_t room = (uint64_t)(r->len - r->pos) / 4, count = 1;
    for (uint32_t k = 0; k < ndim; k++) {
        if (dims[k] == 0)
            return vit_fail(VIT_EFORMAT, "vit_ckpt_read: '%s': tensor '%s' dims[%u] is 0", path,
                            t->name, (unsigned)k);
        if (dims[k] > room / count)
            return vit_fail(VIT_EFORMAT,
                            "vit_ckpt_read: '%s': tensor '%s' dims[%u] = %llu exceeds the %zu bytes "
                            "left in the file (truncated or corrupt)",
                            path, t->name, (unsigned)k, (unsigned long long)dims[k],
                            r->len - r->pos);
        count *= dims[k];
        t->dims[k] = (long long)dims[k];
    }
    t->data = malloc((size_t)count * sizeof(vit_real));
    if (t->data == NULL)
        return vit_fail(VIT_ENOMEM, "vit_ckpt_read: '%s': cannot allocate tensor '%s'", path,
                        t->name);
    const unsigned char *p = r->buf + r->pos;
    for (size_t i = 0; i < (size_t)count; i++) {
        float f = bits_float(get_u32(p + 4 * i));
        if (!isfinite(f) && nonfinite->tensor < 0) {
            nonfinite->tensor = idx;
            nonfinite->index = i;
        }
        t->data[i] = (vit_real)f;
    }
    r->pos += 4 * (size_t)count;
    return VIT_OK;
}

static int parse(ckpt_reader *r, vit_ckpt *c)
{
    int rc;
    if ((rc = parse_header(r, c)))
        return rc;
    uint32_t ntensors;
    if ((rc = r_u32(r, &ntensors, "tensor count")))
        return rc;
    if (ntensors > INT_MAX || ntensors > (r->len - r->pos) / MIN_TENSOR_RECORD)
        return vit_fail(VIT_EFORMAT,
                        "vit_ckpt_read: '%s': tensor count %u cannot fit in the %zu bytes left "
                        "(truncated or corrupt)",
                        r->path, (unsigned)ntensors, r->len - r->pos);
    if (ntensors > 0) {
        c->tensors = calloc(ntensors, sizeof *c->tensors);
        if (c->tensors == NULL)
            return vit_fail(VIT_ENOMEM, "vit_ckpt_read: '%s': cannot allocate %u tensors", r->path,
                            (unsigned)ntensors);
    }
    bad_value nonfinite = {-1, 0};
    for (uint32_t i = 0; i < ntensors; i++) {
        /* Count each tensor as soon as it exists so that vit_ckpt_free
         * releases exactly what has been allocated if a later one fails. */
        c->ntensors = (int)i + 1;
        if ((rc = parse_tensor(r, c, (int)i, &nonfinite)))
            return rc;
    }
    if (r->len - r->pos < 4)
        return need(r, 4, "checksum");
    if (r->len - r->pos > 4)
        return vit_fail(VIT_EFORMAT, "vit_ckpt_read: '%s': %zu unexpected bytes after the last tensor",
                        r->path, r->len - r->pos - 4);
    uint32_t stored = get_u32(r->buf + r->pos);
    uint32_t computed = crc_update((uint32_t)crc32(0L, Z_NULL, 0), r->buf, r->pos);
    if (stored != computed)
        return vit_fail(VIT_EFORMAT,
                        "vit_ckpt_read: '%s': checksum mismatch (stored %08x, computed %08x)", r->path,
                        (unsigned)stored, (unsigned)computed);
    if (nonfinite.tensor >= 0)
        return vit_fail(VIT_ENUM, "vit_ckpt_read: '%s': tensor '%s' value [%zu] is not finite",
                        r->path, c->tensors[nonfinite.tensor].name, nonfinite.index);
    return VIT_OK;
}

/* The checks both readers start with: c and path not NULL (c cleared
 * first, so that vit_ckpt_free is safe after any failure). */
static int check_read_args(const char *fn, const char *path, vit_ckpt *c)
{
    int rc;
    if ((rc = vit_check_ptr(fn, "c", c)))
        return rc;
    memset(c, 0, sizeof *c);
    return vit_check_ptr(fn, "path", path);
}

/* Loads at most max bytes of path and parses them into *c with parse_fn;
 * on failure *c is freed (cleared). */
static int load_and_parse(const char *path, size_t max, vit_ckpt *c,
                          int (*parse_fn)(ckpt_reader *, vit_ckpt *))
{
    unsigned char *buf = NULL;
    size_t len = 0, file_len = 0;
    int rc = load_file(path, max, &buf, &len, &file_len);
    if (rc)
        return rc;
    ckpt_reader r = {path, buf, len, 0, file_len};
    rc = parse_fn(&r, c);
    free(buf);
    if (rc)
        vit_ckpt_free(c);
    return rc;
}

int vit_ckpt_read(const char *path, vit_ckpt *c)
{
    int rc = check_read_args("vit_ckpt_read", path, c);
    return rc ? rc : load_and_parse(path, SIZE_MAX, c, parse);
}

/* The header from the file's first 64 KiB, or from four times as many
 * bytes while it needs more, up to the whole file. */
int vit_ckpt_read_header(const char *path, vit_ckpt *c)
{
    int rc = check_read_args("vit_ckpt_read_header", path, c);
    if (rc)
        return rc;
    for (size_t max = (size_t)1 << 16;; max = max > SIZE_MAX / 4 ? SIZE_MAX : max * 4)
        if ((rc = load_and_parse(path, max, c, parse_header)) != CKPT_MORE)
            return rc;
}

void vit_ckpt_free(vit_ckpt *c)
{
    if (c == NULL)
        return;
    if (c->tensors)
        for (int i = 0; i < c->ntensors; i++)
            free(c->tensors[i].data);
    free(c->tensors);
    free(c->config);
    free(c->data);
    free(c->order);
    if (c->class_names)
        for (int i = 0; i < c->nclass_names; i++)
            free(c->class_names[i]);
    free(c->class_names);
    memset(c, 0, sizeof *c);
}

const vit_ckpt_tensor *vit_ckpt_find(const vit_ckpt *c, const char *name)
{
    if (c == NULL || name == NULL || c->tensors == NULL)
        return NULL;
    for (int i = 0; i < c->ntensors; i++)
        if (strcmp(c->tensors[i].name, name) == 0)
            return &c->tensors[i];
    return NULL;
}

void vit_ckpt_remove_temporaries(const char *path) { vit_atomic_remove_temporaries(path); }
