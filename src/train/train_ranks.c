/*
 * The trainer's work shared out over the ranks of a data-parallel job (one
 * rank alone without MPI): a minibatch's slice gathered and augmented, its
 * forward and backward, the gradients summed into the global batch's, and
 * scoring split and combined.
 */

#include <stdlib.h>
#include <string.h>

#include "error.h"
#include "trainer_internal.h"
#include "vit/augment.h"
#include "vit/block.h"
#include "vit/dist.h"

void vit_train_share(int n, int *lo, int *hi)
{
    int r = vit_dist_rank(), size = vit_dist_size();
    *lo = (int)((long long)n * r / size);
    *hi = (int)((long long)n * (r + 1) / size);
}

int vit_train_gather_batch(vit_trainer *t, const int *idx, int b, int lo, int hi)
{
    const vit_config *c = &t->cfg;
    const vit_train_config *tc = &t->tc;
    vit_augment g = {.shift = tc->shift > tc->crop_pad ? tc->shift : tc->crop_pad,
                     .rotate = tc->rotate, .scale = tc->scale, .flip = tc->flip, .erase = tc->erase,
                     .mixup = tc->mixup, .cutmix = tc->cutmix, .mix_prob = tc->mix_prob,
                     .smoothing = tc->smoothing, .classes = c->classes,
                     .brightness = tc->brightness, .contrast = tc->contrast,
                     .saturation = tc->saturation, .hue = tc->hue, .grayscale = tc->grayscale,
                     .channel_perm = tc->channel_perm, .invert = tc->invert};
    int rc = vit_augment_batch(&g, &t->train, idx, b, lo, hi, t->aug, &t->st.rng, t->images,
                               t->labels, t->targets, &t->mixed, NULL);
    /* Row j (block j / 2, branch j % 2) is drawn for all b items, then its
     * slice moved to j (hi - lo): [drop_layers, 2, hi - lo] as the model reads it
     * (each move goes to lower addresses than the rows still to draw). */
    const int L = vit_model_info(t->m)->drop_layers; /* the ViT's depth */
    for (int j = 0; rc == VIT_OK && t->drop && j < 2 * L; j++) {
        vit_real *row = t->drop + (size_t)j * tc->batch;
        rc = vit_drop_path_scales(row, b, tc->drop_path * (j / 2 + 1) / L, &t->st.rng);
        memmove(t->drop + (size_t)j * (hi - lo), row + lo, (size_t)(hi - lo) * sizeof *row);
    }
    return rc;
}

int vit_train_augment_buffers(vit_trainer *t)
{
    const vit_config *c = &t->cfg;
    const vit_train_config *tc = &t->tc;
    int rc = vit_augment_scratch_new(&t->aug, tc->batch, c->image_height, c->image_width,
                                     c->channels);
    if (rc)
        return rc;
    if (tc->mixup > 0 || tc->cutmix > 0)
        t->targets = malloc((size_t)tc->batch * c->classes * sizeof *t->targets);
    const int L = vit_model_info(t->m)->drop_layers;
    if (tc->drop_path > 0 && L < 1)
        return vit_fail(VIT_EINVAL, "drop_path: architecture %s has no residual stages to drop "
                        "(set drop_path = 0)", vit_model_arch(t->m)->name);
    if (tc->drop_path > 0)
        t->drop = malloc((size_t)2 * L * tc->batch * sizeof *t->drop);
    if (((tc->mixup > 0 || tc->cutmix > 0) && !t->targets) || (tc->drop_path > 0 && !t->drop))
        return vit_fail(VIT_ENOMEM, "vit_train_run: out of memory");
    if (vit_dist_size() > 1 && !(t->sum = vit_dist_buckets_new(vit_model_grads(t->m),
                                                                vit_model_param_count(t->m), 0)))
        return VIT_ENOMEM; /* recorded: the only way it fails here */
    return VIT_OK;
}

unsigned long long vit_train_params_hash(vit_model *m)
{
    const unsigned char *p = (const unsigned char *)vit_model_params(m);
    size_t n = vit_model_param_count(m) * sizeof(vit_real);
    unsigned long long h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++)
        h = (h ^ p[i]) * 1099511628211ull;
    return h;
}

int vit_train_local_step(vit_trainer *r, int bl, double red[2])
{
    if (bl == 0) {
        vit_model_zero_grads(r->m);
        return VIT_OK; /* a batch smaller than the job: this rank adds nothing */
    }
    double loss;
    int correct;
    vit_train_extras ex = {.targets = r->mixed ? r->targets : NULL, .drop_scale = r->drop,
                           .grads_ready = r->sum ? vit_dist_buckets_ready : NULL,
                           .ready_ctx = r->sum};
    int rc = vit_model_train_grads_ex(r->m, r->images, r->labels, bl, (vit_real)r->tc.smoothing, &ex,
                                      &loss, &correct);
    if (rc == VIT_ENUM) {
        /* Copy the cause first: vit_fail writes the buffer it lives in. */
        char why[400];
        snprintf(why, sizeof why, "%s", vit_last_error());
        return vit_fail(VIT_ENUM, "training diverged at step %llu (epoch %llu): %s",
                        r->st.step + 1, r->st.epoch + 1, why);
    }
    if (rc)
        return rc;
    red[0] += loss * bl;
    red[1] += correct;
    return VIT_OK;
}

int vit_train_summed_step(vit_trainer *r, int mine, int bl, int b, double red[2])
{
    if (!r->sum) /* one rank */
        return mine == VIT_OK ? vit_train_local_step(r, bl, red) : mine;
    /* Each share's gradient is weighted by its size, w = bl / b, as its
     * buckets are summed; the sums start during the backward (the model
     * reports each block's gradients as they become final) and end here. */
    int rc = vit_dist_buckets_start(r->sum, (vit_real)bl / (vit_real)b);
    if (mine == VIT_OK)
        mine = rc;
    if (mine == VIT_OK)
        mine = vit_train_local_step(r, bl, red);
    rc = vit_dist_buckets_finish(r->sum);
    return mine ? mine : rc;
}

int vit_train_evaluate_shared(vit_trainer *r, const vit_dataset *ds, int tta, vit_eval_result *ev)
{
    if (vit_dist_size() == 1)
        return vit_evaluate_tta(scored(r), r->eval_tape, ds, 256, tta, ev);
    int lo, hi, K = r->cfg.classes;
    vit_train_share(ds->count, &lo, &hi);
    vit_dataset part = *ds;
    size_t img = (size_t)ds->height * ds->width * ds->channels;
    part.images += (size_t)lo * img;
    part.labels += lo;
    part.count = hi - lo;
    memset(ev, 0, sizeof *ev);
    int rc = part.count > 0 ? vit_evaluate_tta(scored(r), r->eval_tape, &part, 256, tta, ev) : VIT_OK;
    if (rc == VIT_OK && !ev->confusion) {
        ev->confusion = calloc((size_t)K * K, sizeof *ev->confusion);
        ev->classes = K;
        if (!ev->confusion)
            rc = vit_fail(VIT_ENOMEM, "evaluation: out of memory");
    }
    int all = vit_dist_agree(rc);
    if (all) {
        vit_eval_result_free(ev);
        return rc ? rc : vit_fail(all, "evaluation failed on another rank");
    }
    double loss = ev->loss * ev->count;
    if ((rc = vit_dist_sum_double(&loss, 1)) || (rc = vit_dist_sum_int(ev->confusion, K * K))) {
        vit_eval_result_free(ev);
        return rc;
    }
    int correct = 0;
    for (int k = 0; k < K; k++)
        correct += ev->confusion[k * K + k];
    ev->count = ds->count;
    ev->loss = loss / ds->count;
    ev->accuracy = (double)correct / ds->count;
    return VIT_OK;
}
