/*
 * The trainer: minibatch steps with augmentation, AdamW with warm-up and
 * cosine decay, per-epoch scoring, OUT/metrics.csv, checkpoints and exact
 * resume, driven step by step (vit_trainer_*) or in one call
 * (vit_train_run).  It reports what happens through the caller's callback
 * and draws nothing: rendering progress for a person is the tools' work.
 */
#include "vit/train.h"

#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "error.h"
#include "run_internal.h"
#include "train_internal.h"
#include "vit/augment.h"
#include "vit/block.h"
#include "vit/checkpoint.h"
#include "vit/dist.h"

static double now_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

struct vit_trainer {
    vit_config cfg;           /* the run's: a resume's recipe, its changes */
    vit_train_opts o;
    const vit_dataset *train_all; /* the caller's training set */
    vit_dataset train, val;   /* views of it: the validation set is its tail */
    const vit_dataset *test;
    vit_model *m;             /* the weights the optimizer trains */
    vit_model *avg;           /* with ema > 0: their running average, the
                                 classifier evaluated, saved and exported */
    vit_adamw opt;
    vit_run_state st;
    vit_tape *eval_tape;      /* training steps run on the model's own tapes */
    vit_real *images;
    int *labels, *perm;
    vit_real *targets;        /* [batch, classes] mixed labels (mixup, cutmix) */
    vit_real *drop;           /* [depth, 2, batch] drop-path scales (drop_path) */
    vit_augment_scratch *aug; /* vit_augment_batch's working memory */
    int mixed;                /* the batch in images is mixed: use targets */
    char **class_names;       /* the training data's, for the checkpoint (not owned) */
    FILE *metrics;
    char ckpt[4200], metrics_path[4200];
    double t0;                /* now_seconds() at vit_trainer_new */
    double prior_seconds;     /* of the run's earlier invocations */
    double last_save;         /* now_seconds() of the last checkpoint */
    vit_train_progress at;
    _Atomic int stop_asked;   /* vit_trainer_request_stop, a callback */
    int failed;               /* the error that ended the run, or VIT_OK */
    int complete_at_start;    /* a resume of a run that had done all its epochs */
    double lr;                /* the last step's learning rate */
    int epochs_cap;           /* with a budget: the most epochs a plan may give */
    double pace_t;            /* now_seconds() and the step of the budget's */
    unsigned long long pace_step; /* plan or its last check */
    double pace;              /* seconds per epoch, smoothed (0: none yet) */
    vit_eval_result last_test; /* the last epoch's one-pass test scores */
    double last_val;          /* and validation accuracy (-1: none yet) */
    double last_train_loss;   /* the last epoch's mean training loss */
};

/* The model evaluation scores: the average when the run averages. */
static vit_model *scored(vit_trainer *t) { return t->avg ? t->avg : t->m; }

/* Hands ev to the callback (rank 0 only); a nonzero answer asks for a stop. */
static void emit(vit_trainer *t, vit_train_event *ev)
{
    if (!t->o.on_event || vit_dist_rank() != 0)
        return;
    t->at.elapsed = now_seconds() - t->t0;
    ev->trainer = t;
    ev->at = &t->at;
    if (t->o.on_event(ev, t->o.user))
        atomic_store(&t->stop_asked, 1);
}

/* ---- batches ---------------------------------------------------------- */

/* Fills images/labels with items [lo, hi) of the minibatch idx[0..b),
 * augmented as the config says (vit_augment_batch: shift or crop_pad,
 * rotate, scale, flip, mixup, cutmix), and then draws the batch's
 * drop-path scales.  Every draw is for all b items whatever the slice, so
 * every rank of a data-parallel job advances its generator identically and
 * they all agree on the next permutation; with every new key off the draws
 * are the digits' as before.  t->mixed says whether targets hold the
 * batch's mixed labels. */
static int gather_batch(vit_trainer *t, const int *idx, int b, int lo, int hi)
{
    const vit_config *c = &t->cfg;
    vit_augment g = {.shift = c->shift > c->crop_pad ? c->shift : c->crop_pad,
                     .rotate = c->rotate, .scale = c->scale, .flip = c->flip, .mixup = c->mixup,
                     .cutmix = c->cutmix, .mix_prob = c->mix_prob, .smoothing = c->smoothing,
                     .classes = c->classes};
    int rc = vit_augment_batch(&g, &t->train, idx, b, lo, hi, t->aug, &t->st.rng, t->images,
                               t->labels, t->targets, &t->mixed, NULL);
    /* Row j (block j / 2, branch j % 2) is drawn for all b items, then its
     * slice moved to j (hi - lo): [depth, 2, hi - lo] as the model reads it
     * (each move goes to lower addresses than the rows still to draw). */
    for (int j = 0; rc == VIT_OK && t->drop && j < 2 * c->depth; j++) {
        vit_real *row = t->drop + (size_t)j * c->batch;
        rc = vit_drop_path_scales(row, b, c->drop_path * (j / 2 + 1) / c->depth, &t->st.rng);
        memmove(t->drop + (size_t)j * (hi - lo), row + lo, (size_t)(hi - lo) * sizeof *row);
    }
    return rc;
}

/* The augmentation's working memory and the buffers of the mixed targets
 * and drop-path scales, when the config asks for them. */
static int augment_buffers(vit_trainer *t)
{
    const vit_config *c = &t->cfg;
    int rc = vit_augment_scratch_new(&t->aug, c->batch, c->image_height, c->image_width,
                                     c->channels);
    if (rc)
        return rc;
    if (c->mixup > 0 || c->cutmix > 0)
        t->targets = malloc((size_t)c->batch * c->classes * sizeof *t->targets);
    if (c->drop_path > 0)
        t->drop = malloc((size_t)2 * c->depth * c->batch * sizeof *t->drop);
    if (((c->mixup > 0 || c->cutmix > 0) && !t->targets) || (c->drop_path > 0 && !t->drop))
        return vit_fail(VIT_ENOMEM, "vit_train_run: out of memory");
    return VIT_OK;
}

/* This rank's share [lo, hi) of n items: contiguous, sizes differing by at
 * most one. */
static void share(int n, int *lo, int *hi)
{
    int r = vit_dist_rank(), size = vit_dist_size();
    *lo = (int)((long long)n * r / size);
    *hi = (int)((long long)n * (r + 1) / size);
}

/* ---- setting up and resuming ------------------------------------------ */

/* A config value as text: numbers shortest-first (%g) when that is exact,
 * so that 0.1 does not read 0.10000000000000001. */
static const char *value_text(const char *v, char *buf, size_t cap)
{
    char *end;
    double d = strtod(v, &end);
    if (end != v && *end == 0) {
        snprintf(buf, cap, "%g", d);
        if (strtod(buf, NULL) == d)
            return buf;
    }
    return v;
}

/* A resumed run keeps its checkpoint's recipe: compares want with the
 * checkpoint's config ck key by key (their "key = value" lines, so every
 * key is covered).  epochs may grow, ckpt_minutes and precision may change
 * (precision is how the steps compute, not what the model is): those are
 * taken into *ck and reported (event VIT_TRAIN_RESUME_CHANGE); any other
 * difference is refused, naming the key and both values. */
static int resume_changes(vit_trainer *t, vit_config *ck, const vit_config *want, const char *path)
{
    unsigned long long done = t->st.epoch, epoch_step = t->st.epoch_step;
    char a[4096], b[4096];
    if (vit_config_format(ck, a, sizeof a) < 0 || vit_config_format(want, b, sizeof b) < 0)
        return VIT_EINVAL;
    for (char *la = a, *lb = b; *la && *lb;) {
        char *ea = strchr(la, '\n'), *eb = strchr(lb, '\n');
        if (!ea || !eb)
            break;
        *ea = *eb = 0;
        size_t klen = strcspn(la, " =");
        if (strcmp(la, lb) != 0) {
            char ta[64], tb[64];
            const char *va = value_text(la + klen + 3, ta, sizeof ta); /* after " = " */
            const char *vb = value_text(lb + klen + 3, tb, sizeof tb);
            int is_epochs = klen == 6 && strncmp(la, "epochs", klen) == 0;
            int is_minutes = klen == 12 && strncmp(la, "ckpt_minutes", klen) == 0;
            int is_prec = klen == 9 && strncmp(la, "precision", klen) == 0;
            if (!is_epochs && !is_minutes && !is_prec)
                return vit_fail(VIT_EINVAL, "%s: the checkpoint's run has %.*s = %s, this run asks "
                                "for %s; a resumed run keeps its recipe (only epochs, "
                                "ckpt_minutes and precision may change)", path, (int)klen, la, va, vb);
            if (is_epochs && (unsigned long long)want->epochs < done + (epoch_step > 0))
                return vit_fail(VIT_EINVAL, "%s: epochs = %d is fewer than the %llu epochs the "
                                "checkpoint has %s", path, want->epochs, done + (epoch_step > 0),
                                epoch_step ? "begun" : "done");
            la[klen] = 0;
            vit_train_event ev = {.kind = VIT_TRAIN_RESUME_CHANGE, .key = la, .old_value = va,
                                  .new_value = vb};
            emit(t, &ev);
            if (is_epochs)
                ck->epochs = want->epochs;
            else if (is_prec)
                ck->precision = want->precision;
            else
                ck->ckpt_minutes = want->ckpt_minutes;
        }
        la = ea + 1;
        lb = eb + 1;
    }
    return VIT_OK;
}

/* A checkpoint taken inside an epoch must fit this training set: the order
 * a permutation of its images, the position inside the epoch. */
static int check_position(const vit_run_state *st, int count, long spe, const char *path, int *seen)
{
    if (st->epoch_step == 0)
        return VIT_OK;
    if (st->norder != count || st->epoch_step >= (unsigned long long)spe)
        return vit_fail(VIT_EFORMAT, "%s: taken at step %llu of an epoch over %d images, but this "
                        "training set has %d images in %ld steps", path, st->epoch_step, st->norder,
                        count, spe);
    for (int i = 0; i < 3; i++)
        if (!isfinite(st->epoch_sums[i]))
            return vit_fail(VIT_EFORMAT, "%s: the epoch's running sums are not finite", path);
    memset(seen, 0, (size_t)count * sizeof *seen);
    for (int i = 0; i < count; i++) {
        int k = st->order[i];
        if (k < 0 || k >= count || seen[k]++)
            return vit_fail(VIT_EFORMAT, "%s: the stored data order is not a permutation of the "
                            "%d training images", path, count);
    }
    return VIT_OK;
}

void vit_trainer_free(vit_trainer *t)
{
    if (!t)
        return;
    vit_model_free(t->m);
    vit_model_free(t->avg);
    vit_adamw_free(&t->opt);
    vit_tape_free(t->eval_tape);
    free(t->images);
    free(t->labels);
    free(t->perm);
    free(t->targets);
    free(t->drop);
    vit_augment_scratch_free(t->aug);
    vit_run_state_free(&t->st);
    vit_eval_result_free(&t->last_test);
    if (t->metrics)
        fclose(t->metrics);
    free(t);
}

/* What this run trains on, into t->st.data (and so into its checkpoints).
 * A resume compares it with the checkpoint's record: other data is refused
 * unless opts.other_data; the spec is the one given, else the record's. */
static int check_data(vit_trainer *t)
{
    vit_run_data now;
    int rc = vit_run_data_of(t->train_all, t->test, t->o.data_spec, &now);
    if (rc)
        return rc;
    now.split = t->o.data_split;
    if (t->st.has_data && !vit_run_data_same(&t->st.data, &now) && !t->o.other_data) {
        char was[256], is[256];
        return vit_fail(VIT_EDATA, "%s: the run trained on %s%s%s%s; this data%s%s%s is %s",
                        t->o.resume, *t->st.data.spec ? "'" : "", t->st.data.spec,
                        *t->st.data.spec ? "', " : "",
                        vit_run_data_describe(&t->st.data, was, sizeof was),
                        *now.spec ? ", '" : "", now.spec, *now.spec ? "'," : "",
                        vit_run_data_describe(&now, is, sizeof is));
    }
    if (!t->o.data_spec && t->st.has_data)
        memcpy(now.spec, t->st.data.spec, sizeof now.spec);
    /* The same data without a split given: the split the record names. */
    if (t->st.has_data && !t->o.other_data && now.split.val == 0 && now.split.test == 0)
        now.split = t->st.data.split;
    t->st.data = now;
    t->st.has_data = 1;
    return VIT_OK;
}

/* The model: loaded from the checkpoint to resume (its recipe checked
 * against cfg), or made and initialized from the seed. */
static int make_model(vit_trainer *t)
{
    int rc;
    if (!t->o.resume) {
        if ((rc = check_data(t)))
            return rc;
        if (!(t->m = vit_model_new(&t->cfg)))
            return VIT_EINVAL;
        vit_rng_seed(&t->st.rng, t->cfg.seed);
        vit_model_init(t->m, &t->st.rng);
        rc = vit_adamw_init(&t->opt, vit_model_param_count(t->m), t->cfg.beta1, t->cfg.beta2,
                            t->cfg.eps, t->cfg.weight_decay);
        if (rc)
            return rc;
        if (t->cfg.ema > 0) { /* step 1 overwrites it; until then the init */
            if (!(t->avg = vit_model_new(&t->cfg)))
                return VIT_ENOMEM;
            memcpy(vit_model_params(t->avg), vit_model_params(t->m),
                   vit_model_param_count(t->m) * sizeof(vit_real));
        }
        return VIT_OK;
    }
    if ((rc = vit_run_load(t->o.resume, &t->m, &t->opt, &t->st)))
        return rc;
    vit_config ck = *vit_model_config(t->m);
    if ((rc = resume_changes(t, &ck, &t->cfg, t->o.resume)))
        return rc;
    if (ck.precision != vit_model_config(t->m)->precision
        && (rc = vit_model_set_precision(t->m, ck.precision)) < 0)
        return rc;
    t->cfg = ck;
    if ((rc = check_data(t)))
        return rc;
    if (ck.ema > 0) { /* the file's named tensors are the average */
        t->avg = t->m;
        if (!(t->m = vit_model_new(vit_model_config(t->avg))))
            return VIT_ENOMEM;
        /* An imported model has no training weights: they start from its
         * weights, and the average goes on from there. */
        const vit_real *from = t->st.train_params ? t->st.train_params : vit_model_params(t->avg);
        memcpy(vit_model_params(t->m), from, vit_model_param_count(t->m) * sizeof(vit_real));
    }
    free(t->st.train_params);
    t->st.train_params = NULL;
    return VIT_OK;
}

/* The model, its buffers and the data order: everything but the folder. */
static int setup_model(vit_trainer *t)
{
    int rc = make_model(t);
    if (rc)
        return rc;
    if ((rc = vit_check_data_shape(&t->cfg, &t->train, "training"))
        || (rc = vit_check_data_shape(&t->cfg, t->test, "test")))
        return rc;
    t->class_names = t->train.classes == t->cfg.classes ? t->train.class_names : NULL;
    size_t img = (size_t)t->cfg.image_height * t->cfg.image_width * t->cfg.channels;
    int count = t->train.count;
    t->eval_tape = vit_tape_new();
    t->images = malloc((size_t)t->cfg.batch * img * sizeof *t->images);
    t->labels = malloc((size_t)t->cfg.batch * sizeof *t->labels);
    t->perm = malloc((size_t)count * sizeof *t->perm);
    if (!t->eval_tape || !t->images || !t->labels || !t->perm)
        return vit_fail(VIT_ENOMEM, "vit_train_run: out of memory");
    if ((rc = augment_buffers(t)))
        return rc;
    long spe = (count + t->cfg.batch - 1) / t->cfg.batch;
    if ((rc = check_position(&t->st, count, spe, t->o.resume, t->perm)))
        return rc;
    if (t->st.epoch_step > 0)
        memcpy(t->perm, t->st.order, (size_t)count * sizeof *t->perm);
    return VIT_OK;
}

/* The output folder (rank 0 alone writes; the others learn of its failure
 * from the agree), the model, then the folder's earlier run set aside and
 * the history opened. */
static int setup(vit_trainer *t)
{
    const vit_train_opts *o = &t->o;
    int rc = vit_config_check(&t->cfg);
    if (rc)
        return rc;
    snprintf(t->ckpt, sizeof t->ckpt, "%s/last.ckpt", o->out_dir);
    snprintf(t->metrics_path, sizeof t->metrics_path, "%s/metrics.csv", o->out_dir);
    if (!o->overwrite && vit_run_dir_taken(o->out_dir, o->resume))
        return vit_fail(VIT_EINVAL, "%s already holds a run (last.ckpt); resume it, or overwrite it "
                        "to start over", o->out_dir);
    rc = vit_dist_rank() == 0 ? vit_run_dir_make(o->out_dir, t->ckpt) : VIT_OK;
    int all = vit_dist_agree(rc);
    if (all)
        return rc ? rc : vit_fail(all, "%s: rank 0 cannot use the output folder", o->out_dir);
    rc = setup_model(t);
    int rank = vit_dist_rank();
    /* A stop epoch the checkpoint has already passed would train nothing
     * and then spend the final evaluation on an unchanged model: refused
     * before anything is written. */
    if (rc == VIT_OK && o->stop_after_epochs > 0 && t->st.epoch < (unsigned long long)t->cfg.epochs
        && t->st.epoch >= (unsigned long long)o->stop_after_epochs)
        rc = vit_fail(VIT_EINVAL, "%s: the run has already done %llu epochs, so a stop after "
                      "epoch %d is already reached; nothing to train (stop at a later epoch, "
                      "or not at all)", o->resume, t->st.epoch, o->stop_after_epochs);
    char moved[4300] = "";
    if (rc == VIT_OK && rank == 0 && o->overwrite && vit_run_dir_taken(o->out_dir, o->resume)
        && (rc = vit_run_dir_set_aside(o->out_dir, moved, sizeof moved)) == VIT_OK) {
        vit_train_event ev = {.kind = VIT_TRAIN_SET_ASIDE, .path = moved};
        emit(t, &ev);
    }
    if (rc == VIT_OK && rank == 0)
        rc = vit_metrics_open(o->out_dir, o->resume, t->st.epoch, t->val.count > 0, &t->metrics,
                              &t->prior_seconds);
    if (rc == VIT_OK && rank == 0 && !t->complete_at_start)
        vit_metrics_drop_final(o->out_dir);
    rc = vit_dist_agree(rc);
    if (rc == VIT_OK && t->cfg.batch < vit_dist_size())
        rc = vit_fail(VIT_EINVAL, "batch %d is smaller than the %d ranks", t->cfg.batch,
                      vit_dist_size());
    return rc;
}

/* The schedule for the run's epochs: the steps taken and those left at
 * this steps-per-epoch (epochs * spe for a run on its own data; on other
 * data, or after a budget's new plan, laid out over what is left), the
 * warm-up within a tenth of it, and whether the run is done. */
static void layout(vit_trainer *t)
{
    const vit_config *c = &t->cfg;
    long spe = t->at.steps_per_epoch;
    long total = (long)t->st.step + (c->epochs - (long)t->st.epoch) * spe - (long)t->st.epoch_step;
    long warm = (long)(c->warmup * (double)spe);
    t->at.total_steps = total;
    t->at.warmup_steps = warm < total / 10 ? warm : total / 10;
    t->at.epochs = c->epochs;
    t->at.finished = t->st.epoch >= (unsigned long long)c->epochs
                     || (t->o.stop_after_epochs > 0
                         && t->st.epoch >= (unsigned long long)t->o.stop_after_epochs);
}

static int plan_budget(vit_trainer *t);

int vit_trainer_new(vit_trainer **out, const vit_config *cfg, const vit_dataset *train,
                    const vit_dataset *test, const vit_train_opts *o)
{
    if (out)
        *out = NULL;
    if (!out || !cfg || !train || !test || !o || !o->out_dir)
        return vit_fail(VIT_EINVAL, "vit_train_run: NULL argument");
    if (!(o->budget_seconds >= 0 && o->budget_seconds < 1e9))
        return vit_fail(VIT_EINVAL, "vit_train_run: budget_seconds %g is not in 0 .. 1e9",
                        o->budget_seconds);
    if (train->count <= o->val_count || o->val_count < 0)
        return vit_fail(VIT_EINVAL, "vit_train_run: val_count %d leaves no training images (of %d)",
                        o->val_count, train->count);
    vit_trainer *t = calloc(1, sizeof *t);
    if (!t)
        return vit_fail(VIT_ENOMEM, "vit_train_run: out of memory");
    t->t0 = t->last_save = now_seconds();
    t->o = *o;
    t->test = test;
    t->train_all = train;
    t->last_val = -1;
    /* The validation set is the tail of the training part, never the test. */
    t->train = t->val = *train;
    size_t img = (size_t)train->height * train->width * train->channels;
    t->train.count -= o->val_count;
    t->val.count = o->val_count;
    t->val.images += (size_t)t->train.count * img;
    t->val.labels += t->train.count;
    t->cfg = *cfg;
    t->cfg.image_height = train->height;
    t->cfg.image_width = train->width;
    t->cfg.channels = train->channels;
    t->cfg.classes = train->classes > test->classes ? train->classes : test->classes;
    int rc = setup(t);
    if (rc) {
        vit_trainer_free(t);
        return rc;
    }
    const vit_config *c = &t->cfg;
    long spe = (t->train.count + c->batch - 1) / c->batch;
    t->at = (vit_train_progress){
        .step = t->st.step, .epoch = t->st.epoch, .epoch_step = t->st.epoch_step,
        .start_step = t->st.step, .start_epoch = t->st.epoch, .steps_per_epoch = spe,
        .batch = c->batch, .train_count = t->train.count, .budget_seconds = o->budget_seconds};
    layout(t);
    t->complete_at_start = o->resume && t->st.epoch >= (unsigned long long)c->epochs;
    if (o->budget_seconds > 0 && !t->complete_at_start && (rc = plan_budget(t))) {
        vit_trainer_free(t);
        return rc;
    }
    vit_train_event ev = {.kind = VIT_TRAIN_BEGIN};
    emit(t, &ev);
    *out = t;
    return VIT_OK;
}

/* ---- steps and epochs -------------------------------------------------- */

/* FNV-1a over the parameter bytes: equal on every rank iff the replicas
 * hold bitwise the same parameters (up to a 2^-64 collision). */
static unsigned long long params_hash(vit_model *m)
{
    const unsigned char *p = (const unsigned char *)vit_model_params(m);
    size_t n = vit_model_param_count(m) * sizeof(vit_real);
    unsigned long long h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++)
        h = (h ^ p[i]) * 1099511628211ull;
    return h;
}

/* Forward and backward of this rank's bl images (already gathered):
 * leaves the gradient of their mean loss in the model's gradient buffer and
 * adds (loss * bl, correct) to red. */
static int local_step(vit_trainer *r, int bl, double red[2])
{
    const vit_config *c = &r->cfg;
    if (bl == 0) {
        vit_model_zero_grads(r->m);
        return VIT_OK; /* a batch smaller than the job: this rank adds nothing */
    }
    double loss;
    int correct;
    vit_train_extras ex = {r->mixed ? r->targets : NULL, r->drop};
    int rc = vit_model_train_grads_ex(r->m, r->images, r->labels, bl, (vit_real)c->smoothing, &ex,
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

/* Sums the ranks' gradients of their mean losses into the gradient of the
 * global batch mean: each share is weighted by its size first. */
static int reduce_grads(vit_trainer *r, int bl, int b, double red[2])
{
    if (vit_dist_size() == 1)
        return VIT_OK;
    vit_real *g = vit_model_grads(r->m);
    size_t n = vit_model_param_count(r->m);
    vit_real w = (vit_real)bl / (vit_real)b;
    for (size_t i = 0; i < n; i++)
        g[i] *= w;
    int rc = vit_dist_sum(g, n);
    return rc ? rc : vit_dist_sum_double(red, 2);
}

/* vit_evaluate_tta of the scored model over a data-parallel job: each rank
 * scores its share of ds and the sums are combined, so every rank gets the
 * whole result. */
static int evaluate_shared(vit_trainer *r, const vit_dataset *ds, int tta, vit_eval_result *ev)
{
    if (vit_dist_size() == 1)
        return vit_evaluate_tta(scored(r), r->eval_tape, ds, 256, tta, ev);
    int lo, hi, K = r->cfg.classes;
    share(ds->count, &lo, &hi);
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

/* Writes the checkpoint (rank 0; the others learn of a failure), with the
 * data order when taken inside an epoch (norder > 0); event CHECKPOINT. */
static int save(vit_trainer *t, int norder)
{
    vit_run_state st = t->st;
    st.train_params = t->avg ? vit_model_params(t->m) : NULL;
    st.order = norder ? t->perm : NULL;
    st.norder = norder;
    if (t->class_names) { /* else those of the resumed checkpoint, if any */
        st.class_names = t->class_names;
        st.nclass_names = t->cfg.classes;
    }
    /* The run's config, not the model's copy: a resume may have extended
     * the run (epochs) or changed ckpt_minutes, and a later resume or
     * vit_run_config must see that. */
    int mine = vit_dist_rank() == 0 ? vit_run_internal_save(t->ckpt, scored(t), &t->cfg, &t->opt, &st)
                                    : VIT_OK;
    int rc = vit_dist_agree(mine);
    if (rc && mine == VIT_OK)
        vit_fail(rc, "rank 0 could not write %s", t->ckpt);
    if (rc)
        return rc;
    t->last_save = now_seconds();
    vit_train_event ev = {.kind = VIT_TRAIN_CHECKPOINT, .path = t->ckpt};
    emit(t, &ev);
    return VIT_OK;
}

/* Between two steps: is a stop asked for (opts.stop, a callback,
 * vit_trainer_request_stop), or a timed checkpoint due?  Any rank's answer
 * is every rank's, so all pause at the same step. */
static int pause_wanted(vit_trainer *t, int *stop, int *rc)
{
    int want[2] = {(t->o.stop && *t->o.stop) || atomic_load(&t->stop_asked),
                   t->cfg.ckpt_minutes > 0 && now_seconds() - t->last_save >= 60 * t->cfg.ckpt_minutes};
    *rc = vit_dist_size() > 1 ? vit_dist_sum_int(want, 2) : VIT_OK;
    *stop = want[0] > 0;
    return *rc == VIT_OK && (want[0] > 0 || want[1] > 0);
}

/* The optimizer's refusal as the run's error: VIT_ENUM naming the step and
 * whether a gradient was not finite or overflowed when squared. */
static int diverged(vit_trainer *t, int rc)
{
    if (rc != VIT_ENUM && rc != VIT_ERANGE)
        return rc;
    return vit_fail(VIT_ENUM, "training diverged: %s at step %llu (epoch %llu)",
                    rc == VIT_ERANGE ? "overflowing gradient" : "non-finite gradient",
                    t->st.step + 1, t->st.epoch + 1);
}

/* Step s of the epoch: the minibatch gathered (every rank draws the whole
 * batch's augmentation, so their generators stay equal), each rank's share
 * forward and backward, the gradients summed, the AdamW update and the
 * average; the epoch's running sums in t->st.  *loss: the batch's mean. */
static int train_batch(vit_trainer *t, long s, double *loss)
{
    const vit_config *c = &t->cfg;
    const vit_dataset *train = &t->train;
    int start = (int)(s * c->batch);
    int b = train->count - start < c->batch ? train->count - start : c->batch;
    int lo, hi;
    share(b, &lo, &hi);
    double red[2] = {0, 0};
    int mine = gather_batch(t, t->perm + start, b, lo, hi);
    if (mine == VIT_OK)
        mine = local_step(t, hi - lo, red);
    int rc = vit_dist_agree(mine);
    if (rc != VIT_OK && mine == VIT_OK)
        return vit_fail(rc, "step %llu failed on another rank", t->st.step + 1);
    if (rc || (rc = reduce_grads(t, hi - lo, b, red)))
        return rc;
    double lv = red[0] / b;
    if (!isfinite(lv))
        return vit_fail(VIT_ENUM, "training diverged: loss is %g at step %llu (epoch %llu)", lv,
                        t->st.step + 1, t->st.epoch + 1);
    int ngroups;
    const vit_param_group *groups = vit_model_groups(t->m, &ngroups);
    double lr = vit_lr_at((long)t->st.step, t->at.total_steps, t->at.warmup_steps, c->lr,
                          c->min_lr);
    rc = vit_adamw_step(&t->opt, vit_model_params(t->m), vit_model_grads(t->m), groups, ngroups, lr);
    if (rc)
        return diverged(t, rc);
    t->st.step++;
    if (t->avg && (rc = vit_ema_update(vit_model_params(t->avg), vit_model_params(t->m),
                                       vit_model_param_count(t->m), c->ema, t->st.step)))
        return rc;
    t->st.epoch_sums[0] += red[0];
    t->st.epoch_sums[1] += red[1];
    t->st.epoch_sums[2] += b;
    t->st.epoch_step = (unsigned long long)s + 1;
    t->lr = lr;
    *loss = lv;
    return VIT_OK;
}

/* ---- the time budget ---------------------------------------------------- */

/* Seconds of scoring after each epoch (test and validation sets, one pass)
 * and at the end (with shift9 nine more passes of each; the one-pass
 * figures are the last epoch's), at score_seconds per image and pass. */
static double epoch_scoring(const vit_trainer *t)
{
    return (double)(t->test->count + t->val.count) * t->at.score_seconds;
}

static double final_scoring(const vit_trainer *t)
{
    return t->cfg.tta == VIT_TTA_SHIFT9 ? 9 * epoch_scoring(t) : 0;
}

/* The epochs whose rest costs nearest `left` seconds from here (within
 * half an epoch): the current epoch's remaining steps, whole epochs of spe
 * steps at step seconds each plus `scoring` seconds, and `final` seconds
 * of final scores; at least the epoch after the last done, at most
 * epochs_cap. */
static int epochs_fitting(const vit_trainer *t, double left, double step, double scoring,
                          double final)
{
    long spe = t->at.steps_per_epoch;
    double epoch = (double)spe * step + scoring;
    double n = floor((left - final + (double)t->st.epoch_step * step) / epoch + 0.5);
    double lo = (double)t->st.epoch + 1, hi = t->epochs_cap;
    double e = (double)t->st.epoch + n;
    return (int)(e < lo ? lo : e > hi ? hi : e);
}

/* Times a few forward and backward passes of one batch (the first not
 * counted: caches, tapes) for about 2% of the budget (0.05 .. 2 s), and
 * two one-pass scorings of up to 256 test images (the second counted),
 * without training: the model, its gradients' use and the run's random
 * state are as they were.  A data-parallel job takes the ranks' mean. */
static int measure_costs(vit_trainer *t)
{
    const vit_config *c = &t->cfg;
    int b = c->batch < t->train.count ? c->batch : t->train.count, lo, hi, rc = VIT_OK;
    int *idx = malloc((size_t)b * sizeof *idx);
    if (!idx)
        return vit_fail(VIT_ENOMEM, "vit_train_run: out of memory");
    for (int i = 0; i < b; i++)
        idx[i] = i;
    vit_rng saved = t->st.rng; /* the augmentation's draws are given back below */
    share(b, &lo, &hi);
    double limit = 0.02 * t->o.budget_seconds, t1 = 0, cost[2] = {0, 0};
    limit = limit < 0.05 ? 0.05 : limit > 2 ? 2 : limit;
    int k;
    for (k = 0; rc == VIT_OK; k++) {
        if (k == 1)
            t1 = now_seconds();
        if (k > 3 && now_seconds() - t1 >= limit)
            break;
        double red[2] = {0, 0};
        rc = gather_batch(t, idx, b, lo, hi);
        if (rc == VIT_OK)
            rc = local_step(t, hi - lo, red);
    }
    t->st.rng = saved;
    free(idx);
    int all = vit_dist_agree(rc);
    if (all)
        return rc ? rc : vit_fail(all, "the budget's measurement failed on another rank");
    cost[0] = (now_seconds() - t1) / (k - 1) * c->batch / b;
    vit_dataset part = *t->test;
    part.count = part.count < 256 ? part.count : 256;
    for (int pass = 0; pass < 2 && rc == VIT_OK; pass++) {
        vit_eval_result ev;
        double t2 = now_seconds();
        if ((rc = evaluate_shared(t, &part, VIT_TTA_NONE, &ev)) == VIT_OK)
            cost[1] = (now_seconds() - t2) / part.count;
        vit_eval_result_free(&ev);
    }
    if (rc || (rc = vit_dist_sum_double(cost, 2)))
        return rc;
    t->at.step_seconds = cost[0] / vit_dist_size();
    t->at.score_seconds = cost[1] / vit_dist_size();
    return VIT_OK;
}

/* The plan (vit_train_opts.budget_seconds): the costs measured, cfg's
 * epochs set to what fits in 97% of the budget, the schedule laid out;
 * event PLAN. */
static int plan_budget(vit_trainer *t)
{
    t->epochs_cap = t->cfg.epochs;
    int rc = measure_costs(t);
    if (rc)
        return rc;
    double el = now_seconds() - t->t0, step = t->at.step_seconds;
    double left = 0.98 * t->o.budget_seconds - el;
    t->cfg.epochs = epochs_fitting(t, left, step, epoch_scoring(t), final_scoring(t));
    layout(t);
    long steps = t->at.total_steps - (long)t->st.step;
    t->at.planned_seconds = el + (double)steps * step
                            + (double)(t->cfg.epochs - (long)t->st.epoch) * epoch_scoring(t)
                            + final_scoring(t);
    t->pace_t = now_seconds();
    t->pace_step = t->st.step;
    vit_train_event ev = {.kind = VIT_TRAIN_PLAN, .images_per_second = t->cfg.batch / step};
    emit(t, &ev);
    return VIT_OK;
}

/* After an epoch of a budgeted run (at most every 3% of the budget): the
 * pace (seconds per epoch, steps and scoring: the machine may be shared;
 * the mean of the last window's and the pace before) against the plan.
 * A run predicted to end over the budget gets fewer epochs (to end at 98%
 * of it), one predicted to end under 92% of it more (to end at 95%, at
 * least one more and 5%); the schedule is laid out anew either way (event
 * PLAN).  Every rank takes rank 0's times. */
static int hold_budget(vit_trainer *t)
{
    double now = now_seconds(), spe = (double)t->at.steps_per_epoch;
    double done = (double)(t->st.step - t->pace_step) / spe;
    double x[2] = {0, 0};
    /* Short epochs are checked in windows of 3% of the budget at least, as
     * rank 0's clock says. */
    x[0] = vit_dist_rank() == 0 && now - t->pace_t < 0.03 * t->o.budget_seconds;
    int rc = vit_dist_size() > 1 ? vit_dist_sum_double(x, 1) : VIT_OK;
    if (rc || x[0] > 0)
        return rc;
    x[0] = 0;
    if (vit_dist_rank() == 0 && done > 0) {
        x[0] = now - t->t0;
        x[1] = (now - t->pace_t) / done;
    }
    t->pace_t = now;
    t->pace_step = t->st.step;
    rc = vit_dist_size() > 1 ? vit_dist_sum_double(x, 2) : VIT_OK;
    if (rc || done <= 0)
        return rc;
    double el = x[0];
    t->pace = t->pace > 0 ? 0.5 * (t->pace + x[1]) : x[1];
    double per_epoch = t->pace, measured = spe * t->at.step_seconds + epoch_scoring(t);
    double slow = measured > 0 ? per_epoch / measured : 1, final = final_scoring(t) * slow;
    int E = t->cfg.epochs;
    double end = el + (double)(E - (long)t->st.epoch) * per_epoch + final;
    double budget = t->o.budget_seconds;
    if (end <= budget && (end >= 0.92 * budget || E >= t->epochs_cap))
        return VIT_OK;
    /* Shortened to end at 98%, lengthened to 95%: room for the pace to
     * waver without a plan each epoch. */
    double aim = end > budget ? 0.98 : 0.95;
    int want = epochs_fitting(t, aim * budget - el, per_epoch / spe, 0, final);
    if (want == E || (want > E && want < E + 1 + E / 20))
        return VIT_OK; /* a longer run only for a gain worth a new schedule */
    t->cfg.epochs = want;
    layout(t);
    t->at.replans++;
    t->at.planned_seconds = el + (double)(want - (long)t->st.epoch) * per_epoch + final;
    vit_train_event ev = {.kind = VIT_TRAIN_PLAN, .images_per_second = t->cfg.batch * spe / per_epoch};
    emit(t, &ev);
    return VIT_OK;
}

/* The end of an epoch: its scores (test, validation), the metrics row and
 * event, then the checkpoint it is due (every ckpt_every epochs, the last,
 * a pause). */
static int end_epoch(vit_trainer *t)
{
    const vit_train_opts *o = &t->o;
    vit_epoch_metrics row = {.train_loss = t->st.epoch_sums[0] / t->st.epoch_sums[2],
                             .train_acc = t->st.epoch_sums[1] / t->st.epoch_sums[2],
                             .lr = t->lr, .val_acc = -1};
    t->last_train_loss = row.train_loss;
    t->st.epoch_step = 0;
    memset(t->st.epoch_sums, 0, sizeof t->st.epoch_sums);
    t->st.epoch++;
    row.epoch = t->st.epoch;
    vit_eval_result_free(&t->last_test);
    int rc = evaluate_shared(t, t->test, VIT_TTA_NONE, &t->last_test);
    if (rc == VIT_ENUM) { /* the epoch's last steps diverged without a NaN loss yet */
        char why[400];
        snprintf(why, sizeof why, "%s", vit_last_error());
        return vit_fail(VIT_ENUM, "training diverged by step %llu (evaluation after epoch %llu): %s",
                        t->st.step, t->st.epoch, why);
    }
    if (rc)
        return rc;
    if (o->check_replicas && !vit_dist_same(params_hash(t->m)))
        return vit_fail(VIT_EINVAL, "replicas diverged: parameters differ between ranks after "
                        "epoch %llu", t->st.epoch);
    if (t->val.count > 0) {
        vit_eval_result vr;
        if ((rc = evaluate_shared(t, &t->val, VIT_TTA_NONE, &vr)))
            return rc;
        t->last_val = row.val_acc = vr.accuracy;
        vit_eval_result_free(&vr);
    }
    row.test_loss = t->last_test.loss;
    row.test_acc = t->last_test.accuracy;
    row.seconds = t->prior_seconds + now_seconds() - t->t0;
    if (vit_dist_rank() == 0
        && (rc = vit_metrics_append(t->metrics, t->metrics_path, &row, t->val.count > 0)))
        return rc;
    unsigned long long ep = t->st.epoch;
    t->at.epoch = ep;
    t->at.epoch_step = 0;
    t->at.finished = ep >= (unsigned long long)t->cfg.epochs
                     || (o->stop_after_epochs > 0 && ep >= (unsigned long long)o->stop_after_epochs);
    double el = now_seconds() - t->t0;
    vit_train_event ev = {.kind = VIT_TRAIN_EPOCH, .epoch = &row,
                          .images_per_second = (double)(ep - t->at.start_epoch) * t->train.count / el};
    emit(t, &ev);
    if (o->budget_seconds > 0 && !t->at.finished && (rc = hold_budget(t)))
        return rc;
    int last = ep == (unsigned long long)t->cfg.epochs
               || (o->stop_after_epochs > 0 && ep == (unsigned long long)o->stop_after_epochs);
    int stop = 0, pause = pause_wanted(t, &stop, &rc);
    if (rc)
        return rc;
    if ((o->ckpt_every > 0 && (ep % (unsigned long long)o->ckpt_every == 0 || last)) || pause)
        if ((rc = save(t, 0)))
            return rc;
    t->at.stopped = stop;
    return VIT_OK;
}

/* One step and what follows it: the event, a pause inside the epoch, or
 * the epoch's end. */
static int step_once(vit_trainer *t)
{
    long spe = t->at.steps_per_epoch;
    long s = (long)t->st.epoch_step;
    if (s == 0) { /* a new epoch; else t->perm holds the checkpoint's order */
        for (int i = 0; i < t->train.count; i++)
            t->perm[i] = i;
        vit_rng_shuffle(&t->st.rng, t->perm, t->train.count);
    }
    double loss = 0;
    int rc = train_batch(t, s, &loss);
    if (rc)
        return rc;
    t->at.step = t->st.step;
    t->at.epoch_step = t->st.epoch_step;
    double el = now_seconds() - t->t0;
    double steps = (double)(t->st.step - t->at.start_step);
    vit_train_event ev = {.kind = VIT_TRAIN_STEP, .loss = loss, .lr = t->lr,
                          .images_per_second = steps * t->cfg.batch / (el > 1e-9 ? el : 1e-9)};
    emit(t, &ev);
    if (s + 1 == spe)
        return end_epoch(t);
    int stop = 0;
    if (pause_wanted(t, &stop, &rc)) {
        if ((rc = save(t, t->train.count)))
            return rc;
        t->at.stopped = stop;
    }
    return rc;
}

/* ---- the public calls ---------------------------------------------------- */

int vit_trainer_step(vit_trainer *t)
{
    if (!t)
        return vit_fail(VIT_EINVAL, "vit_trainer_step: NULL trainer");
    if (t->failed)
        return vit_fail(t->failed, "vit_trainer_step: the run failed earlier (%s)",
                        vit_status_name(t->failed));
    if (t->at.finished || t->at.stopped)
        return vit_fail(VIT_EINVAL, "vit_trainer_step: the run is %s",
                        t->at.stopped ? "stopped" : "finished");
    int rc = step_once(t);
    t->failed = rc;
    return rc;
}

int vit_trainer_epoch(vit_trainer *t)
{
    int rc;
    do
        rc = vit_trainer_step(t);
    while (rc == VIT_OK && !t->at.stopped && t->at.epoch_step != 0);
    return rc;
}

const vit_train_progress *vit_trainer_progress(const vit_trainer *t) { return t ? &t->at : NULL; }

const vit_config *vit_trainer_config(const vit_trainer *t) { return t ? &t->cfg : NULL; }

vit_model *vit_trainer_model(vit_trainer *t) { return t ? scored(t) : NULL; }

void vit_trainer_request_stop(vit_trainer *t)
{
    if (t)
        atomic_store(&t->stop_asked, 1);
}

int vit_trainer_checkpoint(vit_trainer *t)
{
    if (!t)
        return vit_fail(VIT_EINVAL, "vit_trainer_checkpoint: NULL trainer");
    return save(t, t->st.epoch_step > 0 ? t->train.count : 0);
}

int vit_trainer_evaluate(vit_trainer *t, const vit_dataset *ds, int tta, vit_eval_result *r)
{
    if (!t || !ds || !r)
        return vit_fail(VIT_EINVAL, "vit_trainer_evaluate: NULL argument");
    int rc = vit_check_data_shape(&t->cfg, ds, "evaluation");
    return rc ? rc : evaluate_shared(t, ds, tta, r);
}

void vit_train_result_free(vit_train_result *r)
{
    if (!r)
        return;
    free(r->confusion);
    r->confusion = NULL;
}

/* tta = auto: shift9 is used only if it beats one pass (val_plain) on the
 * validation set; without one, one pass is kept and the shift9 test figure
 * goes beside it.  *tta gets the choice. */
static int choose_tta(vit_trainer *t, double val_plain, int *tta, vit_train_result *res)
{
    vit_eval_result e = {0};
    int rc;
    res->tta_auto = 1;
    *tta = VIT_TTA_NONE;
    if (t->val.count > 0) {
        if ((rc = evaluate_shared(t, &t->val, VIT_TTA_SHIFT9, &e)) == VIT_OK) {
            res->val_accuracy_tta = e.accuracy;
            *tta = e.accuracy > val_plain ? VIT_TTA_SHIFT9 : VIT_TTA_NONE;
        }
    } else if ((rc = evaluate_shared(t, t->test, VIT_TTA_SHIFT9, &e)) == VIT_OK)
        res->test_accuracy_tta = e.accuracy;
    vit_eval_result_free(&e);
    return rc;
}

/* The final figures: one pass, as the epoch rows show (the last epoch's,
 * when this invocation scored one), and then, with test-time
 * augmentation, the classifier's own, which the result reports first
 * (tta = auto: choose_tta decides which). */
static int final_scores(vit_trainer *t, vit_train_result *res)
{
    vit_eval_result ev = t->last_test;
    memset(&t->last_test, 0, sizeof t->last_test);
    int rc = ev.confusion ? VIT_OK : evaluate_shared(t, t->test, VIT_TTA_NONE, &ev);
    double val_acc = t->last_val;
    if (rc == VIT_OK && t->val.count > 0 && val_acc < 0) {
        vit_eval_result vr = {0};
        if ((rc = evaluate_shared(t, &t->val, VIT_TTA_NONE, &vr)) == VIT_OK)
            val_acc = vr.accuracy;
        vit_eval_result_free(&vr);
    }
    res->test_accuracy_plain = ev.accuracy;
    res->test_loss_plain = ev.loss;
    res->val_accuracy_plain = val_acc;
    res->val_accuracy = val_acc;
    res->val_accuracy_tta = res->test_accuracy_tta = -1;
    int tta = t->cfg.tta;
    if (rc == VIT_OK && tta == VIT_TTA_AUTO)
        rc = choose_tta(t, val_acc, &tta, res);
    res->tta = tta;
    if (rc == VIT_OK && tta != VIT_TTA_NONE) {
        vit_eval_result et;
        if ((rc = evaluate_shared(t, t->test, tta, &et)) == VIT_OK) {
            vit_eval_result_free(&ev);
            ev = et;
        }
        vit_eval_result vr = {0};
        if (rc == VIT_OK && t->val.count > 0
            && (rc = res->tta_auto ? VIT_OK : evaluate_shared(t, &t->val, tta, &vr)) == VIT_OK)
            res->val_accuracy = res->tta_auto ? res->val_accuracy_tta : vr.accuracy;
        vit_eval_result_free(&vr);
    }
    if (rc == VIT_OK) {
        res->test_accuracy = ev.accuracy;
        res->test_loss = ev.loss;
        res->confusion = ev.confusion;
        res->confusion_classes = ev.classes;
        ev.confusion = NULL;
    }
    vit_eval_result_free(&ev);
    return rc;
}

int vit_trainer_fit(vit_trainer *t, vit_train_result *res)
{
    if (!t || !res)
        return vit_fail(VIT_EINVAL, "vit_trainer_fit: NULL argument");
    memset(res, 0, sizeof *res);
    res->val_accuracy = -1;
    res->steps_per_epoch = t->at.steps_per_epoch;
    res->tta = t->cfg.tta;
    res->val_accuracy_tta = res->test_accuracy_tta = -1;
    res->ema = t->cfg.ema;
    int rc = VIT_OK;
    while (rc == VIT_OK && !t->at.finished && !t->at.stopped)
        rc = vit_trainer_step(t);
    if (rc)
        return rc;
    res->epochs_done = (int)t->st.epoch;
    res->epochs = t->cfg.epochs;
    res->steps = t->st.step;
    if (t->complete_at_start) {
        res->already_complete = 1;
        return VIT_OK;
    }
    if (t->at.stopped) {
        res->interrupted = 1;
        res->epoch_step = t->st.epoch_step;
        res->seconds = now_seconds() - t->t0;
        return VIT_OK;
    }
    if ((rc = final_scores(t, res)))
        return rc;
    /* The figures just reported, beside metrics.csv (which holds one-pass
     * figures per epoch). */
    rc = vit_dist_rank() == 0 ? vit_metrics_write_final(t->o.out_dir, res, t->last_train_loss)
                              : VIT_OK;
    if ((rc = vit_dist_agree(rc)))
        return rc;
    res->seconds = now_seconds() - t->t0;
    res->images_per_second = (double)(t->st.epoch - t->at.start_epoch) * t->train.count / res->seconds;
    return VIT_OK;
}

int vit_train_run(const vit_config *cfg, const vit_dataset *train, const vit_dataset *test,
                  const vit_train_opts *o, vit_train_result *res)
{
    if (!res)
        return vit_fail(VIT_EINVAL, "vit_train_run: NULL argument");
    memset(res, 0, sizeof *res);
    res->val_accuracy = -1;
    vit_trainer *t;
    int rc = vit_trainer_new(&t, cfg, train, test, o);
    if (rc == VIT_OK)
        rc = vit_trainer_fit(t, res);
    vit_trainer_free(t);
    return rc;
}
