/*
 * A model of any architecture (vit/arch.h): its parameters (a vit_params
 * the architecture's build fills), its forward through the architecture's
 * hook, evaluation in pieces, and a training batch split across threads.
 * The ViT itself is model_vit.c.
 */
#include "vit/model.h"

#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "argmax.h"
#include "error.h"
#include "fastmath.h"
#include "mixed.h"
#include "slice_sum.h"
#include "arch_internal.h"
#include "model_internal.h"
#include "threads.h"
#include "vit/activations.h"
#include "vit/attention.h"
#include "vit/bf16.h"
#include "vit/block.h"
#include "vit/linear.h"
#include "vit/local_conv.h"

/* One slice of vit_model_train_grads: its tape, its gradient buffer (slice
 * 0 uses the model's own), and what its run left behind.  The message is
 * copied here because vit_last_error() is per thread. */
struct slice {
    vit_tape *tape;
    vit_real *grads;
    double loss_sum;
    int correct, rc;
    char msg[320];
};

struct vit_model {
    vit_config cfg;
    const vit_arch *arch;    /* cfg's */
    void *state;             /* what arch->build made */
    vit_arch_info info;      /* arch->describe of cfg */
    vit_params *P;           /* the named tensors, their init and decay, both buffers */
    size_t nparams;
    vit_real *params, *grads; /* P's buffers */
    int nmaps;               /* info.attn_layers */
    const vit_real **maps;   /* per layer, from the last forward */
    vit_arch_attn *attn;     /* [nmaps]: each layer's maps (arch->attn_layer) */
    size_t *map_at;          /* [nmaps + 1]: reals of one image's maps before
                                layer l's (map_at[nmaps]: all of them) */
    struct slice *slices;    /* vit_model_train_grads, one per thread */
    int precision;           /* VIT_PRECISION_FP32 or _BF16 (resolved) */
    int recompute;           /* 1: activation checkpointing in training */
    int micro_batch;         /* images a piece of a thread's slice; 0: auto */
    int piece_auto;          /* auto's choice (0: not probed yet) */
    vit_mixed_weights *mixed; /* bf16: the weight matrices, packed once per step */
    int nslices;
    vit_slice_sum *gather;   /* several slices' reports (vit_train_extras.grads_ready) */
};

/* An architecture has a bf16 step when it declares its weight matrices
 * (vit_arch.bf16_weights: the built-in ViT and Swin, and any registered
 * one that offers it); they are packed once per step (arch_bf16.c). */
static int has_mixed(const vit_arch *a)
{
    return a->bf16_weights != NULL;
}

static int mixed_layout(vit_model *m)
{
    return vit_arch_bf16_layout(m->arch, &m->cfg, m->state, m->P, &m->mixed);
}

/* Each layer's maps from the arch's attn_layer hook, checked, and where
 * they lie in one image's share of a buffer of them all (map_at). */
static int describe_maps(vit_model *m)
{
    const char *name = m->arch->name;
    if (m->nmaps && !m->arch->attn_layer)
        return vit_fail(VIT_EINVAL, "vit_model_new: architecture %s describes %d attention "
                        "layers but has no attn_layer hook to give their shapes", name,
                        m->nmaps);
    for (int l = 0; l < m->nmaps; l++) {
        vit_arch_attn *a = &m->attn[l];
        m->arch->attn_layer(&m->cfg, l, a);
        const char *bad = a->heads < 1                              ? "heads"
                          : a->grid_h < 1 || a->grid_w < 1          ? "grid_h, grid_w"
                          : a->first < 0                            ? "first"
                          : a->cls != 0 && (a->cls != 1 || a->first < 1) ? "cls"
                          : a->stage < 0                            ? "stage"
                          : (long long)a->queries < (long long)a->first + (long long)a->grid_h
                                                                          * a->grid_w
                              ? "queries"
                          : (long long)a->keys < (long long)a->first + (long long)a->grid_h
                                                                       * a->grid_w
                              ? "keys"
                          : memchr(a->label, 0, sizeof a->label) == NULL ? "label"
                                                                         : NULL;
        if (bad)
            return vit_fail(VIT_EINVAL, "vit_model_new: architecture %s's attention layer %d: "
                            "bad %s (heads %d, queries %d, keys %d, grid %dx%d, first %d, "
                            "cls %d, stage %d; queries and keys must cover first + the grid)",
                            name, l, bad, a->heads, a->queries, a->keys, a->grid_h, a->grid_w,
                            a->first, a->cls, a->stage);
        size_t item = (size_t)a->heads * (size_t)a->queries * (size_t)a->keys;
        if (a->heads > (1 << 20) || a->queries > (1 << 20) || a->keys > (1 << 20) ||
            item > ((size_t)1 << 40) || m->map_at[l] > ((size_t)1 << 44))
            return vit_fail(VIT_EINVAL, "vit_model_new: architecture %s's attention layer %d: "
                            "maps of %d heads x %d x %d are too large", name, l, a->heads,
                            a->queries, a->keys);
        m->map_at[l + 1] = m->map_at[l] + item;
    }
    return VIT_OK;
}

vit_model *vit_model_new(const vit_config *cfg)
{
    if (!cfg) {
        vit_fail(VIT_EINVAL, "vit_model_new: cfg is NULL");
        return NULL;
    }
    if (vit_config_check(cfg) != VIT_OK)
        return NULL;
    if (cfg->data_norm && cfg->data_mean.n == 0) {
        vit_fail(VIT_EINVAL, "vit_model_new: data_norm = 1 without data_mean and data_std: the "
                 "trainer computes them from the training images (vit_channel_stats), or give "
                 "them");
        return NULL;
    }
    size_t n = vit_config_param_count(cfg);
    vit_model *m = calloc(1, sizeof *m);
    if (!m)
        goto oom;
    m->cfg = *cfg;
    m->arch = vit_config_arch(cfg);
    m->arch->describe(cfg, &m->info);
    m->nmaps = m->info.attn_layers > 0 ? m->info.attn_layers : 0;
    m->P = vit_params_new();
    m->maps = calloc((size_t)m->nmaps + 1, sizeof *m->maps);
    m->attn = calloc((size_t)m->nmaps + 1, sizeof *m->attn);
    m->map_at = calloc((size_t)m->nmaps + 1, sizeof *m->map_at);
    if (!m->P || !m->maps || !m->attn || !m->map_at)
        goto oom;
    int rc = describe_maps(m);
    if (rc == VIT_OK)
        rc = m->arch->build(&m->cfg, m->P, &m->state);
    if (rc == VIT_OK && (rc = vit_params_alloc(m->P)) == VIT_ENOMEM)
        goto oom;
    if (rc != VIT_OK) {
        vit_model_free(m);
        return NULL;
    }
    m->nparams = vit_params_count(m->P);
    m->params = vit_params_values(m->P);
    m->grads = vit_params_grads(m->P);
    m->precision = VIT_PRECISION_FP32; /* vit_model_set_precision for another */
    return m;
oom:
    vit_model_free(m);
    vit_fail(VIT_ENOMEM, "vit_model_new: out of memory for %zu parameters", n);
    return NULL;
}

void vit_model_free(vit_model *m)
{
    if (!m)
        return;
    if (m->arch && m->arch->release && m->state) /* none before build */
        m->arch->release(m->state);
    vit_params_free(m->P);
    free(m->maps);
    free(m->attn);
    free(m->map_at);
    for (int i = 0; i < m->nslices; i++) {
        vit_tape_free(m->slices[i].tape);
        free(m->slices[i].grads);
    }
    free(m->slices);
    vit_slice_sum_free(m->gather);
    vit_mixed_weights_free(m->mixed);
    free(m);
}

int vit_model_precision(const vit_model *m) { return m ? m->precision : VIT_PRECISION_FP32; }

int vit_model_set_precision(vit_model *m, int precision)
{
    if (!m)
        return vit_fail(VIT_EINVAL, "vit_model_set_precision: model is NULL");
    if (precision != VIT_PRECISION_FP32 && precision != VIT_PRECISION_BF16
        && precision != VIT_PRECISION_AUTO)
        return vit_fail(VIT_EINVAL, "vit_model_set_precision: precision %d is not fp32, bf16 "
                        "or auto", precision);
    if (!has_mixed(m->arch) && precision == VIT_PRECISION_BF16) /* whatever the CPU */
        return mixed_layout(m);
    int got = vit_precision_resolve(precision, NULL, 0);
    if (!has_mixed(m->arch))
        got = VIT_PRECISION_FP32; /* auto */
    vit_mixed_weights *keep = m->mixed;
    m->mixed = NULL;
    if (got == VIT_PRECISION_BF16) {
        int rc = keep ? (m->mixed = keep, keep = NULL, VIT_OK) : mixed_layout(m);
        if (rc != VIT_OK) {
            vit_mixed_weights_free(m->mixed);
            m->mixed = keep;
            return rc;
        }
    }
    vit_mixed_weights_free(keep);
    if (got != m->precision)
        m->piece_auto = 0; /* bf16 keeps less: probe again */
    m->precision = got;
    return got;
}

int vit_model_set_recompute(vit_model *m, int recompute)
{
    if (!m || (recompute != 0 && recompute != 1))
        return vit_fail(VIT_EINVAL, "vit_model_set_recompute: %s", !m ? "model is NULL"
                        : "recompute is neither 0 nor 1");
    m->recompute = recompute;
    m->piece_auto = 0; /* what a step keeps changed: probe again */
    return VIT_OK;
}

int vit_model_set_micro_batch(vit_model *m, int images)
{
    if (!m || images < 0)
        return vit_fail(VIT_EINVAL, "vit_model_set_micro_batch: %s", !m ? "model is NULL"
                        : "images is negative");
    m->micro_batch = images;
    return VIT_OK;
}

int vit_model_micro_batch(const vit_model *m)
{
    return !m ? 0 : m->micro_batch ? m->micro_batch : m->piece_auto;
}

int vit_model_recompute(const vit_model *m) { return m ? m->recompute : 0; }

const vit_config *vit_model_config(const vit_model *m) { return m ? &m->cfg : NULL; }
const vit_arch *vit_model_arch(const vit_model *m) { return m ? m->arch : NULL; }
const vit_arch_info *vit_model_info(const vit_model *m) { return m ? &m->info : NULL; }
vit_real *vit_model_params(vit_model *m) { return m ? m->params : NULL; }
vit_real *vit_model_grads(vit_model *m) { return m ? m->grads : NULL; }
size_t vit_model_param_count(const vit_model *m) { return m ? m->nparams : 0; }

void vit_model_zero_grads(vit_model *m)
{
    if (m)
        vit_params_zero_grads(m->P);
}

const vit_param_group *vit_model_groups(const vit_model *m, int *count)
{
    if (!m) {
        if (count)
            *count = 0;
        return NULL;
    }
    return vit_params_groups(m->P, count);
}

int vit_model_tensor_count(const vit_model *m) { return m ? vit_params_tensor_count(m->P) : 0; }

const vit_model_tensor *vit_model_tensor_at(const vit_model *m, int i)
{
    return m ? vit_params_tensor(m->P, i) : NULL;
}

void vit_model_init(vit_model *m, vit_rng *rng)
{
    if (m && rng)
        vit_params_init(m->P, rng);
}

/* The architecture's forward on tape for images [batch, H, W, C]: the
 * parameters' gradients to grads (NULL: constants), maps / maps_to as
 * vit_arch_run says, drop-path scales only in training. */
static vit_tensor *run_forward(vit_model *m, vit_tape *tape, const vit_real *images, int batch,
                               vit_real *grads, const vit_real **maps, vit_real *const *maps_to,
                               int train, const vit_real *drop, int drop_stride)
{
    const vit_config *c = &m->cfg;
    int ishape[4] = {batch, c->image_height, c->image_width, c->channels};
    if (c->image_norm || c->data_norm) { /* the normalised copy is what the network reads */
        int pixels = c->image_height * c->image_width;
        vit_real *nx = vit_tape_alloc(tape, (size_t)batch * pixels * c->channels * sizeof *nx);
        int rc = !nx           ? VIT_ENOMEM
                 : c->image_norm ? vit_image_norm(nx, images, batch, pixels, c->channels)
                                 : vit_data_norm(nx, images, batch, pixels, c->channels,
                                                 c->data_mean.v, c->data_std.v);
        if (rc != VIT_OK) {
            vit_tape_fail(tape, rc);
            return NULL;
        }
        images = nx;
    }
    vit_arch_run r = {.cfg = c, .state = m->state, .params = m->P, .tape = tape,
                      .images = vit_tape_leaf(tape, (vit_real *)(uintptr_t)images, NULL, 4,
                                              ishape),
                      .batch = batch, .grads = grads, .train = train, .loss_only = train,
                      .recompute = m->recompute,
                      .drop_scale = drop, .drop_stride = drop_stride,
                      .maps = m->nmaps ? maps : NULL, .maps_to = m->nmaps ? maps_to : NULL};
    if (!r.images)
        return NULL;
    return m->arch->forward(&r);
}

/* Images per piece of the no-grad forward. */
#define EVAL_CHUNK 64

static int ensure_slices(vit_model *m, int n, int with_grads);

/* An evaluation's pieces spread over threads: each thread s takes the next
 * piece not yet taken (next) until none is left or one failed, runs it on
 * tapes[s] and copies its logits into z and its attention maps through
 * to + s * nmaps.  Taking pieces as they come rather than a fixed share
 * keeps both cores busy to the end when the other thread is slowed (a
 * shared machine, the short last piece); every piece lands in its own
 * rows whoever runs it, so the result does not depend on who did. */
typedef struct {
    vit_model *m;
    vit_tape **tapes;
    const vit_real *images;
    int batch, chunk, pieces;
    vit_tensor *z;
    vit_real *all;     /* the maps, layer l's [batch items] from batch
                          map_at[l] on, or NULL */
    vit_real **to;     /* [nt][nmaps] */
    atomic_int next;   /* the next piece to take */
    atomic_int failed; /* 1 once a piece failed: the others stop */
    int rc[256];       /* per thread; nt <= vit_threads() <= 256 */
    char msg[256][320]; /* a worker's message (vit_last_error is per thread) */
} eval_job;

/* One piece, images [i, i + nb), in no-grad mode through the arena's
 * memory above a mark, so that only its logits (and maps) outlive it. */
static int eval_piece(eval_job *J, vit_tape *tape, vit_real **to, int i, int nb)
{
    vit_model *m = J->m;
    const vit_config *c = &m->cfg;
    size_t img = (size_t)c->image_height * c->image_width * c->channels;
    for (int l = 0; to && l < m->nmaps; l++) /* the piece's items of map l */
        to[l] = J->all + (size_t)J->batch * m->map_at[l] + (m->map_at[l + 1] - m->map_at[l]) * i;
    size_t mark = vit_tape_mark(tape);
    vit_tensor *y = run_forward(m, tape, J->images + (size_t)i * img, nb, NULL, NULL, to, 0,
                                NULL, 0);
    if (!y)
        return vit_tape_status(tape) ? vit_tape_status(tape) : VIT_EINVAL;
    memcpy(J->z->data + (size_t)i * c->classes, y->data, y->size * sizeof *y->data);
    vit_tape_release(tape, mark);
    return VIT_OK;
}

/* Thread s's pieces (vit_parallel over the threads).  A worker's tape is a
 * training slice's, reset here and put in no-grad mode for the while;
 * thread 0 (the caller) runs on the caller's tape. */
static void eval_thread(void *ctx, size_t lo, size_t hi)
{
    eval_job *J = ctx;
    for (size_t s = lo; s < hi; s++) {
        vit_tape *tape = J->tapes[s];
        int was = 1;
        if (s > 0) {
            vit_tape_reset(tape);
            was = vit_tape_set_grad(tape, 0);
        }
        vit_real **to = J->all ? J->to + s * J->m->nmaps : NULL;
        int rc = VIT_OK, p;
        while (rc == VIT_OK && !atomic_load(&J->failed)
               && (p = atomic_fetch_add(&J->next, 1)) < J->pieces) {
            int i = p * J->chunk, nb = J->batch - i < J->chunk ? J->batch - i : J->chunk;
            if ((rc = eval_piece(J, tape, to, i, nb)) != VIT_OK)
                atomic_store(&J->failed, 1);
        }
        J->rc[s] = rc;
        if (rc != VIT_OK && s > 0)
            snprintf(J->msg[s], sizeof J->msg[s], "%s", vit_last_error());
        if (s > 0) {
            vit_tape_set_grad(tape, was);
            vit_tape_reset(tape); /* nothing of the evaluation stays on it */
        }
    }
}

/* Evaluation: the same forward in no-grad mode, a piece of the batch at a
 * time through the same arena memory (a mark and a release per piece), so
 * that only the logits and the attention maps stay on the tape.  A
 * 256-image evaluation of the digits model needs a few MB instead of ~70.
 * Several pieces are spread over the threads, each thread's on a tape of
 * its own (the caller's, then the training slices'): one fork/join per
 * batch instead of one per op, which for a small model keeps the second
 * core busy where op-level splitting leaves it idle.  A piece's numbers do
 * not depend on the thread it runs on, nor on how many threads its ops
 * use, so the logits are the same bits as a single thread's.  keep_maps 0:
 * no attention maps are copied out (scoring reads only the logits). */
static vit_tensor *forward_eval(vit_model *m, vit_tape *tape, const vit_real *images, int batch,
                                int keep_maps)
{
    const vit_config *c = &m->cfg;
    int was = vit_tape_set_grad(tape, 0);
    int chunk = batch < EVAL_CHUNK ? batch : EVAL_CHUNK;
    int pieces = (batch + chunk - 1) / chunk;
    int nt = vit_threads() < pieces ? vit_threads() : pieces;
    if (nt > 1 && ensure_slices(m, nt, 0) != VIT_OK)
        nt = 1; /* no tapes for the workers: on the caller's alone */
    int shape[2] = {batch, c->classes};
    vit_tensor *z = vit_tape_tensor(tape, 2, shape);
    keep_maps = keep_maps && m->nmaps > 0; /* none: the architecture has none to show */
    vit_real *all = z && keep_maps ? vit_tape_alloc(tape, m->map_at[m->nmaps] * batch * sizeof *all)
                                   : NULL;
    vit_real **to = all ? vit_tape_alloc(tape, (size_t)nt * m->nmaps * sizeof *to) : NULL;
    vit_tape *tapes[256];
    for (int s = 0; s < nt; s++)
        tapes[s] = s == 0 ? tape : m->slices[s].tape;
    for (int l = 0; l < m->nmaps; l++)
        m->maps[l] = NULL;
    int ok = z && (to || !keep_maps);
    if (ok) {
        eval_job *J = malloc(sizeof *J);
        if (!J) {
            vit_fail(VIT_ENOMEM, "vit_model_forward: out of memory");
            vit_tape_fail(tape, VIT_ENOMEM);
            ok = 0;
        } else {
            *J = (eval_job){.m = m, .tapes = tapes, .images = images, .batch = batch,
                            .chunk = chunk, .pieces = pieces, .z = z, .all = all,
                            .to = to};
            atomic_init(&J->next, 0);
            atomic_init(&J->failed, 0);
            vit_parallel(nt, (size_t)nt, eval_thread, J);
            for (int s = 0; ok && s < nt; s++) /* the first failing thread speaks */
                if (J->rc[s] != VIT_OK) {
                    ok = 0;
                    if (s > 0) {
                        vit_fail(J->rc[s], "%s", J->msg[s]);
                        vit_tape_fail(tape, J->rc[s]);
                    }
                }
            free(J);
        }
    }
    for (int l = 0; l < m->nmaps; l++)
        m->maps[l] = ok && keep_maps ? all + (size_t)batch * m->map_at[l] : NULL;
    vit_tape_set_grad(tape, was);
    return ok ? z : NULL;
}

vit_tensor *vit_model_forward(vit_model *m, vit_tape *tape, const vit_real *images, int batch,
                              int grads)
{
    if (!m || !tape || !images) {
        vit_fail(VIT_EINVAL, "vit_model_forward: %s is NULL", !m ? "model" : !tape ? "tape" : "images");
        vit_tape_fail(tape, VIT_EINVAL);
        return NULL;
    }
    if (batch <= 0) {
        vit_fail(VIT_EINVAL, "vit_model_forward: batch %d must be positive", batch);
        vit_tape_fail(tape, VIT_EINVAL);
        return NULL;
    }
    if (!grads || !vit_tape_grad_enabled(tape))
        return forward_eval(m, tape, images, batch, 1);
    return run_forward(m, tape, images, batch, m->grads, m->maps, NULL, 0, NULL, 0);
}

vit_tensor *vit_model_logits(vit_model *m, vit_tape *tape, const vit_real *images, int batch)
{
    if (!m || !tape || !images || batch <= 0) {
        vit_fail(VIT_EINVAL, "vit_model_logits: bad argument");
        vit_tape_fail(tape, VIT_EINVAL);
        return NULL;
    }
    return forward_eval(m, tape, images, batch, 0);
}

const vit_real *vit_model_attention_maps(const vit_model *m, int layer)
{
    if (!m || layer < 0 || layer >= m->nmaps)
        return NULL;
    return m->maps[layer];
}

const vit_arch_attn *vit_model_attention_layer(const vit_model *m, int layer)
{
    if (!m || layer < 0 || layer >= m->nmaps)
        return NULL;
    return &m->attn[layer];
}

/* ---- a training batch split across threads ------------------------------ */

typedef struct {
    vit_model *m;
    const vit_real *images;
    const int *labels;
    int batch, n;
    vit_real smoothing;
    const vit_real *targets, *drop; /* vit_train_extras' (may be NULL) */
    void (*ready)(void *ctx, size_t offset, size_t count);
    void *ready_ctx;
    vit_slice_sum *gather; /* several slices with reports: their sum as they go */
    int concurrent;        /* slices 1 .. concurrent-1 run on workers */
    pthread_t caller;      /* the thread that called (the one that may call MPI) */
    int piece;             /* most images a piece of a slice (run_slice) */
} slice_job;

/* vit_train_extras.grads_ready behind a tape's leaf reports: the leaf's
 * place in the gradient buffer g [n], passed on directly (one slice) or to
 * the slices' sum (several; on_caller: this slice runs on the caller). */
typedef struct {
    const vit_real *g;
    size_t n;
    void (*fn)(void *ctx, size_t offset, size_t count);
    void *ctx;
    vit_slice_sum *gather;
    int on_caller;
} ready_job;

static void leaf_ready(void *ctx, vit_tensor *leaf)
{
    const ready_job *R = ctx;
    if (leaf->grad < R->g || leaf->grad + leaf->size > R->g + R->n)
        return;
    size_t off = (size_t)(leaf->grad - R->g);
    if (R->gather)
        vit_slice_sum_report(R->gather, off, leaf->size, R->on_caller);
    else
        R->fn(R->ctx, off, leaf->size);
}

/* Forward, loss and backward of images [lo, lo + nb) of the batch on tape,
 * their gradients added into g (the tape's leaves accumulate), seeded with
 * their share nb / batch of the mean; with report, the leaves' reports
 * (vit_train_extras.grads_ready) as the backward finishes each.  Adds the
 * pieces' loss (times nb) and right answers to *loss_sum and *correct. */
static int run_piece(const slice_job *J, vit_tape *tape, int lo, int nb, vit_real *g,
                     ready_job *report, double *loss_sum, int *correct)
{
    vit_model *m = J->m;
    const vit_config *c = &m->cfg;
    size_t img = (size_t)c->image_height * c->image_width * c->channels;
    vit_tape_reset(tape);
    /* No maps are kept here, so a head on the class token lets the last
     * block compute that token alone. */
    vit_tensor *z = run_forward(m, tape, J->images + (size_t)lo * img, nb, g, NULL, NULL, 1,
                                J->drop ? J->drop + lo : NULL, J->batch);
    vit_tensor *loss = J->targets ? vit_op_cross_entropy_soft(tape, z, J->targets
                                                              + (size_t)lo * c->classes, NULL)
                                  : vit_op_cross_entropy(tape, z, J->labels + lo, J->smoothing,
                                                         NULL);
    vit_real share = (vit_real)nb / (vit_real)J->batch;
    if (report)
        vit_tape_on_leaf_grad(tape, leaf_ready, report);
    int rc = loss ? vit_tape_backward_from(tape, loss, &share)
                  : vit_tape_status(tape) ? vit_tape_status(tape) : VIT_EINVAL;
    vit_tape_on_leaf_grad(tape, NULL, NULL);
    if (rc != VIT_OK)
        return rc;
    *loss_sum += (double)loss->data[0] * nb;
    for (int r = 0; r < nb; r++)
        *correct += vit_argmax(z->data + (size_t)r * c->classes, c->classes) == J->labels[lo + r];
    return VIT_OK;
}

/* Images [lo, hi) of the batch (slice s of n) into the slice's own gradient
 * buffer, in pieces of at most J->piece images one after another on its
 * tape (vit_model_set_micro_batch); the reports wait for the last piece,
 * the one after which each leaf's gradient is whole. */
static void run_slice(const slice_job *J, int s)
{
    vit_model *m = J->m;
    struct slice *S = &m->slices[s];
    int lo = (int)((long long)J->batch * s / J->n), hi = (int)((long long)J->batch * (s + 1) / J->n);
    int nb = hi - lo, parts = (nb + J->piece - 1) / J->piece;
    vit_real *g = s == 0 ? m->grads : S->grads;
    memset(g, 0, m->nparams * sizeof *g);
    if (m->mixed)
        vit_mixed_enter(m->mixed);
    int on_caller = pthread_equal(pthread_self(), J->caller);
    ready_job R = {g, m->nparams, J->ready, J->ready_ctx, J->gather, on_caller};
    S->loss_sum = 0;
    S->correct = 0;
    S->rc = VIT_OK;
    for (int p = 0; p < parts && S->rc == VIT_OK; p++) {
        int a = lo + (int)((long long)nb * p / parts), b = lo + (int)((long long)nb * (p + 1) / parts);
        S->rc = run_piece(J, S->tape, a, b - a, g, J->ready && p == parts - 1 ? &R : NULL,
                          &S->loss_sum, &S->correct);
    }
    /* The caller passes the other slices' chunks on while they finish. */
    if (J->gather && s == 0)
        vit_slice_sum_serve(J->gather);
    else if (J->gather && !on_caller && s < J->concurrent)
        vit_slice_sum_done(J->gather);
    int mixed_rc = m->mixed ? vit_mixed_leave() : VIT_OK;
    if (S->rc == VIT_OK)
        S->rc = mixed_rc;
    if (S->rc != VIT_OK)
        snprintf(S->msg, sizeof S->msg, "%s", vit_last_error());
}

static void run_slices(void *ctx, size_t lo, size_t hi)
{
    for (size_t s = lo; s < hi; s++)
        run_slice(ctx, (int)s);
}

/* grads[i] += slice s's grads[i] for s = 1 .. n-1, in that order. */
typedef struct {
    vit_model *m;
    int n;
} sum_job;

FM_CLONES /* 16 lanes, not SSE2's 4 (elementwise adds: the same bits) */
static void sum_slices(void *ctx, size_t lo, size_t hi)
{
    const sum_job *J = ctx;
    for (int s = 1; s < J->n; s++) {
        const vit_real *gs = J->m->slices[s].grads;
        vit_real *g = J->m->grads;
        for (size_t i = lo; i < hi; i++)
            g[i] += gs[i];
    }
}

/* Tapes for n slices, kept across calls, and with with_grads the gradient
 * buffers of slices 1 .. n-1 (an evaluation needs the tapes alone). */
static int ensure_slices(vit_model *m, int n, int with_grads)
{
    if (n > m->nslices) {
        struct slice *sl = realloc(m->slices, (size_t)n * sizeof *sl);
        if (!sl)
            return vit_fail(VIT_ENOMEM, "vit_model: out of memory for %d slices", n);
        m->slices = sl;
        for (; m->nslices < n; m->nslices++) {
            struct slice *S = &sl[m->nslices];
            memset(S, 0, sizeof *S);
            if (!(S->tape = vit_tape_new()))
                return vit_fail(VIT_ENOMEM, "vit_model: out of memory for slice %d",
                                m->nslices);
        }
    }
    for (int s = 1; with_grads && s < n; s++)
        if (!m->slices[s].grads && !(m->slices[s].grads = malloc(m->nparams * sizeof
                                                                 *m->slices[s].grads)))
            return vit_fail(VIT_ENOMEM, "vit_model_train_grads: out of memory for slice %d", s);
    return VIT_OK;
}

/* Several slices with reports: their sum made as the backward goes
 * (slice_sum.h). */
static int gather_begin(vit_model *m, slice_job *J)
{
    if (!m->gather && !(m->gather = vit_slice_sum_new(m->nparams)))
        return VIT_ENOMEM;
    vit_real *bufs[256]; /* J->n <= vit_threads() <= 256 */
    int n = J->n;
    for (int s = 0; s < n; s++)
        bufs[s] = s == 0 ? m->grads : m->slices[s].grads;
    J->concurrent = vit_parallel_width(J->n, (size_t)J->n);
    J->gather = m->gather;
    return vit_slice_sum_begin(m->gather, bufs, n, J->concurrent, J->ready, J->ready_ctx);
}

/* Automatic pieces: as many images as fit in PIECE_BYTES of tape.  Pieces
 * of a 24 MiB tape ran as fast as whole slices of 32 images on the 2-core
 * Zen 3 (the benchmark's large, medium and Swin models: docs/design.md,
 * "Pieces of a slice"), and much smaller ones (4 images of medium) lost
 * 12% to the products' smaller rows. */
#define PIECE_BYTES ((size_t)24 << 20)
enum { PROBE_FEW = 1, PROBE_MORE = 3 };

/* What a tape takes for one image and what it takes whatever the count:
 * a forward and backward of PROBE_FEW and of PROBE_MORE of the batch's
 * images on new tapes, into the model's gradient buffer (which every slice
 * clears before its own).  The bytes depend on the model, its precision
 * and its recompute, never on the images' values, so every run of the same
 * model picks the same pieces and sums its gradients in the same order. */
static int probe_pieces(vit_model *m, const slice_job *J)
{
    size_t used[2];
    const int count[2] = {PROBE_FEW, PROBE_MORE};
    slice_job P = *J;
    P.drop = NULL;
    P.ready = NULL;
    P.batch = PROBE_MORE;
    for (int i = 0; i < 2; i++) {
        /* Freed at once: the arena's chunks are maps of their own
         * (src/tape/tape.c), so a probe leaves no heap behind it. */
        vit_tape *t = vit_tape_new();
        if (!t)
            return VIT_ENOMEM;
        if (m->mixed)
            vit_mixed_enter(m->mixed);
        double loss = 0;
        int right = 0;
        int rc = run_piece(&P, t, 0, count[i], m->grads, NULL, &loss, &right);
        int mixed_rc = m->mixed ? vit_mixed_leave() : VIT_OK;
        used[i] = vit_tape_used_bytes(t);
        vit_tape_free(t);
        if (rc != VIT_OK || (rc = mixed_rc) != VIT_OK)
            return rc;
    }
    size_t per = used[1] > used[0] ? (used[1] - used[0]) / (PROBE_MORE - PROBE_FEW) : 1;
    size_t fixed = used[0] > per ? used[0] - per : 0;
    size_t fit = fixed < PIECE_BYTES ? (PIECE_BYTES - fixed) / (per ? per : 1) : 1;
    m->piece_auto = fit < 1 ? 1 : fit > INT_MAX ? INT_MAX : (int)fit;
    return VIT_OK;
}

int vit_model_train_grads(vit_model *m, const vit_real *images, const int *labels, int batch,
                          vit_real smoothing, double *loss, int *correct)
{
    return vit_model_train_grads_ex(m, images, labels, batch, smoothing, NULL, loss, correct);
}

int vit_model_train_grads_ex(vit_model *m, const vit_real *images, const int *labels, int batch,
                             vit_real smoothing, const vit_train_extras *ex, double *loss,
                             int *correct)
{
    if (!m || !images || !labels || !loss)
        return vit_fail(VIT_EINVAL, "vit_model_train_grads: %s is NULL",
                        !m ? "model" : !images ? "images" : !labels ? "labels" : "loss");
    if (batch <= 0)
        return vit_fail(VIT_EINVAL, "vit_model_train_grads: batch %d must be positive", batch);
    int n = vit_threads() < batch ? vit_threads() : batch;
    int rc = ensure_slices(m, n, 1);
    if (rc != VIT_OK)
        return rc;
    /* bf16: the weights as the optimizer left them, packed once for every
     * slice's products. */
    if (m->mixed && (rc = vit_mixed_weights_pack(m->mixed, vit_threads())) != VIT_OK)
        return rc;
    slice_job J = {m, images, labels, batch, n, smoothing, ex ? ex->targets : NULL,
                   ex ? ex->drop_scale : NULL, ex ? ex->grads_ready : NULL,
                   ex ? ex->ready_ctx : NULL, NULL, 1, pthread_self(), 0};
    int widest = (batch + n - 1) / n;
    if (!m->micro_batch && !m->piece_auto && widest >= PROBE_MORE
        && (rc = probe_pieces(m, &J)) != VIT_OK)
        return rc;
    J.piece = m->micro_batch ? m->micro_batch : m->piece_auto ? m->piece_auto : widest;
    if (J.ready && n > 1 && (rc = gather_begin(m, &J)) != VIT_OK)
        return rc;
    vit_parallel(n, (size_t)n, run_slices, &J);
    int failed = 0;
    for (int s = 0; s < n; s++)
        failed |= m->slices[s].rc != VIT_OK;
    if (J.gather)
        vit_slice_sum_finish(J.gather, !failed);
    for (int l = 0; l < m->nmaps; l++)
        m->maps[l] = NULL; /* spread over the slices' tapes: none to show */
    double sum = 0;
    int right = 0;
    for (int s = 0; s < n; s++) {
        const struct slice *S = &m->slices[s];
        if (S->rc != VIT_OK) /* the first failing slice speaks for the batch */
            return vit_fail(S->rc, "%s", S->msg);
        sum += S->loss_sum;
        right += S->correct;
    }
    if (n > 1 && !J.gather) {
        sum_job G = {m, n};
        vit_parallel(vit_threads_for(2.0 * (double)m->nparams * n), m->nparams, sum_slices, &G);
    }
    *loss = sum / batch;
    if (correct)
        *correct = right;
    return VIT_OK;
}
