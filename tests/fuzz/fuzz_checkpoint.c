/*
 * Fuzz harness: the checkpoint reader (vit_ckpt_read) and the training-run
 * loader on top of it (vit_run_load).
 *
 * The input is a checkpoint file.  It is read twice: as it is, and with
 * its last four bytes replaced by the right CRC-32 of the bytes before
 * them, so that mutations get past the checksum and reach the tensor
 * records, the config text and the model built from it.  Checked besides
 * memory safety: failures zero the outputs and leave a message; a
 * successful read holds only tensors that fit in the file, with unique
 * names and finite values, and survives a write and re-read unchanged; a
 * successful run load yields a model whose parameters all came from the
 * file.
 */
#include <math.h>
#include <zlib.h>

#include "fuzz_util.h"
#include "vit/checkpoint.h"
#include "vit/train.h"

static int ckpt_zeroed(const vit_ckpt *c)
{
    return c->step == 0 && c->epoch == 0 && c->config == NULL && c->ntensors == 0 &&
           c->tensors == NULL && c->nclass_names == 0 && c->class_names == NULL;
}

static size_t tensor_count(const vit_ckpt_tensor *t)
{
    size_t n = 1;
    for (int k = 0; k < t->ndim; k++)
        n *= (size_t)t->dims[k];
    return n;
}

static void check_ckpt(const vit_ckpt *c, size_t size)
{
    size_t total = 0;
    FUZZ_CHECK(c->config != NULL && c->ntensors >= 0);
    FUZZ_CHECK(strlen(c->config) <= size);
    /* class names: bounded, each 1..255 bytes, all of them inside the file */
    size_t name_bytes = 0;
    FUZZ_CHECK(c->nclass_names >= 0 && c->nclass_names <= VIT_CKPT_CLASSES_MAX);
    FUZZ_CHECK((c->nclass_names > 0) == (c->class_names != NULL));
    for (int i = 0; i < c->nclass_names; i++) {
        size_t len = strlen(c->class_names[i]);
        FUZZ_CHECK(len >= 1 && len < VIT_CKPT_CLASS_NAME_MAX);
        name_bytes += 2 + len;
    }
    FUZZ_CHECK(name_bytes <= size);
    for (int i = 0; i < c->ntensors; i++) {
        const vit_ckpt_tensor *t = &c->tensors[i];
        FUZZ_CHECK(t->name[0] != '\0' && strlen(t->name) < VIT_CKPT_NAME_MAX);
        FUZZ_CHECK(t->ndim >= 1 && t->ndim <= 4);
        for (int k = 0; k < t->ndim; k++)
            FUZZ_CHECK(t->dims[k] >= 1 && (size_t)t->dims[k] <= size);
        size_t n = tensor_count(t);
        FUZZ_CHECK(n <= size / 4);
        total += n;
        for (size_t j = 0; j < n; j++)
            FUZZ_CHECK(isfinite((double)t->data[j]));
        for (int j = 0; j < i; j++)
            FUZZ_CHECK(strcmp(c->tensors[j].name, t->name) != 0);
        FUZZ_CHECK(vit_ckpt_find(c, t->name) == t);
    }
    FUZZ_CHECK(total <= size / 4);
}

/* What was read must write and read back to the same contents. */
static void check_round_trip(const vit_ckpt *c)
{
    char path[512];
    vit_ckpt d;
    FUZZ_CHECK(vit_ckpt_write(fuzz_path(path, sizeof path, "copy.ckpt"), c) == VIT_OK);
    FUZZ_CHECK(vit_ckpt_read(path, &d) == VIT_OK);
    FUZZ_CHECK(d.step == c->step && d.epoch == c->epoch);
    FUZZ_CHECK(memcmp(d.rng, c->rng, sizeof d.rng) == 0);
    FUZZ_CHECK(strcmp(d.config, c->config) == 0 && d.ntensors == c->ntensors);
    FUZZ_CHECK(d.nclass_names == c->nclass_names);
    for (int i = 0; i < c->nclass_names; i++)
        FUZZ_CHECK(strcmp(d.class_names[i], c->class_names[i]) == 0);
    for (int i = 0; i < c->ntensors; i++) {
        const vit_ckpt_tensor *a = &c->tensors[i], *b = &d.tensors[i];
        FUZZ_CHECK(strcmp(a->name, b->name) == 0 && a->ndim == b->ndim);
        FUZZ_CHECK(memcmp(a->dims, b->dims, (size_t)a->ndim * sizeof a->dims[0]) == 0);
        FUZZ_CHECK(memcmp(a->data, b->data, tensor_count(a) * sizeof *a->data) == 0);
    }
    vit_ckpt_free(&d);
}

/* The header alone: zeroed on failure; else no tensors, and when the
 * whole file reads (full, not NULL), the same config and data record. */
static void read_header(const char *path, const vit_ckpt *full)
{
    vit_ckpt h;
    memset(&h, 0x5a, sizeof h);
    int rc = vit_ckpt_read_header(path, &h);
    if (rc != VIT_OK) {
        FUZZ_CHECK_FAILURE(rc);
        FUZZ_CHECK(ckpt_zeroed(&h));
        FUZZ_CHECK(full == NULL);
        return;
    }
    FUZZ_CHECK(h.ntensors == 0 && h.tensors == NULL);
    if (full) {
        FUZZ_CHECK(strcmp(h.config, full->config) == 0 && h.version == full->version);
        FUZZ_CHECK((h.data == NULL) == (full->data == NULL));
        FUZZ_CHECK(h.data == NULL || strcmp(h.data, full->data) == 0);
        FUZZ_CHECK(h.nclass_names == full->nclass_names && h.norder == full->norder);
    }
    vit_ckpt_free(&h);
}

static void read_one(const char *path, size_t size)
{
    vit_ckpt c;
    memset(&c, 0x5a, sizeof c); /* the reader must overwrite, not trust, *c */
    int rc = vit_ckpt_read(path, &c);
    if (rc != VIT_OK) {
        FUZZ_CHECK_FAILURE(rc);
        FUZZ_CHECK(ckpt_zeroed(&c));
        vit_ckpt h;
        if (vit_ckpt_read_header(path, &h) == VIT_OK)
            vit_ckpt_free(&h); /* a header may read where the file does not */
        else
            FUZZ_CHECK(ckpt_zeroed(&h));
        return;
    }
    read_header(path, &c);
    check_ckpt(&c, size);
    check_round_trip(&c);
    vit_ckpt_free(&c);
    FUZZ_CHECK(ckpt_zeroed(&c));
}

static void load_run(const char *path, size_t size)
{
    vit_model *m = (vit_model *)&m; /* any non-NULL value: must become NULL on failure */
    vit_adamw opt;
    vit_run_state st;
    memset(&opt, 0, sizeof opt);
    vit_train_config tc;
    int rc = vit_run_load(path, &m, &tc, &opt, &st);
    if (rc != VIT_OK) {
        FUZZ_CHECK_FAILURE(rc);
        FUZZ_CHECK(m == NULL);
        FUZZ_CHECK(opt.m == NULL && opt.v == NULL);
        return;
    }
    FUZZ_CHECK(m != NULL);
    size_t n = vit_model_param_count(m);
    /* parameters and both moments came from the file, 4 bytes a value */
    FUZZ_CHECK(n >= 1 && n <= size / 12);
    FUZZ_CHECK(opt.n == n && opt.t == st.step);
    /* a position inside an epoch comes with its order, and only then */
    FUZZ_CHECK((st.norder > 0) == (st.order != NULL));
    /* one name per class, from the file or the defaults */
    FUZZ_CHECK(st.nclass_names == vit_model_config(m)->classes && st.class_names != NULL);
    for (int k = 0; k < st.nclass_names; k++)
        FUZZ_CHECK(st.class_names[k] != NULL && st.class_names[k][0] != '\0');
    vit_run_state_free(&st);
    vit_adamw_free(&opt);
    vit_model_free(m);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char path[512];
    fuzz_path(path, sizeof path, "in.ckpt");
    fuzz_write_file(path, data, size);
    read_one(path, size);
    if (size < 4)
        return 0;

    uint8_t *fixed = malloc(size);
    FUZZ_CHECK(fixed != NULL);
    memcpy(fixed, data, size);
    uLong crc = crc32(crc32(0L, Z_NULL, 0), fixed, (uInt)(size - 4));
    for (int i = 0; i < 4; i++)
        fixed[size - 4 + (size_t)i] = (uint8_t)(crc >> (8 * i));
    fuzz_write_file(path, fixed, size);
    free(fixed);
    read_one(path, size);
    load_run(path, size);
    return 0;
}
