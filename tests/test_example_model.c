/*
 * tests/test_example_model.c - the README's "Writing your own model"
 * example (examples/example_model.c) prints true numbers.
 *
 * The example binary (float32, argv[1]) is run with a checkpoint path; it
 * prints the training loss at the first and last step, the held-out loss
 * and accuracy and the first held-out sequence's logits, and saves the
 * trained tensors.  This suite then recomputes the held-out figures from
 * those tensors with plain loops in double - its own embedding lookup,
 * projections, masked per-head softmax, gate, masked mean, head and
 * cross-entropy, no tape and no kernel - and compares; and it checks that
 * training did its job, at bars that a model ignoring the padding mask (0.85
 * measured) or one that did not learn (0.5) cannot reach.
 *
 * The example's source is included (float64 build, main renamed) for two
 * things only: its data generator, whose contract is checked here
 * separately, and its custom gate op, whose backward is checked against
 * finite differences.
 */
#define main example_main
#include "../examples/example_model.c"
#undef main

#include <check.h>
#include <string.h>
#include <unistd.h>

#include "gradcheck.h"

static const char *example_path;

/* What the example printed. */
typedef struct printed {
    double loss0, loss_last, test_loss, test_acc, logit[2];
    int last_step, correct, n, label0;
} printed;

static void run_example(const char *ckpt, printed *o)
{
    ck_assert_msg(strchr(example_path, '\'') == NULL && strchr(ckpt, '\'') == NULL,
                  "paths must not contain a quote");
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "'%s' '%s'", example_path, ckpt);
    FILE *f = popen(cmd, "r");
    ck_assert_msg(f != NULL, "popen(%s) failed", cmd);
    char out[4096];
    size_t len = fread(out, 1, sizeof out - 1, f);
    out[len] = 0;
    int rc = pclose(f);
    printf("%s", out);
    ck_assert_msg(rc == 0, "%s exited with status %d", cmd, rc);
    int got = sscanf(out,
                     "step 0: training loss %lf\n"
                     "step %d: training loss %lf\n"
                     "held-out: loss %lf, accuracy %lf (%d of %d)\n"
                     "first held-out sequence: label %d, logits %lf %lf",
                     &o->loss0, &o->last_step, &o->loss_last, &o->test_loss, &o->test_acc,
                     &o->correct, &o->n, &o->label0, &o->logit[0], &o->logit[1]);
    ck_assert_msg(got == 10, "could not read the example's output (%d fields)", got);
}

/* Trained tensor `name` of the checkpoint, checked to hold `size` values. */
static const vit_real *tensor(const vit_ckpt *c, const char *name, size_t size)
{
    for (int i = 0; i < c->ntensors; i++)
        if (strcmp(c->tensors[i].name, name) == 0) {
            size_t n = 1;
            for (int k = 0; k < c->tensors[i].ndim; k++)
                n *= (size_t)c->tensors[i].dims[k];
            ck_assert_msg(n == size, "%s has %zu values, expected %zu", name, n, size);
            return c->tensors[i].data;
        }
    ck_abort_msg("the checkpoint has no tensor %s", name);
    return NULL;
}

/* The trained model, as the reference reads it: w[0..2] are W_Q, W_K, W_V,
 * the column blocks of the stored W_QKV [D, 3D] (row stride ld[p] = 3D),
 * w[3] is W_O (stride D). */
typedef struct ref_model {
    const vit_real *embed, *w[4], *b[4], *gate, *head_w, *head_b;
    int ld[4];
} ref_model;

/* Logits of one sequence, computed directly in double.  use_mask = 0
 * treats every token as real (what a model that forgot the mask sees). */
static void ref_logits(const ref_model *m, const int *ids, const unsigned char *valid,
                       int use_mask, double logit[2])
{
    enum { DK = D / HEADS };
    double x[T][D], proj[3][T][D], ctx[T][D], pooled[D] = {0};
    for (int t = 0; t < T; t++)
        for (int j = 0; j < D; j++)
            x[t][j] = m->embed[ids[t] * D + j];
    for (int p = 0; p < 3; p++)          /* q, k, v = x W + b */
        for (int t = 0; t < T; t++)
            for (int j = 0; j < D; j++) {
                double s = m->b[p][j];
                for (int i = 0; i < D; i++)
                    s += x[t][i] * m->w[p][i * m->ld[p] + j];
                proj[p][t][j] = s;
            }
    for (int h = 0; h < HEADS; h++)
        for (int qi = 0; qi < T; qi++) {
            double score[T], top = -INFINITY, sum = 0;
            for (int kj = 0; kj < T; kj++) {
                score[kj] = 0;
                for (int e = h * DK; e < (h + 1) * DK; e++)
                    score[kj] += proj[0][qi][e] * proj[1][kj][e];
                score[kj] /= sqrt((double)DK);
                if (use_mask && !valid[kj])
                    score[kj] = -INFINITY;
                top = fmax(top, score[kj]);
            }
            for (int kj = 0; kj < T; kj++)
                sum += score[kj] = exp(score[kj] - top);
            for (int e = h * DK; e < (h + 1) * DK; e++) {
                ctx[qi][e] = 0;
                for (int kj = 0; kj < T; kj++)
                    ctx[qi][e] += score[kj] / sum * proj[2][kj][e];
            }
        }
    int real = 0;
    for (int t = 0; t < T; t++) {
        if (use_mask && !valid[t])
            continue;
        real++;
        for (int j = 0; j < D; j++) {
            double a = m->b[3][j];
            for (int i = 0; i < D; i++)
                a += ctx[t][i] * m->w[3][i * m->ld[3] + j];
            pooled[j] += (x[t][j] + a) / (1 + exp(-(double)m->gate[j]));
        }
    }
    for (int c = 0; c < 2; c++) {
        logit[c] = m->head_b[c];
        for (int j = 0; j < D; j++)
            logit[c] += pooled[j] / real * m->head_w[j * 2 + c];
    }
}

START_TEST(test_printed_numbers_are_true)
{
    char dir[] = "/tmp/vit_example_XXXXXX", ckpt[64];
    ck_assert_msg(mkdtemp(dir) != NULL, "mkdtemp failed");
    snprintf(ckpt, sizeof ckpt, "%s/model.ckpt", dir);
    printed o;
    run_example(ckpt, &o);
    vit_ckpt c;
    int rc = vit_ckpt_read(ckpt, &c);
    unlink(ckpt);
    rmdir(dir);
    ck_assert_msg(rc == VIT_OK, "reading the example's checkpoint: %s", vit_last_error());
    ck_assert_int_eq(c.ntensors, 8);

    ref_model m = {.embed = tensor(&c, "embed", V * D), .gate = tensor(&c, "gate", D),
                   .head_w = tensor(&c, "head.w", D * 2), .head_b = tensor(&c, "head.b", 2)};
    const vit_real *w_qkv = tensor(&c, "attn.w_qkv", 3 * D * D);
    const vit_real *b_qkv = tensor(&c, "attn.b_qkv", 3 * D);
    for (int p = 0; p < 3; p++) {
        m.w[p] = w_qkv + p * D;
        m.ld[p] = 3 * D;
        m.b[p] = b_qkv + p * D;
    }
    m.w[3] = tensor(&c, "attn.w_o", D * D);
    m.ld[3] = D;
    m.b[3] = tensor(&c, "attn.b_o", D);

    /* The held-out set the example scored: the generator from seed 3. */
    static int ids[N_TEST * T], labels[N_TEST];
    static unsigned char valid[N_TEST * T];
    vit_rng r;
    vit_rng_seed(&r, 3);
    make_batch(&r, N_TEST, ids, valid, labels);

    double loss = 0, logit0[2] = {0};
    int correct = 0, correct_unmasked = 0, near_ties = 0, needle_in_padding = 0, positives = 0;
    for (int b = 0; b < N_TEST; b++) {
        const int *s = ids + b * T;
        const unsigned char *v = valid + b * T;
        /* The generator's contract: a prefix of 2..T real tokens, the label
         * says whether the needle is among them. */
        int len = 0, has = 0, padded_needle = 0;
        while (len < T && v[len])
            len++;
        for (int t = 0; t < T; t++) {
            ck_assert_msg(!v[t] == (t >= len), "item %d: real tokens are not a prefix", b);
            ck_assert_msg(s[t] >= 0 && s[t] < V, "item %d: id %d out of range", b, s[t]);
            has |= t < len && s[t] == NEEDLE;
            padded_needle |= t >= len && s[t] == NEEDLE;
        }
        ck_assert_msg(len >= 2 && labels[b] == has, "item %d: length %d, label %d, needle %d", b,
                      len, labels[b], has);
        needle_in_padding += padded_needle && !has;
        positives += has;

        double l[2];
        ref_logits(&m, s, v, 1, l);
        double top = fmax(l[0], l[1]);
        loss += top + log(exp(l[0] - top) + exp(l[1] - top)) - l[labels[b]];
        correct += (l[1] > l[0]) == labels[b];
        near_ties += fabs(l[1] - l[0]) < 1e-3;
        if (b == 0)
            memcpy(logit0, l, sizeof l);
        ref_logits(&m, s, v, 0, l);
        correct_unmasked += (l[1] > l[0]) == labels[b];
    }
    loss /= N_TEST;
    printf("reference: held-out loss %.6f, %d of %d correct (%d without the mask), "
           "logits %.6f %.6f; %d positives, %d negatives with a needle in the padding\n",
           loss, correct, N_TEST, correct_unmasked, logit0[0], logit0[1], positives,
           needle_in_padding);
    /* The data make the mask matter, and the classes are balanced. */
    ck_assert_int_ge(needle_in_padding, N_TEST / 10);
    ck_assert(positives > N_TEST * 2 / 5 && positives < N_TEST * 3 / 5);

    /* The printed figures are the reference's (4 decimals printed; float32). */
    ck_assert_int_eq(o.n, N_TEST);
    ck_assert_msg(abs(o.correct - correct) <= near_ties, "printed %d correct, reference %d",
                  o.correct, correct);
    ck_assert_msg(fabs(o.test_acc - (double)o.correct / N_TEST) < 6e-4, "accuracy %.4f != %d/%d",
                  o.test_acc, o.correct, N_TEST);
    ck_assert_msg(fabs(o.test_loss - loss) < 2e-4, "held-out loss %.4f, reference %.6f",
                  o.test_loss, loss);
    ck_assert_int_eq(o.label0, labels[0]);
    for (int k = 0; k < 2; k++)
        ck_assert_msg(fabs(o.logit[k] - logit0[k]) < 2e-4, "logit %d: %.4f, reference %.6f", k,
                      o.logit[k], logit0[k]);

    /* Training worked: from chance (ln 2 for a head initialised near 0) to
     * a small loss, and held-out accuracy no maskless or untrained model
     * reaches. */
    ck_assert_int_eq(o.last_step, STEPS - 1);
    ck_assert_msg(fabs(o.loss0 - log(2.0)) < 0.05, "step 0 loss %.4f is not about ln 2", o.loss0);
    ck_assert_msg(o.loss_last < 0.1 && o.loss_last < o.loss0 / 10, "last training loss %.4f",
                  o.loss_last);
    ck_assert_msg(loss < 0.1, "held-out loss %.4f", loss);
    ck_assert_msg(correct >= N_TEST * 97 / 100, "held-out accuracy %d/%d", correct, N_TEST);
    ck_assert_msg(correct_unmasked < N_TEST * 95 / 100,
                  "the same parameters without the mask score %d/%d: the mask does not matter",
                  correct_unmasked, N_TEST);
    vit_ckpt_free(&c);
}
END_TEST

/* ---- The custom op's backward against finite differences ---------------- */

enum { GR = 6, GD = 5 };   /* gate on x [2, 3, GD] */

typedef struct gate_case {
    vit_real x[GR * GD], g[GD], w[GR * GD];
} gate_case;

/* sum w * gate(x, g), through the op's forward in no-grad mode. */
static double gate_loss(void *p)
{
    gate_case *gc = p;
    vit_tape *tape = vit_tape_new();
    vit_tape_set_grad(tape, 0);
    vit_tensor *y = gate(tape, vit_tape_leaf(tape, gc->x, NULL, 3, (int[]){2, 3, GD}),
                         vit_tape_leaf(tape, gc->g, NULL, 1, (int[]){GD}));
    ck_assert_msg(y != NULL, "gate forward: %s", vit_last_error());
    double s = gc_dot(gc->w, y->data, y->size);
    vit_tape_free(tape);
    return s;
}

/* Gradients of sum w * gate(x, g) by the tape; dx NULL: x needs none. */
static void gate_grads(gate_case *gc, vit_real *dx, vit_real *dg)
{
    vit_tape *tape = vit_tape_new();
    vit_tensor *y = gate(tape, vit_tape_leaf(tape, gc->x, dx, 3, (int[]){2, 3, GD}),
                         vit_tape_leaf(tape, gc->g, dg, 1, (int[]){GD}));
    ck_assert_msg(y != NULL && vit_tape_backward_from(tape, y, gc->w) == VIT_OK, "gate: %s",
                  vit_last_error());
    vit_tape_free(tape);
}

START_TEST(test_gate_gradient)
{
    gate_case gc;
    uint64_t seed = 7;
    gc_fill(gc.x, GR * GD, &seed, 1.0);
    gc_fill(gc.g, GD, &seed, 2.0);
    gc_fill(gc.w, GR * GD, &seed, 1.0);
    vit_real dx[GR * GD], dg[GD], dg_only[GD], dx_acc[GR * GD];
    memset(dx, 0, sizeof dx);
    memset(dg, 0, sizeof dg);
    memset(dg_only, 0, sizeof dg_only);
    gate_grads(&gc, dx, dg);
    ck_assert(gc_check("gate dx", gc.x, dx, GR * GD, gate_loss, &gc) <= GC_TOL);
    ck_assert(gc_check("gate dg", gc.g, dg, GD, gate_loss, &gc) <= GC_TOL);
    /* Only g needs a gradient: din[0] is NULL, dg is the same. */
    gate_grads(&gc, NULL, dg_only);
    ck_assert(memcmp(dg, dg_only, sizeof dg) == 0);
    /* Leaf gradients accumulate: a second backward adds the same again. */
    memcpy(dx_acc, dx, sizeof dx);
    gate_grads(&gc, dx_acc, dg_only);
    for (int i = 0; i < GR * GD; i++)
        ck_assert(fabs(dx_acc[i] - 2 * dx[i]) <= 1e-12 * fabs(dx[i]));
    for (int j = 0; j < GD; j++)
        ck_assert(fabs(dg_only[j] - 2 * dg[j]) <= 1e-12 * fabs(dg[j]));
}
END_TEST

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: test_example_model EXAMPLE_MODEL_BINARY\n");
        return EXIT_FAILURE;
    }
    example_path = argv[1];
    Suite *s = suite_create("test_example_model");
    TCase *tc = tcase_create("example_model");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_printed_numbers_are_true);
    tcase_add_test(tc, test_gate_gradient);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
