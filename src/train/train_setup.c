/*
 * Setting a training run up: a fresh model or a resumed checkpoint (its
 * recipe kept, the allowed changes reported), the data checked against the
 * run's record, the buffers, the output folder, the schedule's layout; and
 * freeing it all again (vit_trainer_new, vit_trainer_free).
 */

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "error.h"
#include "train_internal.h"
#include "trainer_internal.h"
#include "vit/augment.h"
#include "vit/dist.h"

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
static int resume_changes(vit_trainer *t, const vit_config *ck, vit_train_config *cktc,
                          const vit_config *want, const vit_train_config *wtc, const char *path)
{
    unsigned long long done = t->st.epoch, epoch_step = t->st.epoch_step;
    char a[4096], b[4096];
    /* Another architecture shifts every line after it: said first. */
    if (vit_config_arch(ck) != vit_config_arch(want))
        return vit_fail(VIT_EINVAL, "%s: the checkpoint's run has arch = %s, this run asks for %s; "
                        "a resumed run keeps its model", path, vit_config_arch(ck)->name,
                        vit_config_arch(want)->name);
    if (vit_config_format(ck, cktc, a, sizeof a) < 0
        || vit_config_format(want, wtc, b, sizeof b) < 0)
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
                                "for %s; a resumed run keeps its recipe (" VIT_RESUME_MAY_CHANGE
                                ")", path, (int)klen, la, va, vb);
            if (is_epochs && (unsigned long long)wtc->epochs < done + (epoch_step > 0))
                return vit_fail(VIT_EINVAL, "%s: epochs = %d is fewer than the %llu epochs the "
                                "checkpoint has %s", path, wtc->epochs, done + (epoch_step > 0),
                                epoch_step ? "begun" : "done");
            la[klen] = 0;
            vit_train_event ev = {.kind = VIT_TRAIN_RESUME_CHANGE, .key = la, .old_value = va,
                                  .new_value = vb};
            vit_train_emit(t, &ev);
            if (is_epochs)
                cktc->epochs = wtc->epochs;
            else if (is_prec)
                cktc->precision = wtc->precision;
            else
                cktc->ckpt_minutes = wtc->ckpt_minutes;
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
    vit_dist_buckets_free(t->sum);
    vit_run_state_free(&t->st);
    vit_train_init_free(t);
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
    now.fit = t->o.data_fit;
    now.val_count = t->o.val_count;
    if (t->st.has_data && !vit_run_data_same(&t->st.data, &now) && !t->o.other_data) {
        char was[256], is[256];
        return vit_fail(VIT_EDATA, "%s: the run trained on %s%s%s%s; this data%s%s%s is %s",
                        t->o.resume, *t->st.data.spec ? "'" : "", t->st.data.spec,
                        *t->st.data.spec ? "', " : "",
                        vit_run_data_describe(&t->st.data, was, sizeof was),
                        *now.spec ? ", '" : "", now.spec, *now.spec ? "'," : "",
                        vit_run_data_describe(&now, is, sizeof is));
    }
    /* Another validation tail would train on images the run held out
     * (or hold out some it trained on). */
    if (t->st.has_data && !t->o.other_data && t->st.data.val_count != t->o.val_count &&
        t->st.data.val_count > 0)
        return vit_fail(VIT_EINVAL, "%s: the run held out its last %d training images for "
                        "validation, this resume asks for %d (val_count); a resumed run keeps "
                        "its own",
                        t->o.resume, t->st.data.val_count, t->o.val_count);
    if (!t->o.data_spec && t->st.has_data)
        memcpy(now.spec, t->st.data.spec, sizeof now.spec);
    /* The same data without a split given: the split the record names. */
    if (t->st.has_data && !t->o.other_data && now.split.val == 0 && now.split.test == 0)
        now.split = t->st.data.split;
    if (t->st.has_data) { /* what a resumed run started from stays recorded */
        memcpy(now.init_from, t->st.data.init_from, sizeof now.init_from);
        now.init_hash = t->st.data.init_hash;
    }
    if (t->st.has_data && !t->o.other_data && now.fit.height == 0 && now.fit.channels == 0)
        now.fit = t->st.data.fit;
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
        /* data_norm's statistics, once, from the training part (without the
         * validation tail); every rank holds the whole set, so all agree.
         * A resumed run and a fine-tuned one keep their file's. */
        vit_config *c = &t->cfg;
        if (c->data_norm && c->data_mean.n == 0 && c->data_std.n == 0 && !t->init_src) {
            if ((rc = vit_channel_stats(t->train.images, t->train.count,
                                        t->train.height * t->train.width, t->train.channels,
                                        c->data_mean.v, c->data_std.v)))
                return rc;
            c->data_mean.n = c->data_std.n = t->train.channels;
        }
        if (t->init_src) { /* trained weights (train_init.c) */
            if ((rc = vit_train_init_model(t)))
                return rc;
        } else {
            if (!(t->m = vit_model_new(&t->cfg)))
                return VIT_EINVAL;
            vit_rng_seed(&t->st.rng, t->tc.seed);
            vit_model_init(t->m, &t->st.rng);
        }
        rc = vit_adamw_init(&t->opt, vit_model_param_count(t->m), t->tc.beta1, t->tc.beta2,
                            t->tc.eps, t->tc.weight_decay);
        if (rc)
            return rc;
        if (t->tc.ema > 0) { /* step 1 overwrites it; until then the init */
            if (!(t->avg = vit_model_new(&t->cfg)))
                return VIT_ENOMEM;
            memcpy(vit_model_params(t->avg), vit_model_params(t->m),
                   vit_model_param_count(t->m) * sizeof(vit_real));
        }
        return VIT_OK;
    }
    vit_train_config cktc;
    if ((rc = vit_run_load(t->o.resume, &t->m, &cktc, &t->opt, &t->st)))
        return rc;
    vit_config ck = *vit_model_config(t->m);
    if ((rc = resume_changes(t, &ck, &cktc, &t->cfg, &t->tc, t->o.resume)))
        return rc;
    t->cfg = ck;
    t->tc = cktc;
    if ((rc = check_data(t)))
        return rc;
    if (cktc.ema > 0) { /* the file's named tensors are the average */
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
    /* How the steps compute: the recipe's, on the model trained. */
    if ((rc = vit_model_set_precision(t->m, t->tc.precision)) < 0
        || (rc = vit_model_set_recompute(t->m, t->tc.recompute))
        || (rc = vit_model_set_micro_batch(t->m, t->tc.micro_batch)))
        return rc;
    if ((rc = vit_check_data_shape(&t->cfg, &t->train, "training"))
        || (rc = vit_check_data_shape(&t->cfg, t->test, "test")))
        return rc;
    t->class_names = t->train.classes == t->cfg.classes ? t->train.class_names : NULL;
    size_t img = (size_t)t->cfg.image_height * t->cfg.image_width * t->cfg.channels;
    int count = t->train.count;
    t->eval_tape = vit_tape_new();
    t->images = malloc((size_t)t->tc.batch * img * sizeof *t->images);
    t->labels = malloc((size_t)t->tc.batch * sizeof *t->labels);
    t->perm = malloc((size_t)count * sizeof *t->perm);
    if (!t->eval_tape || !t->images || !t->labels || !t->perm)
        return vit_fail(VIT_ENOMEM, "vit_train_run: out of memory");
    if ((rc = vit_train_augment_buffers(t)))
        return rc;
    long spe = (count + t->tc.batch - 1) / t->tc.batch;
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
    int rc = vit_train_init_source(t); /* init_from: its architecture into cfg */
    if (rc == VIT_OK)
        rc = vit_config_check(&t->cfg);
    if (rc == VIT_OK)
        rc = vit_train_config_check(&t->tc, &t->cfg);
    if (rc)
        return rc;
    snprintf(t->ckpt, sizeof t->ckpt, "%s/last.ckpt", o->out_dir);
    snprintf(t->metrics_path, sizeof t->metrics_path, "%s/metrics.csv", o->out_dir);
    snprintf(t->best_path, sizeof t->best_path, "%s/best.ckpt", o->out_dir);
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
    if (rc == VIT_OK && o->stop_after_epochs > 0 && t->st.epoch < (unsigned long long)t->tc.epochs
        && t->st.epoch >= (unsigned long long)o->stop_after_epochs)
        rc = vit_fail(VIT_EINVAL, "%s: the run has already done %llu epochs, so a stop after "
                      "epoch %d is already reached; nothing to train (stop at a later epoch, "
                      "or not at all)", o->resume, t->st.epoch, o->stop_after_epochs);
    char moved[4300] = "";
    if (rc == VIT_OK && rank == 0 && o->overwrite && vit_run_dir_taken(o->out_dir, o->resume)
        && (rc = vit_run_dir_set_aside(o->out_dir, moved, sizeof moved)) == VIT_OK) {
        vit_train_event ev = {.kind = VIT_TRAIN_SET_ASIDE, .path = moved};
        vit_train_emit(t, &ev);
    }
    if (rc == VIT_OK && rank == 0)
        rc = vit_metrics_open(o->out_dir, o->resume, t->st.epoch, t->val.count > 0, &t->metrics,
                              &t->prior_seconds);
    /* The clock beside the checkpoint also counts the time since its last
     * epoch's row (a stop inside an epoch). */
    if (rc == VIT_OK && rank == 0 && o->resume)
        vit_run_clock_read(o->resume, t->st.step, &t->prior_seconds);
    /* A resume of a finished run trains nothing: its final.csv stays. */
    t->complete_at_start = o->resume && t->st.epoch >= (unsigned long long)t->tc.epochs;
    if (rc == VIT_OK && rank == 0 && !t->complete_at_start)
        vit_metrics_drop_final(o->out_dir);
    rc = vit_dist_agree(rc);
    if (rc == VIT_OK && t->tc.batch < vit_dist_size())
        rc = vit_fail(VIT_EINVAL, "batch %d is smaller than the %d ranks", t->tc.batch,
                      vit_dist_size());
    return rc;
}

void vit_train_layout(vit_trainer *t)
{
    const vit_train_config *tc = &t->tc;
    long spe = t->at.steps_per_epoch;
    long total = (long)t->st.step + (tc->epochs - (long)t->st.epoch) * spe - (long)t->st.epoch_step;
    if (t->o.warmup_fraction > 0) /* the run's planned length, as it stands */
        t->tc.warmup = t->o.warmup_fraction * tc->epochs;
    long warm = (long)(tc->warmup * (double)spe);
    t->at.total_steps = total;
    t->at.warmup_steps = warm < total / 10 ? warm : total / 10;
    t->at.epochs = tc->epochs;
    t->at.finished = t->st.epoch >= (unsigned long long)tc->epochs
                     || (t->o.stop_after_epochs > 0
                         && t->st.epoch >= (unsigned long long)t->o.stop_after_epochs);
}

int vit_trainer_new(vit_trainer **out, const vit_config *cfg, const vit_train_config *tc,
                    const vit_dataset *train, const vit_dataset *test, const vit_train_opts *o)
{
    if (out)
        *out = NULL;
    if (!out || !cfg || !tc || !train || !test || !o || !o->out_dir)
        return vit_fail(VIT_EINVAL, "vit_train_run: NULL argument");
    if (!(o->budget_seconds >= 0 && o->budget_seconds < 1e9))
        return vit_fail(VIT_EINVAL, "vit_train_run: budget_seconds %g is not in 0 .. 1e9",
                        o->budget_seconds);
    if (train->count <= o->val_count || o->val_count < 0)
        return vit_fail(VIT_EINVAL, "vit_train_run: val_count %d leaves no training images (of %d)",
                        o->val_count, train->count);
    if (o->save_best < VIT_BEST_NONE || o->save_best > VIT_BEST_LOSS)
        return vit_fail(VIT_EINVAL, "vit_train_run: save_best %d is not VIT_BEST_NONE, "
                        "VIT_BEST_ACCURACY or VIT_BEST_LOSS", o->save_best);
    if (o->early_stop < 0)
        return vit_fail(VIT_EINVAL, "vit_train_run: early_stop %d is negative", o->early_stop);
    if ((o->save_best != VIT_BEST_NONE || o->early_stop > 0) && o->val_count <= 0)
        return vit_fail(VIT_EINVAL, "vit_train_run: %s chooses by the validation score, and "
                        "val_count is 0 (hold out a validation set)",
                        o->save_best != VIT_BEST_NONE ? "save_best" : "early_stop");
    if (!(o->warmup_fraction >= 0 && o->warmup_fraction < 1))
        return vit_fail(VIT_EINVAL, "vit_train_run: warmup_fraction %g is not in [0, 1)",
                        o->warmup_fraction);
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
    t->tc = *tc;
    t->cfg.image_height = train->height;
    t->cfg.image_width = train->width;
    t->cfg.channels = train->channels;
    t->cfg.classes = train->classes > test->classes ? train->classes : test->classes;
    int rc = setup(t);
    if (rc) {
        vit_trainer_free(t);
        return rc;
    }
    long spe = (t->train.count + t->tc.batch - 1) / t->tc.batch;
    t->at = (vit_train_progress){
        .step = t->st.step, .epoch = t->st.epoch, .epoch_step = t->st.epoch_step,
        .start_step = t->st.step, .start_epoch = t->st.epoch, .steps_per_epoch = spe,
        .batch = t->tc.batch, .train_count = t->train.count, .budget_seconds = o->budget_seconds};
    t->start_epoch_step = t->st.epoch_step;
    vit_train_layout(t);
    if (o->budget_seconds > 0 && !t->complete_at_start && (rc = vit_train_plan_budget(t))) {
        vit_trainer_free(t);
        return rc;
    }
    if (o->init_from) {
        vit_train_event in = {.kind = VIT_TRAIN_INIT, .path = o->init_from,
                              .new_value = t->init_note};
        vit_train_emit(t, &in);
    }
    vit_train_event ev = {.kind = VIT_TRAIN_BEGIN};
    vit_train_emit(t, &ev);
    *out = t;
    return VIT_OK;
}
