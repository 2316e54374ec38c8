/*
 * Training and evaluation: minibatches, augmentation, AdamW with warm-up and
 * cosine decay, per-epoch scoring, metrics, checkpoints and resume.
 */
#include "vit/train.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "argmax.h"
#include "error.h"
#include "run_internal.h"
#include "vit/augment.h"
#include "vit/checkpoint.h"
#include "vit/dist.h"
#include "vit/loss.h"

static double now_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int check_data_shape(const vit_config *c, const vit_dataset *ds, const char *what)
{
    if (!ds || !ds->images || !ds->labels || ds->count <= 0)
        return vit_fail(VIT_EINVAL, "%s set is empty", what);
    if (ds->height != c->image_height || ds->width != c->image_width || ds->channels != c->channels)
        return vit_fail(VIT_EINVAL, "%s images are %dx%dx%d but the model expects %dx%dx%d", what,
                        ds->height, ds->width, ds->channels, c->image_height, c->image_width,
                        c->channels);
    if (ds->classes > c->classes)
        return vit_fail(VIT_EINVAL, "%s set has %d classes but the model has %d", what, ds->classes,
                        c->classes);
    return VIT_OK;
}

/* ---- evaluation ------------------------------------------------------- */

/* probs[b, K] (overwritten) = the row-wise softmax of logits z[b, K]. */
static void softmax_rows(const vit_real *z, int b, int K, vit_real *probs)
{
    for (int r = 0; r < b; r++) {
        const vit_real *zr = z + (size_t)r * K;
        vit_real *pr = probs + (size_t)r * K;
        vit_real mx = zr[vit_argmax(zr, K)];
        double sum = 0;
        for (int k = 0; k < K; k++)
            sum += (double)(pr[k] = (vit_real)exp((double)(zr[k] - mx)));
        for (int k = 0; k < K; k++)
            pr[k] = (vit_real)(pr[k] / sum);
    }
}

/* One forward of b images on tape, its softmax into probs[b, K]. */
static int predict_pass(vit_model *m, vit_tape *tape, const vit_real *images, int b, vit_real *probs)
{
    vit_tape_reset(tape);
    vit_tensor *z = vit_model_forward(m, tape, images, b, 0);
    if (!z)
        return vit_tape_status(tape) ? vit_tape_status(tape) : VIT_EINVAL;
    softmax_rows(z->data, b, vit_model_config(m)->classes, probs);
    return VIT_OK;
}

/* The nine shifts of VIT_TTA_SHIFT9, the identity first. */
static const int tta_shifts[9][2] = {{0, 0},  {-1, -1}, {-1, 0}, {-1, 1}, {0, -1},
                                     {0, 1},  {1, -1},  {1, 0},  {1, 1}};

int vit_predict_tta(vit_model *m, vit_tape *tape, const vit_real *images, int count, int tta,
                    vit_real *probs)
{
    if (!m || !tape || !images || !probs || count <= 0)
        return vit_fail(VIT_EINVAL, "vit_predict: bad argument");
    if (tta != VIT_TTA_NONE && tta != VIT_TTA_SHIFT9)
        return vit_fail(VIT_EINVAL, "vit_predict: unknown test-time augmentation %d", tta);
    const vit_config *c = vit_model_config(m);
    int H = c->image_height, W = c->image_width, C = c->channels, K = c->classes;
    size_t img = (size_t)H * W * C;
    const int chunk = 256;
    int rc = VIT_OK;
    if (tta == VIT_TTA_NONE) {
        for (int i = 0; i < count && rc == VIT_OK; i += chunk) {
            int b = count - i < chunk ? count - i : chunk;
            rc = predict_pass(m, tape, images + (size_t)i * img, b, probs + (size_t)i * K);
        }
        return rc;
    }
    /* Shifted copies of a chunk, one pass's probabilities, their sum. */
    int most = count < chunk ? count : chunk;
    vit_real *moved = malloc((size_t)most * img * sizeof *moved);
    vit_real *pass = malloc((size_t)most * K * sizeof *pass);
    double *sum = malloc((size_t)most * K * sizeof *sum);
    if (!moved || !pass || !sum)
        rc = vit_fail(VIT_ENOMEM, "vit_predict: out of memory for test-time augmentation");
    for (int i = 0; i < count && rc == VIT_OK; i += chunk) {
        int b = count - i < chunk ? count - i : chunk;
        memset(sum, 0, (size_t)b * K * sizeof *sum);
        for (int s = 0; s < 9 && rc == VIT_OK; s++) {
            for (int k = 0; k < b; k++)
                vit_translate(moved + (size_t)k * img, images + (size_t)(i + k) * img, H, W, C,
                              tta_shifts[s][0], tta_shifts[s][1]);
            rc = predict_pass(m, tape, moved, b, pass);
            for (size_t j = 0; rc == VIT_OK && j < (size_t)b * K; j++)
                sum[j] += (double)pass[j];
        }
        for (size_t j = 0; rc == VIT_OK && j < (size_t)b * K; j++)
            probs[(size_t)i * K + j] = (vit_real)(sum[j] / 9);
    }
    free(moved);
    free(pass);
    free(sum);
    return rc;
}

int vit_predict(vit_model *m, vit_tape *tape, const vit_real *images, int count, vit_real *probs)
{
    if (!m)
        return vit_fail(VIT_EINVAL, "vit_predict: bad argument");
    return vit_predict_tta(m, tape, images, count, vit_model_config(m)->tta, probs);
}

void vit_eval_result_free(vit_eval_result *r)
{
    if (!r)
        return;
    free(r->confusion);
    memset(r, 0, sizeof *r);
}

int vit_evaluate_tta(vit_model *m, vit_tape *tape, const vit_dataset *ds, int batch, int tta,
                     vit_eval_result *r)
{
    if (!m || !tape || !r || batch <= 0)
        return vit_fail(VIT_EINVAL, "vit_evaluate: bad argument");
    memset(r, 0, sizeof *r);
    if (tta != VIT_TTA_NONE && tta != VIT_TTA_SHIFT9)
        return vit_fail(VIT_EINVAL, "vit_evaluate: unknown test-time augmentation %d", tta);
    const vit_config *c = vit_model_config(m);
    int rc = check_data_shape(c, ds, "evaluation");
    if (rc)
        return rc;
    int K = c->classes;
    r->confusion = calloc((size_t)K * K, sizeof *r->confusion);
    vit_real *probs = malloc((size_t)batch * K * sizeof *probs);
    if (!r->confusion || !probs) {
        free(probs);
        vit_eval_result_free(r);
        return vit_fail(VIT_ENOMEM, "vit_evaluate: out of memory");
    }
    r->classes = K;
    size_t img = (size_t)c->image_height * c->image_width * c->channels;
    double loss_sum = 0;
    int correct = 0;
    for (int i = 0; i < ds->count && rc == VIT_OK; i += batch) {
        int b = ds->count - i < batch ? ds->count - i : batch;
        rc = vit_predict_tta(m, tape, ds->images + (size_t)i * img, b, tta, probs);
        for (int k = 0; rc == VIT_OK && k < b; k++) {
            int y = ds->labels[i + k], p = vit_argmax(probs + (size_t)k * K, K);
            double py = probs[(size_t)k * K + y];
            loss_sum += -log(py > 1e-300 ? py : 1e-300);
            correct += p == y;
            r->confusion[y * K + p]++;
        }
    }
    free(probs);
    if (rc) {
        vit_eval_result_free(r);
        return rc;
    }
    r->count = ds->count;
    r->loss = loss_sum / ds->count;
    r->accuracy = (double)correct / ds->count;
    if (!isfinite(r->loss)) {
        vit_eval_result_free(r);
        return vit_fail(VIT_ENUM, "vit_evaluate: the loss is not finite");
    }
    return VIT_OK;
}

int vit_evaluate(vit_model *m, vit_tape *tape, const vit_dataset *ds, int batch, vit_eval_result *r)
{
    if (!m)
        return vit_fail(VIT_EINVAL, "vit_evaluate: bad argument");
    return vit_evaluate_tta(m, tape, ds, batch, vit_model_config(m)->tta, r);
}

/* ---- batches ---------------------------------------------------------- */

/* Fills images/labels with items [lo, hi) of the minibatch idx[0..b).  The
 * random augmentation is drawn for all b items whatever the slice, so every
 * rank of a data-parallel job advances its generator identically and they
 * all agree on the next permutation.  Whole-pixel shifts alone use an exact
 * copy; rotation or zoom switch to the bilinear affine warp (with a
 * continuous shift). */
static void gather_batch(const vit_dataset *ds, const int *idx, int b, int lo, int hi,
                         const vit_config *c, vit_rng *rng, vit_real *images, int *labels)
{
    int H = ds->height, W = ds->width, C = ds->channels, shift = c->shift;
    int affine = c->rotate > 0 || c->scale > 0;
    size_t img = (size_t)H * W * C;
    for (int k = 0; k < b; k++) {
        int dy = 0, dx = 0;
        vit_affine a = {0, 1, 0, 0};
        if (affine)
            vit_affine_draw(&a, rng, c->rotate, c->scale, shift);
        else if (shift > 0) {
            dy = (int)vit_rng_below(rng, (uint32_t)(2 * shift + 1)) - shift;
            dx = (int)vit_rng_below(rng, (uint32_t)(2 * shift + 1)) - shift;
        }
        if (k < lo || k >= hi)
            continue;
        const vit_real *src = ds->images + (size_t)idx[k] * img;
        vit_real *dst = images + (size_t)(k - lo) * img;
        labels[k - lo] = ds->labels[idx[k]];
        if (affine)
            vit_affine_apply(dst, src, H, W, C, &a);
        else if (shift > 0)
            vit_translate(dst, src, H, W, C, dy, dx);
        else
            memcpy(dst, src, img * sizeof *images);
    }
}

/* This rank's share [lo, hi) of n items: contiguous, sizes differing by at
 * most one. */
static void share(int n, int *lo, int *hi)
{
    int r = vit_dist_rank(), size = vit_dist_size();
    *lo = (int)((long long)n * r / size);
    *hi = (int)((long long)n * (r + 1) / size);
}

/* ---- output folder, metrics ------------------------------------------ */

/* Creates the output folder dir (mkdir -p), proves it writable, and checks
 * that ckpt, the checkpoint path inside it, is free or a file. */
static int make_out_dir(const char *dir, const char *ckpt)
{
    char path[4096];
    if (snprintf(path, sizeof path, "%s", dir) >= (int)sizeof path)
        return vit_fail(VIT_EINVAL, "vit_train_run: out_dir is longer than %d bytes",
                        (int)sizeof path - 1);
    /* mkdir -p */
    for (char *p = path + 1; *p; p++) {
        if (*p != '/')
            continue;
        *p = 0;
        if (mkdir(path, 0755) && errno != EEXIST)
            return vit_fail(VIT_EIO, "%s: cannot create folder: %s", path, strerror(errno));
        *p = '/';
    }
    if (mkdir(path, 0755) && errno != EEXIST)
        return vit_fail(VIT_EIO, "%s: cannot create folder: %s", path, strerror(errno));
    /* Prove we can write there before any training time is spent. */
    char probe[4200];
    snprintf(probe, sizeof probe, "%s/.write-test-XXXXXX", dir);
    int fd = mkstemp(probe);
    if (fd < 0)
        return vit_fail(VIT_EIO, "%s: output folder is not writable: %s", dir, strerror(errno));
    close(fd);
    unlink(probe);
    /* A checkpoint path that is a folder (or anything but a file) would fail
     * only at the end of the first epoch: say so now. */
    struct stat st;
    if (lstat(ckpt, &st) == 0 && !S_ISREG(st.st_mode))
        return vit_fail(VIT_EIO, "%s: exists and is not a regular file", ckpt);
    /* Only this run writes here, so temporaries of an interrupted write are
     * litter. */
    vit_ckpt_remove_temporaries(ckpt);
    return VIT_OK;
}

int vit_run_dir_taken(const char *out_dir, const char *resume)
{
    char ckpt[4200];
    struct stat have, mine;
    if (!out_dir || snprintf(ckpt, sizeof ckpt, "%s/last.ckpt", out_dir) >= (int)sizeof ckpt)
        return 0;
    if (stat(ckpt, &have) != 0 || !S_ISREG(have.st_mode))
        return 0;
    return !resume || stat(resume, &mine) != 0 || mine.st_dev != have.st_dev
           || mine.st_ino != have.st_ino;
}

/* --force (overwrite) into a folder holding another run: its checkpoint and
 * metrics move to the first free OUT/replaced-N (mkdir reserves the name,
 * so nothing is clobbered) before this run writes anything, so a kill at
 * any moment leaves the old run whole in one place.  Both files are
 * hard-linked there first and only then is OUT/last.ckpt unlinked (the old
 * metrics.csv is replaced by the new run's own); where hard links are not
 * supported they are renamed, the checkpoint first.  moved gets the folder
 * (empty on failure). */
static int set_aside(const char *dir, char *moved, size_t cap)
{
    char ckpt[4200], csv[4200], to_ckpt[4400], to_csv[4400];
    snprintf(ckpt, sizeof ckpt, "%s/last.ckpt", dir);
    snprintf(csv, sizeof csv, "%s/metrics.csv", dir);
    int made = 0;
    for (int n = 1; n < 100000 && !made; n++) {
        snprintf(moved, cap, "%s/replaced-%d", dir, n);
        made = mkdir(moved, 0755) == 0;
        if (!made && errno != EEXIST) {
            int rc = vit_fail(VIT_EIO, "%s: cannot create folder: %s", moved, strerror(errno));
            moved[0] = 0;
            return rc;
        }
    }
    if (!made) { /* every name taken: never move into a folder that holds a run */
        moved[0] = 0;
        return vit_fail(VIT_EIO, "%s: replaced-1 .. replaced-99999 all exist; remove some", dir);
    }
    snprintf(to_ckpt, sizeof to_ckpt, "%s/last.ckpt", moved);
    snprintf(to_csv, sizeof to_csv, "%s/metrics.csv", moved);
    int have_csv = access(csv, F_OK) == 0;
    int linked = link(ckpt, to_ckpt) == 0 && (!have_csv || link(csv, to_csv) == 0);
    if (linked) {
        if (unlink(ckpt))
            return vit_fail(VIT_EIO, "%s: cannot remove: %s", ckpt, strerror(errno));
        return VIT_OK;
    }
    unlink(to_ckpt); /* a link that was made, if the second one failed */
    if (rename(ckpt, to_ckpt) || (have_csv && rename(csv, to_csv)))
        return vit_fail(VIT_EIO, "%s: cannot move the run there aside to %s: %s", dir, moved,
                        strerror(errno));
    return VIT_OK;
}

/* The columns of metrics.csv; val_acc, last, only in a run with a
 * validation set (so the columns before it never move). */
static const char metrics_header[] = "epoch,train_loss,train_acc,test_loss,test_acc,lr,seconds";

/* Opens OUT/metrics.csv for appending.  On resume, keeps only the rows of
 * epochs the checkpoint covers (a killed run may have logged more), taken
 * from the metrics.csv next to the checkpoint `from` (so rows of another
 * run are never mixed in), by rewriting through a temporary file, into
 * *metrics; *seconds: the seconds already spent.  with_val: the rows end
 * with val_acc; a resumed run whose rows differ in that is refused (its
 * validation set would change what it trains on). */
static int open_metrics(const char *dir, const char *from, unsigned long long keep_epochs,
                        int with_val, FILE **metrics, double *seconds)
{
    char path[4200], tmp[4300], src[4200];
    snprintf(path, sizeof path, "%s/metrics.csv", dir);
    const char *slash = from ? strrchr(from, '/') : NULL;
    if (slash)
        snprintf(src, sizeof src, "%.*s/metrics.csv", (int)(slash - from), from);
    else
        snprintf(src, sizeof src, "metrics.csv");
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    *seconds = 0;
    FILE *out = fopen(tmp, "w");
    if (!out)
        return vit_fail(VIT_EIO, "%s: cannot write: %s", tmp, strerror(errno));
    fprintf(out, "%s%s\n", metrics_header, with_val ? ",val_acc" : "");
    int mixed = 0;
    FILE *in = keep_epochs ? fopen(src, "r") : NULL;
    if (in) {
        char line[512];
        while (fgets(line, sizeof line, in)) {
            unsigned long long ep;
            double f[6];
            if (sscanf(line, "%llu,%lf,%lf,%lf,%lf,%lf,%lf", &ep, &f[0], &f[1], &f[2], &f[3], &f[4],
                       &f[5]) == 7 && ep <= keep_epochs) {
                int commas = 0;
                for (const char *q = line; *q; q++)
                    commas += *q == ',';
                mixed |= commas != 6 + with_val;
                fputs(line, out);
                *seconds = f[5];
            }
        }
        fclose(in);
    }
    if (mixed) {
        int rc = vit_fail(VIT_EINVAL, "%s: the run was logged %s a validation set and this run "
                          "has %s; a resumed run keeps its val_count", src,
                          with_val ? "without" : "with", with_val ? "one" : "none");
        fclose(out);
        unlink(tmp);
        return rc;
    }
    if (fflush(out) || rename(tmp, path)) {
        int rc = vit_fail(VIT_EIO, "%s: cannot write: %s", path, strerror(errno));
        fclose(out);
        unlink(tmp);
        return rc;
    }
    *metrics = out;
    return VIT_OK;
}

/* ---- training --------------------------------------------------------- */

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
 * key is covered).  epochs may grow and ckpt_minutes may change: those are
 * taken into *ck and reported on log (when log is not NULL); any other
 * difference is refused, naming the key and both values. */
static int resume_changes(vit_config *ck, const vit_config *want, unsigned long long done,
                          unsigned long long epoch_step, const char *path, FILE *log)
{
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
            if (strncmp(la, "epochs", klen) == 0 && klen == 6) {
                if ((unsigned long long)want->epochs < done + (epoch_step > 0))
                    return vit_fail(VIT_EINVAL, "%s: epochs = %d is fewer than the %llu epochs the "
                                    "checkpoint has %s", path, want->epochs,
                                    done + (epoch_step > 0), epoch_step ? "begun" : "done");
                if (log)
                    fprintf(log, "epochs: %s -> %s: the run is %s; the cosine schedule is "
                            "recomputed for %s epochs\n", va, vb,
                            want->epochs > ck->epochs ? "extended" : "shortened", vb);
                ck->epochs = want->epochs;
            } else if (strncmp(la, "ckpt_minutes", klen) == 0 && klen == 12) {
                if (log)
                    fprintf(log, "ckpt_minutes: %s -> %s\n", va, vb);
                ck->ckpt_minutes = want->ckpt_minutes;
            } else {
                return vit_fail(VIT_EINVAL, "%s: the checkpoint's run has %.*s = %s, this run asks "
                                "for %s; a resumed run keeps its recipe (only epochs and "
                                "ckpt_minutes may change)", path, (int)klen, la, va, vb);
            }
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

typedef struct run {
    vit_config cfg;
    vit_model *m;             /* the weights the optimizer trains */
    vit_model *avg;           /* with ema > 0: their running average, the
                                 classifier evaluated, saved and exported */
    vit_adamw opt;
    vit_run_state st;
    vit_tape *eval_tape;      /* training steps run on the model's own tapes */
    vit_real *images;
    int *labels, *perm;
    FILE *metrics;
    char ckpt[4200];
    unsigned long long start_step; /* step at which this invocation began */
    double last_save;              /* now_seconds() of the last checkpoint */
    int bar_len;                   /* characters of the progress bar on screen */
    double last_print;             /* now_seconds() of the last line printed */
    int epoch_w, cols;             /* the epoch table's first column; its columns (bits) */
    char **class_names;            /* the training data's, for the checkpoint (not owned) */
    double t_first;                /* now_seconds() after this invocation's first step */
    int summary_done;              /* the model summary line is out */
    int header_max, header_val;    /* the epoch table's header, printed after the summary */
    int header_due;
} run;

/* The model evaluation scores: the average when the run averages. */
static vit_model *scored(run *r) { return r->avg ? r->avg : r->m; }

static void run_free(run *r)
{
    vit_model_free(r->m);
    vit_model_free(r->avg);
    vit_adamw_free(&r->opt);
    vit_tape_free(r->eval_tape);
    free(r->images);
    free(r->labels);
    free(r->perm);
    vit_run_state_free(&r->st);
    if (r->metrics)
        fclose(r->metrics);
}

static int run_setup(run *r, const vit_config *cfg, const vit_dataset *train, const vit_dataset *test,
                     const vit_train_opts *o)
{
    r->cfg = *cfg;
    r->cfg.image_height = train->height;
    r->cfg.image_width = train->width;
    r->cfg.channels = train->channels;
    r->cfg.classes = train->classes > test->classes ? train->classes : test->classes;
    int rc = vit_config_check(&r->cfg);
    if (rc)
        return rc;
    /* Rank 0 alone writes; the others learn of its failure from the agree. */
    snprintf(r->ckpt, sizeof r->ckpt, "%s/last.ckpt", o->out_dir);
    if (!o->overwrite && vit_run_dir_taken(o->out_dir, o->resume))
        return vit_fail(VIT_EINVAL, "%s already holds a run (last.ckpt); resume it, or overwrite it "
                        "to start over", o->out_dir);
    rc = vit_dist_rank() == 0 ? make_out_dir(o->out_dir, r->ckpt) : VIT_OK;
    int all = vit_dist_agree(rc);
    if (all)
        return rc ? rc : vit_fail(all, "%s: rank 0 cannot use the output folder", o->out_dir);
    if (o->resume) {
        if ((rc = vit_run_load(o->resume, &r->m, &r->opt, &r->st)))
            return rc;
        vit_config ck = *vit_model_config(r->m);
        FILE *log = vit_dist_rank() == 0 ? (o->log ? o->log : stdout) : NULL;
        if ((rc = resume_changes(&ck, &r->cfg, r->st.epoch, r->st.epoch_step, o->resume, log)))
            return rc;
        r->cfg = ck;
        if (ck.ema > 0) { /* the file's named tensors are the average */
            r->avg = r->m;
            if (!(r->m = vit_model_new(vit_model_config(r->avg))))
                return VIT_ENOMEM;
            /* An imported model has no training weights: they start from
             * its weights, and the average goes on from there. */
            const vit_real *from = r->st.train_params ? r->st.train_params : vit_model_params(r->avg);
            memcpy(vit_model_params(r->m), from, vit_model_param_count(r->m) * sizeof(vit_real));
        }
        free(r->st.train_params);
        r->st.train_params = NULL;
    } else {
        if (!(r->m = vit_model_new(&r->cfg)))
            return VIT_EINVAL;
        vit_rng_seed(&r->st.rng, r->cfg.seed);
        vit_model_init(r->m, &r->st.rng);
        rc = vit_adamw_init(&r->opt, vit_model_param_count(r->m), r->cfg.beta1, r->cfg.beta2,
                            r->cfg.eps, r->cfg.weight_decay);
        if (rc)
            return rc;
        if (r->cfg.ema > 0) { /* step 1 overwrites it; until then the init */
            if (!(r->avg = vit_model_new(&r->cfg)))
                return VIT_ENOMEM;
            memcpy(vit_model_params(r->avg), vit_model_params(r->m),
                   vit_model_param_count(r->m) * sizeof(vit_real));
        }
    }
    if ((rc = check_data_shape(&r->cfg, train, "training")) || (rc = check_data_shape(&r->cfg, test, "test")))
        return rc;
    r->class_names = train->classes == r->cfg.classes ? train->class_names : NULL;
    size_t img = (size_t)r->cfg.image_height * r->cfg.image_width * r->cfg.channels;
    r->eval_tape = vit_tape_new();
    r->images = malloc((size_t)r->cfg.batch * img * sizeof *r->images);
    r->labels = malloc((size_t)r->cfg.batch * sizeof *r->labels);
    r->perm = malloc((size_t)train->count * sizeof *r->perm);
    if (!r->eval_tape || !r->images || !r->labels || !r->perm)
        return vit_fail(VIT_ENOMEM, "vit_train_run: out of memory");
    long spe = (train->count + r->cfg.batch - 1) / r->cfg.batch;
    if ((rc = check_position(&r->st, train->count, spe, o->resume, r->perm)))
        return rc;
    if (r->st.epoch_step > 0)
        memcpy(r->perm, r->st.order, (size_t)train->count * sizeof *r->perm);
    return VIT_OK;
}

/* ---- what the run prints ----------------------------------------------- */

/* Columns of the terminal behind log: its window size, else $COLUMNS, else
 * 80. */
static int term_columns(FILE *log)
{
    struct winsize ws;
    if (ioctl(fileno(log), TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0)
        return ws.ws_col;
    const char *e = getenv("COLUMNS");
    char *end;
    long n = e ? strtol(e, &end, 10) : 0;
    return n > 0 && n < 100000 && *end == 0 ? (int)n : 80;
}

/* Seconds as h:mm:ss (0:02:05, 1:03:07). */
static const char *hms(double s, char *buf, size_t cap)
{
    long t = s > 0 && s < 3.6e9 ? (long)(s + 0.5) : 0;
    snprintf(buf, cap, "%ld:%02ld:%02ld", t / 3600, t / 60 % 60, t % 60);
    return buf;
}

/* The progress line of step `step` of spe into out, at most max characters
 * long (max < cap): "epoch 3/20 [####......] step 45/90 loss 0.8123
 * 1830 img/s ETA 0:02:05", bar_width 0 without the bar.  Too long for max,
 * the bar shrinks to 5 cells, then goes, then the speed, the step counts
 * and the loss go in that order; what is left is cut at max. */
static int progress_text(char *out, size_t cap, int max, const run *r, long step, long spe,
                         double loss, double ips, double eta, int bar_width)
{
    char t[32], bar[64] = "", steps[64], lossv[32], speed[32];
    snprintf(steps, sizeof steps, " step %ld/%ld", step, spe);
    snprintf(lossv, sizeof lossv, " loss %.4f", loss);
    snprintf(speed, sizeof speed, " %.0f img/s", ips);
    hms(eta, t, sizeof t);
    int n = 0, dropped = 0;
    for (;;) {
        if (bar_width > 0) {
            int fill = (int)(bar_width * step / spe);
            bar[0] = ' ';
            bar[1] = '[';
            for (int i = 0; i < bar_width; i++)
                bar[2 + i] = i < fill ? '#' : '.';
            bar[2 + bar_width] = ']';
            bar[3 + bar_width] = 0;
        } else {
            bar[0] = 0;
        }
        n = snprintf(out, cap, "epoch %llu/%d%s%s%s%s ETA %s", r->st.epoch + 1, r->cfg.epochs, bar,
                     dropped < 2 ? steps : "", dropped < 3 ? lossv : "", dropped < 1 ? speed : "",
                     t);
        if (n <= max)
            return n;
        if (bar_width > 5)
            bar_width = n - max < bar_width - 5 ? bar_width - (n - max) : 5;
        else if (bar_width > 0)
            bar_width = 0;
        else if (dropped < 3)
            dropped++;
        else
            break;
    }
    out[max] = 0;
    return max;
}

/* The bar on a terminal: the line redrawn in place (\r), never wider than
 * the terminal's width - 1 so that it cannot wrap; spaces cover what is
 * left of a longer line before it. */
static void progress_bar(FILE *log, run *r, long step, long spe, double loss, double ips,
                         double eta)
{
    int cols = term_columns(log);
    char line[512];
    int max = cols - 1 < (int)sizeof line - 1 ? cols - 1 : (int)sizeof line - 1;
    if (max < 1)
        max = 1;
    int n = progress_text(line, sizeof line, max, r, step, spe, loss, ips, eta, 20);
    int pad = r->bar_len > n && r->bar_len <= max ? r->bar_len - n : 0;
    fprintf(log, "\r%s%*s", line, pad, "");
    r->bar_len = n + pad;
    fflush(log);
}

/* Wipes the bar off its line, so that the next line starts clean. */
static void progress_clear(FILE *log, run *r)
{
    if (r->bar_len > 0)
        fprintf(log, "\r%*s\r", r->bar_len, "");
    r->bar_len = 0;
}

/* The epochs as a table: a header once, then a row per epoch, in at most
 * max columns (100 for a file, the width - 1 on a terminal):
 *
 *   epoch  train loss     acc  test loss     acc  val acc     time        lr   img/s
 *     3/20     0.8123  0.7412     0.6543  0.8056   0.7990  0:00:12  1.95e-03    1830
 *
 * val acc only with a validation set.  Too wide for max, columns give way
 * in this order: img/s, lr, time, train acc, test loss, train loss (the
 * test acc is then headed "test acc"); epoch, test acc and val acc stay. */
enum { COL_TRAIN_LOSS, COL_TRAIN_ACC, COL_TEST_LOSS, COL_TEST_ACC, COL_VAL, COL_TIME, COL_LR,
       COL_IPS, NCOLS };

static const struct {
    const char *head;
    int width, gives_way; /* 1 gives way first; 0 never */
} epoch_cols[NCOLS] = {
    {"train loss", 10, 6}, {"acc", 6, 4}, {"test loss", 9, 5}, {"acc", 6, 0},
    {"val acc", 7, 0},     {"time", 7, 3}, {"lr", 8, 2},       {"img/s", 6, 1},
};

/* Column c's width in the table r->cols describes (test acc widens to
 * "test acc" once test loss is gone). */
static int col_width(const run *r, int c)
{
    return c == COL_TEST_ACC && !(r->cols & 1 << COL_TEST_LOSS) ? 8 : epoch_cols[c].width;
}

static void epoch_header(FILE *log, run *r, int with_val, int max)
{
    int digits = snprintf(NULL, 0, "%d", r->cfg.epochs);
    r->epoch_w = 2 * digits + 1 > 5 ? 2 * digits + 1 : 5;
    r->cols = (1 << NCOLS) - 1;
    if (!with_val)
        r->cols &= ~(1 << COL_VAL);
    for (int next = 1;; next++) {
        int n = r->epoch_w, drop = -1;
        for (int c = 0; c < NCOLS; c++) {
            if (r->cols & 1 << c)
                n += 2 + col_width(r, c);
            if (epoch_cols[c].gives_way == next)
                drop = c;
        }
        if (n <= max || drop < 0)
            break;
        r->cols &= ~(1 << drop);
    }
    char head[256];
    int n = snprintf(head, sizeof head, "%*s", r->epoch_w, "epoch");
    for (int c = 0; c < NCOLS; c++)
        if (r->cols & 1 << c)
            n += snprintf(head + n, sizeof head - (size_t)n, "  %*s", col_width(r, c),
                          c == COL_TEST_ACC && col_width(r, c) == 8 ? "test acc"
                                                                    : epoch_cols[c].head);
    fprintf(log, "%s\n", head);
    fflush(log);
}

static void epoch_line(FILE *log, const run *r, double tl, double ta, const vit_eval_result *ev,
                       double val_acc, double secs, double lr, double ips)
{
    char ep[48], t[32], cell[NCOLS][32];
    snprintf(ep, sizeof ep, "%llu/%d", r->st.epoch, r->cfg.epochs);
    snprintf(cell[COL_TRAIN_LOSS], sizeof cell[0], "%.4f", tl);
    snprintf(cell[COL_TRAIN_ACC], sizeof cell[0], "%.4f", ta);
    snprintf(cell[COL_TEST_LOSS], sizeof cell[0], "%.4f", ev->loss);
    snprintf(cell[COL_TEST_ACC], sizeof cell[0], "%.4f", ev->accuracy);
    snprintf(cell[COL_VAL], sizeof cell[0], "%.4f", val_acc);
    snprintf(cell[COL_TIME], sizeof cell[0], "%s", hms(secs, t, sizeof t));
    snprintf(cell[COL_LR], sizeof cell[0], "%.2e", lr);
    snprintf(cell[COL_IPS], sizeof cell[0], "%.0f", ips);
    fprintf(log, "%*s", r->epoch_w, ep);
    for (int c = 0; c < NCOLS; c++)
        if (r->cols & 1 << c)
            fprintf(log, "  %*s", col_width(r, c), cell[c]);
    fputc('\n', log);
    fflush(log);
}

/* The header, if due: after the model summary, before the first row. */
static void epoch_header_due(FILE *log, run *r)
{
    if (r->header_due)
        epoch_header(log, r, r->header_val, r->header_max);
    r->header_due = 0;
}

/* Parameters as 950, 81.2k or 1.35M. */
static const char *count_text(size_t n, char *buf, size_t cap)
{
    if (n < 10000)
        snprintf(buf, cap, "%zu", n);
    else if (n < 1000000)
        snprintf(buf, cap, "%.1fk", (double)n / 1e3);
    else
        snprintf(buf, cap, "%.2fM", (double)n / 1e6);
    return buf;
}

/* Once per invocation, after its first steps (at least 10 of them and a
 * second past the first, or the epoch's end; none when the first epoch's
 * row came first, as with one step an epoch): "model: 81.2k parameters,
 * 50 tokens (7x7 patches of 4), 1830 img/s, ETA 0:02:05".  The speed is
 * that of the steps after the first (which also pays for the first
 * allocations); the ETA is the remaining steps' at that speed.  Too long
 * for max, the patches go first, then words, then the speed; then it is
 * cut. */
static void model_summary(FILE *log, run *r, long s, long spe, long total_steps, int max)
{
    unsigned long long done = r->st.step - r->start_step;
    double t = now_seconds();
    if (done == 1)
        r->t_first = t;
    if (r->summary_done || !r->header_due) /* never inside the table */
        return;
    if (done < 2 || (s + 1 < spe && (done < 11 || t - r->t_first < 1.0)))
        return;
    r->summary_done = 1;
    const vit_config *c = &r->cfg;
    double per_step = (t - r->t_first) / (double)(done - 1);
    double ips = per_step > 0 ? c->batch / per_step : 0;
    char n[32], eta[32], grid[64], line[256];
    /* The grid the model tiles (overlapping patches give more tokens than
     * image / patch), with the stride and padding when they overlap. */
    vit_patch_shape ps = vit_config_patch_shape(c);
    int gh = 0, gw = 0;
    if (vit_patch_grid(&ps, &gh, &gw) != VIT_OK)
        gh = gw = 0; /* cannot happen: the model was built on this config */
    if ((c->patch_stride == 0 || c->patch_stride == c->patch) && c->patch_pad == 0)
        snprintf(grid, sizeof grid, " (%dx%d patches of %d)", gh, gw, c->patch);
    else
        snprintf(grid, sizeof grid, " (%dx%d patches of %d, stride %d, padding %d)", gh, gw,
                 c->patch, c->patch_stride ? c->patch_stride : c->patch, c->patch_pad);
    hms((double)(total_steps - (long)r->st.step) * per_step, eta, sizeof eta);
    count_text(vit_model_param_count(r->m), n, sizeof n);
    int len = snprintf(line, sizeof line, "model: %s parameters, %d tokens%s, %.0f img/s, ETA %s",
                       n, gh * gw + 1, grid, ips, eta);
    if (len > max)
        len = snprintf(line, sizeof line, "model: %s parameters, %d tokens, %.0f img/s, ETA %s", n,
                       gh * gw + 1, ips, eta);
    if (len > max)
        len = snprintf(line, sizeof line, "model: %s params, %d tokens, %.0f img/s, ETA %s", n,
                       gh * gw + 1, ips, eta);
    if (len > max)
        len = snprintf(line, sizeof line, "%s params, %d tokens, ETA %s", n, gh * gw + 1, eta);
    if (len > max)
        line[max > 0 ? max : 0] = 0;
    progress_clear(log, r);
    fprintf(log, "%s\n", line);
    epoch_header_due(log, r);
    fflush(log);
}

/* Forward and backward of this rank's bl images (already gathered):
 * leaves the gradient of their mean loss in the model's gradient buffer and
 * adds (loss * bl, correct) to red. */
static int local_step(run *r, int bl, double red[2])
{
    const vit_config *c = &r->cfg;
    if (bl == 0) {
        vit_model_zero_grads(r->m);
        return VIT_OK; /* a batch smaller than the job: this rank adds nothing */
    }
    double loss;
    int correct;
    int rc = vit_model_train_grads(r->m, r->images, r->labels, bl, (vit_real)c->smoothing, &loss,
                                   &correct);
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
static int reduce_grads(run *r, int bl, int b, double red[2])
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

/* Writes the checkpoint (rank 0; the others learn of a failure), with the
 * data order when taken inside an epoch (norder > 0). */
static int save(run *r, int norder)
{
    vit_run_state st = r->st;
    st.train_params = r->avg ? vit_model_params(r->m) : NULL;
    st.order = norder ? r->perm : NULL;
    st.norder = norder;
    if (r->class_names) { /* else those of the resumed checkpoint, if any */
        st.class_names = r->class_names;
        st.nclass_names = r->cfg.classes;
    }
    /* The run's config, not the model's copy: a resume may have extended
     * the run (epochs) or changed ckpt_minutes, and a later resume or
     * vit_run_config must see that. */
    int mine = vit_dist_rank() == 0 ? vit_run_internal_save(r->ckpt, scored(r), &r->cfg, &r->opt, &st)
                                    : VIT_OK;
    int rc = vit_dist_agree(mine);
    if (rc && mine == VIT_OK)
        vit_fail(rc, "rank 0 could not write %s", r->ckpt);
    if (rc == VIT_OK)
        r->last_save = now_seconds();
    return rc;
}

/* Between two steps: is a stop asked for (*stop), or a timed checkpoint
 * due?  Any rank's answer is every rank's, so all pause at the same step. */
static int pause_wanted(run *r, const vit_train_opts *o, int *stop, int *rc)
{
    int want[2] = {o->stop && *o->stop,
                   r->cfg.ckpt_minutes > 0 && now_seconds() - r->last_save >= 60 * r->cfg.ckpt_minutes};
    *rc = vit_dist_size() > 1 ? vit_dist_sum_int(want, 2) : VIT_OK;
    *stop = want[0] > 0;
    return *rc == VIT_OK && (want[0] > 0 || want[1] > 0);
}

/* One epoch of minibatch steps, from the position r->st holds (a checkpoint
 * taken inside the epoch continues it).  Returns VIT_OK or the error
 * (VIT_ENUM names the step whose loss was not finite); *stopped is set when
 * opts->stop ended it early, after a checkpoint of that step.  In a
 * data-parallel job every rank runs this with the same generator state;
 * each computes its share of every minibatch and all apply the same summed
 * gradient. */
static int train_epoch(run *r, const vit_dataset *train, const vit_train_opts *o, FILE *log,
                       double t0, long total_steps, double *loss_out, double *acc_out, double *lr_out,
                       int *stopped)
{
    const vit_config *c = &r->cfg;
    long spe = (train->count + c->batch - 1) / c->batch;
    long warm = (long)(c->warmup * (double)spe);
    int ngroups;
    const vit_param_group *groups = vit_model_groups(r->m, &ngroups);
    double loss_sum = 0, correct = 0, lr = 0, seen = 0;
    long s0 = (long)r->st.epoch_step;
    if (s0 == 0) {
        for (int i = 0; i < train->count; i++)
            r->perm[i] = i;
        vit_rng_shuffle(&r->st.rng, r->perm, train->count);
    } else { /* r->perm holds the checkpoint's order */
        loss_sum = r->st.epoch_sums[0];
        correct = r->st.epoch_sums[1];
        seen = r->st.epoch_sums[2];
    }
    *stopped = 0;
    for (long s = s0; s < spe; s++) {
        int start = (int)(s * c->batch);
        int b = train->count - start < c->batch ? train->count - start : c->batch;
        int lo, hi;
        share(b, &lo, &hi);
        gather_batch(train, r->perm + start, b, lo, hi, c, &r->st.rng, r->images, r->labels);
        double red[2] = {0, 0};
        int mine = local_step(r, hi - lo, red);
        int rc = vit_dist_agree(mine);
        if (rc != VIT_OK && mine == VIT_OK)
            return vit_fail(rc, "step %llu failed on another rank", r->st.step + 1);
        if (rc || (rc = reduce_grads(r, hi - lo, b, red)))
            return rc;
        double lv = red[0] / b;
        if (!isfinite(lv))
            return vit_fail(VIT_ENUM, "training diverged: loss is %g at step %llu (epoch %llu)", lv,
                            r->st.step + 1, r->st.epoch + 1);
        lr = vit_lr_at((long)r->st.step, total_steps, warm, c->lr, c->min_lr);
        rc = vit_adamw_step(&r->opt, vit_model_params(r->m), vit_model_grads(r->m), groups, ngroups, lr);
        if (rc == VIT_ENUM)
            return vit_fail(VIT_ENUM, "training diverged: %s at step %llu (epoch %llu)",
                            strstr(vit_last_error(), "too large") ? "overflowing gradient"
                                                                  : "non-finite gradient",
                            r->st.step + 1, r->st.epoch + 1);
        if (rc)
            return rc;
        r->st.step++;
        if (r->avg && (rc = vit_ema_update(vit_model_params(r->avg), vit_model_params(r->m),
                                           vit_model_param_count(r->m), c->ema, r->st.step)))
            return rc;
        loss_sum += red[0];
        correct += red[1];
        seen += b;
        r->st.epoch_step = (unsigned long long)s + 1;
        r->st.epoch_sums[0] = loss_sum;
        r->st.epoch_sums[1] = correct;
        r->st.epoch_sums[2] = seen;
        if (s + 1 < spe && pause_wanted(r, o, stopped, &rc)) {
            if ((rc = save(r, train->count)))
                return rc;
            if (*stopped)
                return VIT_OK;
        }
        if (rc)
            return rc;
        if (o->progress && vit_dist_rank() == 0)
            model_summary(log, r, s, spe, total_steps,
                          o->progress == 2 ? term_columns(log) - 1 : 100);
        /* A terminal gets the bar every 4 steps; a file or pipe a plain
         * line at most every progress_seconds (no \r in a log). */
        double tnow = 0, every = o->progress_seconds > 0 ? o->progress_seconds : 30;
        int bar = o->progress == 2 && (s % 4 == 3 || s == spe - 1);
        int plain = o->progress == 1 && s + 1 < spe && (tnow = now_seconds()) - r->last_print >= every;
        if ((bar || plain) && vit_dist_rank() == 0) {
            double el = now_seconds() - t0;
            double steps = (double)(r->st.step - r->start_step);
            double ips = steps * c->batch / (el > 1e-9 ? el : 1e-9);
            double eta = steps > 0 ? (double)(total_steps - (long)r->st.step) * el / steps : 0;
            if (bar) {
                progress_bar(log, r, s + 1, spe, lv, ips, eta);
            } else {
                char line[256];
                progress_text(line, sizeof line, 100, r, s + 1, spe, lv, ips, eta, 0);
                fprintf(log, "%s\n", line);
                fflush(log);
                r->last_print = tnow;
            }
        }
    }
    r->st.epoch_step = 0;
    memset(r->st.epoch_sums, 0, sizeof r->st.epoch_sums);
    *loss_out = loss_sum / seen;
    *acc_out = correct / seen;
    *lr_out = lr;
    return VIT_OK;
}

/* vit_evaluate_tta of the scored model over a data-parallel job: each rank
 * scores its share of ds and the sums are combined, so every rank gets the
 * whole result. */
static int evaluate_shared(run *r, const vit_dataset *ds, int tta, vit_eval_result *ev)
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

void vit_train_result_free(vit_train_result *r)
{
    if (!r)
        return;
    free(r->confusion);
    r->confusion = NULL;
}

int vit_train_run(const vit_config *cfg, const vit_dataset *train_in, const vit_dataset *test,
                  const vit_train_opts *o, vit_train_result *res)
{
    if (!cfg || !train_in || !test || !o || !o->out_dir || !res)
        return vit_fail(VIT_EINVAL, "vit_train_run: NULL argument");
    memset(res, 0, sizeof *res);
    res->val_accuracy = -1;
    if (train_in->count <= o->val_count || o->val_count < 0)
        return vit_fail(VIT_EINVAL, "vit_train_run: val_count %d leaves no training images (of %d)",
                        o->val_count, train_in->count);
    /* The validation set is the tail of the training part, never the test. */
    vit_dataset train = *train_in, val = *train_in;
    size_t img = (size_t)train.height * train.width * train.channels;
    train.count -= o->val_count;
    val.count = o->val_count;
    val.images += (size_t)train.count * img;
    val.labels += train.count;

    FILE *log = o->log ? o->log : stdout;
    double t0 = now_seconds();
    run r;
    memset(&r, 0, sizeof r);
    int rc = run_setup(&r, cfg, &train, test, o);
    double prior_seconds = 0;
    int rank = vit_dist_rank();
    /* A stop epoch the checkpoint has already passed would train nothing
     * and then spend the final evaluation on an unchanged model: refused
     * before anything is written. */
    if (rc == VIT_OK && o->stop_after_epochs > 0 && r.st.epoch < (unsigned long long)r.cfg.epochs
        && r.st.epoch >= (unsigned long long)o->stop_after_epochs)
        rc = vit_fail(VIT_EINVAL, "%s: the run has already done %llu epochs, so a stop after "
                      "epoch %d is already reached; nothing to train (stop at a later epoch, "
                      "or not at all)", o->resume, r.st.epoch, o->stop_after_epochs);
    char moved[4300] = "";
    if (rc == VIT_OK && rank == 0 && o->overwrite && vit_run_dir_taken(o->out_dir, o->resume)
        && (rc = set_aside(o->out_dir, moved, sizeof moved)) == VIT_OK && o->progress)
        fprintf(log, "%s: the run there (last.ckpt, metrics.csv) moved to %s\n", o->out_dir, moved);
    if (rc == VIT_OK && rank == 0)
        rc = open_metrics(o->out_dir, o->resume, r.st.epoch, o->val_count > 0, &r.metrics,
                          &prior_seconds);
    rc = vit_dist_agree(rc);
    if (rc == VIT_OK && r.cfg.batch < vit_dist_size())
        rc = vit_fail(VIT_EINVAL, "batch %d is smaller than the %d ranks", r.cfg.batch, vit_dist_size());
    const vit_config *c = &r.cfg;
    long spe = (train.count + c->batch - 1) / c->batch;
    long total_steps = spe * c->epochs;
    unsigned long long start_step = r.st.step, start_epoch = r.st.epoch;
    r.start_step = start_step;
    r.last_save = t0;
    res->steps_per_epoch = spe;
    if (rc == VIT_OK && o->progress && rank == 0 && r.st.epoch_step > 0)
        fprintf(log, "resuming inside epoch %llu at step %llu of %ld\n", r.st.epoch + 1,
                r.st.epoch_step, spe);
    if (rc == VIT_OK && o->resume && r.st.epoch >= (unsigned long long)c->epochs) {
        res->already_complete = 1;
        res->epochs_done = (int)r.st.epoch;
        res->steps = r.st.step;
        run_free(&r);
        return VIT_OK;
    }
    vit_eval_result ev = {0};
    int stop = 0;
    double val_acc = -1; /* the last epoch's, with a validation set */
    r.last_print = t0;
    r.header_due = rc == VIT_OK && o->progress >= 1 && rank == 0;
    r.header_val = val.count > 0;
    r.header_max = o->progress == 2 ? term_columns(log) - 1 : 100;
    while (rc == VIT_OK && !stop && r.st.epoch < (unsigned long long)c->epochs) {
        if (o->stop_after_epochs > 0 && r.st.epoch >= (unsigned long long)o->stop_after_epochs)
            break;
        double tl = 0, ta = 0, lr = 0;
        rc = train_epoch(&r, &train, o, log, t0, total_steps, &tl, &ta, &lr, &stop);
        if (rc || stop)
            break;
        r.st.epoch++;
        vit_eval_result_free(&ev);
        if ((rc = evaluate_shared(&r, test, VIT_TTA_NONE, &ev))) {
            if (rc == VIT_ENUM) { /* the epoch's last steps diverged without a NaN loss yet */
                char why[400];
                snprintf(why, sizeof why, "%s", vit_last_error());
                vit_fail(VIT_ENUM, "training diverged by step %llu (evaluation after epoch %llu): %s",
                         r.st.step, r.st.epoch, why);
            }
            break;
        }
        if (o->check_replicas && !vit_dist_same(params_hash(r.m))) {
            rc = vit_fail(VIT_EINVAL, "replicas diverged: parameters differ between ranks after epoch %llu",
                          r.st.epoch);
            break;
        }
        if (val.count > 0) {
            vit_eval_result vr;
            if ((rc = evaluate_shared(&r, &val, VIT_TTA_NONE, &vr)))
                break;
            val_acc = vr.accuracy;
            vit_eval_result_free(&vr);
        }
        double secs = prior_seconds + now_seconds() - t0;
        if (rank == 0) {
            fprintf(r.metrics, "%llu,%.6f,%.6f,%.6f,%.6f,%.8g,%.3f", r.st.epoch, tl, ta, ev.loss,
                    ev.accuracy, lr, secs);
            if (val.count > 0)
                fprintf(r.metrics, ",%.6f", val_acc);
            fputc('\n', r.metrics);
            fflush(r.metrics);
        }
        if (o->progress >= 1 && rank == 0) {
            double ips = (double)(r.st.epoch - start_epoch) * train.count / (now_seconds() - t0);
            progress_clear(log, &r);
            epoch_header_due(log, &r);
            epoch_line(log, &r, tl, ta, &ev, val_acc, secs, lr, ips);
            r.last_print = now_seconds();
        }
        int last = r.st.epoch == (unsigned long long)c->epochs
                   || (o->stop_after_epochs > 0 && r.st.epoch == (unsigned long long)o->stop_after_epochs);
        int pause = pause_wanted(&r, o, &stop, &rc);
        if (rc)
            break;
        if ((o->ckpt_every > 0 && (r.st.epoch % (unsigned long long)o->ckpt_every == 0 || last))
            || pause)
            if ((rc = save(&r, 0)))
                break;
    }
    if (rc == VIT_OK && stop) {
        res->interrupted = 1;
        res->epoch_step = r.st.epoch_step;
        res->epochs_done = (int)r.st.epoch;
        res->steps = r.st.step;
        res->seconds = now_seconds() - t0;
        vit_eval_result_free(&ev);
        run_free(&r);
        return VIT_OK;
    }
    /* The final figures: one pass, as the epoch lines show, and then, with
     * test-time augmentation, the classifier's own, which the result
     * reports first. */
    if (rc == VIT_OK && !ev.confusion)
        rc = evaluate_shared(&r, test, VIT_TTA_NONE, &ev);
    if (rc == VIT_OK && val.count > 0 && val_acc < 0) {
        vit_eval_result vr = {0};
        if ((rc = evaluate_shared(&r, &val, VIT_TTA_NONE, &vr)) == VIT_OK)
            val_acc = vr.accuracy;
        vit_eval_result_free(&vr);
    }
    res->test_accuracy_plain = ev.accuracy;
    res->test_loss_plain = ev.loss;
    res->val_accuracy_plain = val_acc;
    res->val_accuracy = val_acc;
    res->tta = r.cfg.tta;
    res->ema = r.cfg.ema;
    if (rc == VIT_OK && r.cfg.tta != VIT_TTA_NONE) {
        vit_eval_result et;
        if ((rc = evaluate_shared(&r, test, r.cfg.tta, &et)) == VIT_OK) {
            vit_eval_result_free(&ev);
            ev = et;
        }
        vit_eval_result vr = {0};
        if (rc == VIT_OK && val.count > 0 && (rc = evaluate_shared(&r, &val, r.cfg.tta, &vr)) == VIT_OK)
            res->val_accuracy = vr.accuracy;
        vit_eval_result_free(&vr);
    }
    if (rc == VIT_OK) {
        res->test_accuracy = ev.accuracy;
        res->test_loss = ev.loss;
        res->seconds = now_seconds() - t0;
        res->steps = r.st.step;
        res->epochs_done = (int)r.st.epoch;
        res->images_per_second = (double)(r.st.epoch - start_epoch) * train.count / res->seconds;
        res->confusion = ev.confusion;
        res->confusion_classes = ev.classes;
        ev.confusion = NULL;
    }
    vit_eval_result_free(&ev);
    run_free(&r);
    return rc;
}
