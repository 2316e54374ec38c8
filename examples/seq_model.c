/*
 * seq_model.c - a decoder-only transformer on digit sequences, written the
 * way a user would write their own model on libvit: from the public API only
 * (<vit/vit.h>), as forward code on the tape.  The parameters are a
 * vit_params, the backward is vit_tape_backward's, and the loss counts the
 * answer positions alone through the cross-entropy's ignore label
 * (vit_op_cross_entropy_masked).  tests/test_install.sh builds this file against an installed
 * libvit with nothing but `pkg-config --cflags --libs vit`, so it must not
 * use libm either (those flags do not link it).  See seq_model.h.
 */
#include "seq_model.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* The label of the positions that carry no loss (not an answer). */
#define SEQ_IGNORE -1

/* ---- Errors ------------------------------------------------------------ */

/* The model's own errors are reported the library's way: a VIT_E* code
 * and the thread's vit_last_error() message, set with vit_set_error. */

/* ---- Configuration ------------------------------------------------------ */

void seq_config_default(seq_config *cfg)
{
    *cfg = (seq_config){
        .task = SEQ_REVERSE, .len = 5, .dim = 64, .heads = 4, .layers = 2, .mlp = 128,
        .batch = 64, .steps = 500, .lr = 3e-3, .causal = 1, .seed = 1,
    };
}

int seq_config_check(const seq_config *c, const char **msg)
{
    const char *m = NULL;
    if (c->task != SEQ_REVERSE && c->task != SEQ_SORT) m = "task must be reverse or sort";
    else if (c->len < 1 || c->len > 16) m = "len must be 1..16";
    else if (c->dim < 1 || c->dim > 4096) m = "dim must be 1..4096";
    else if (c->heads < 1 || c->dim % c->heads) m = "heads must divide dim";
    else if (c->layers < 1 || c->layers > 64) m = "layers must be 1..64";
    else if (c->mlp < 1 || c->mlp > 16384) m = "mlp must be 1..16384";
    else if (c->batch < 1 || c->batch > 65536) m = "batch must be 1..65536";
    else if (c->steps < 0) m = "steps must be >= 0";
    else if (!(c->lr > 0 && c->lr < 1)) m = "lr must be in (0, 1)";
    if (msg)
        *msg = m ? m : "";
    return m ? VIT_EINVAL : VIT_OK;
}

/* ---- The model ------------------------------------------------------------ */

/* Indices of one block's tensors in the vit_params.  attn is the first of
 * the attention layer's four (w_qkv, w_o, b_qkv, b_o), contiguous in the
 * order vit_mha's flat buffer wants for self-attention. */
typedef struct seq_block {
    int ln1_g, ln1_b, attn, ln2_g, ln2_b, fc_w, fc_b, proj_w, proj_b;
} seq_block;

enum { ATTN_TENSORS = 4 };

struct seq_model {
    seq_config cfg;
    int T;
    vit_mha mha;          /* the attention shape; batch set per forward */
    vit_params *params;
    int wte, wpe, lnf_g, lnf_b, head_w, head_b;
    seq_block *block;     /* [layers] */
    vit_tape *tape;       /* one step (or one evaluation forward) at a time */
    vit_adamw opt;
    int *row_labels;      /* [batch * T]: a training step's label per position,
                             kept here so that a step allocates nothing */
};

/* sqrt(x) for x >= 1 by Newton's iteration (converged well within the
 * iterations for the x used here), keeping this file free of libm. */
static double root(double x)
{
    double r = x;
    for (int i = 0; i < 64; i++)
        r = (r + x / r) / 2;
    return r;
}

/* Adds tensor "blocks.<layer>.<name>" (or "<name>" for layer < 0); the
 * first failure is kept in *err. */
static int add(vit_params *p, int *err, int layer, const char *name, int ndim, int d0, int d1,
               int init, double scale, int decay)
{
    char full[VIT_PARAMS_NAME_MAX + 1];
    if (layer >= 0)
        snprintf(full, sizeof full, "blocks.%d.%s", layer, name);
    else
        snprintf(full, sizeof full, "%s", name);
    int ix = vit_params_add(p, full, ndim, (const int[]){d0, d1}, init, scale, decay);
    if (ix < 0 && *err == VIT_OK)
        *err = ix;
    return ix;
}

/* The layout, in the order the old flat buffer had:
 *   wte [V, D]  wpe [T, D]
 *   blocks.L.{ln1.g, ln1.b, attn.{w_qkv [D, 3D], w_o [D, D], b_qkv [3D], b_o [D]},
 *             ln2.g, ln2.b, mlp.w1 [D, F], mlp.b1 [F], mlp.w2 [F, D], mlp.b2 [D]}
 *   ln_f.g, ln_f.b [D]  head.w [D, 10]  head.b [10]
 * GPT-2's init: weights normal with std 0.02, the two projections that
 * write into the residual stream (attn.w_o, mlp.w2) with 0.02/sqrt(2 layers)
 * so its variance does not grow with depth; biases 0, gains 1.  Matrices
 * are decayed, the rest not (the default run uses no weight decay). */
static int layout(seq_model *m)
{
    vit_params *p = m->params;
    const int D = m->cfg.dim, F = m->cfg.mlp, T = m->T;
    const double std = 0.02, out_std = 0.02 / root(2.0 * m->cfg.layers);
    int err = VIT_OK;
    m->wte = add(p, &err, -1, "wte", 2, SEQ_VOCAB, D, VIT_INIT_NORMAL, std, 1);
    m->wpe = add(p, &err, -1, "wpe", 2, T, D, VIT_INIT_NORMAL, std, 0);
    static const char *attn_w[2] = {"attn.w_qkv", "attn.w_o"};
    static const char *attn_b[2] = {"attn.b_qkv", "attn.b_o"};
    for (int l = 0; l < m->cfg.layers; l++) {
        seq_block *b = &m->block[l];
        b->ln1_g = add(p, &err, l, "ln1.g", 1, D, 0, VIT_INIT_ONE, 0, 0);
        b->ln1_b = add(p, &err, l, "ln1.b", 1, D, 0, VIT_INIT_ZERO, 0, 0);
        for (int i = 0; i < 2; i++) { /* W_QKV = [W_Q | W_K | W_V], then W_O */
            int ix = add(p, &err, l, attn_w[i], 2, D, i ? D : 3 * D, VIT_INIT_NORMAL,
                         i == 1 ? out_std : std, 1);
            if (i == 0)
                b->attn = ix;
        }
        for (int i = 0; i < 2; i++)
            add(p, &err, l, attn_b[i], 1, i ? D : 3 * D, 0, VIT_INIT_ZERO, 0, 0);
        b->ln2_g = add(p, &err, l, "ln2.g", 1, D, 0, VIT_INIT_ONE, 0, 0);
        b->ln2_b = add(p, &err, l, "ln2.b", 1, D, 0, VIT_INIT_ZERO, 0, 0);
        b->fc_w = add(p, &err, l, "mlp.w1", 2, D, F, VIT_INIT_NORMAL, std, 1);
        b->fc_b = add(p, &err, l, "mlp.b1", 1, F, 0, VIT_INIT_ZERO, 0, 0);
        b->proj_w = add(p, &err, l, "mlp.w2", 2, F, D, VIT_INIT_NORMAL, out_std, 1);
        b->proj_b = add(p, &err, l, "mlp.b2", 1, D, 0, VIT_INIT_ZERO, 0, 0);
    }
    m->lnf_g = add(p, &err, -1, "ln_f.g", 1, D, 0, VIT_INIT_ONE, 0, 0);
    m->lnf_b = add(p, &err, -1, "ln_f.b", 1, D, 0, VIT_INIT_ZERO, 0, 0);
    m->head_w = add(p, &err, -1, "head.w", 2, D, SEQ_DIGITS, VIT_INIT_NORMAL, std, 1);
    m->head_b = add(p, &err, -1, "head.b", 1, SEQ_DIGITS, 0, VIT_INIT_ZERO, 0, 0);
    return err;
}

seq_model *seq_model_new(const seq_config *cfg)
{
    const char *msg;
    if (!cfg || seq_config_check(cfg, &msg) != VIT_OK) {
        vit_set_error(VIT_EINVAL, "%s", cfg ? msg : "cfg is NULL");
        return NULL;
    }
    seq_model *m = calloc(1, sizeof *m);
    if (!m) {
        vit_set_error(VIT_ENOMEM, "seq_model_new: out of memory");
        return NULL;
    }
    m->cfg = *cfg;
    m->T = 2 * cfg->len;
    m->mha = (vit_mha){.batch = 1, .n_q = m->T, .n_k = m->T, .d_model = cfg->dim,
                       .heads = cfg->heads, .has_bias = 1};
    m->mha.mask.causal = cfg->causal;
    m->block = calloc((size_t)cfg->layers, sizeof *m->block);
    m->row_labels = malloc((size_t)cfg->batch * m->T * sizeof *m->row_labels);
    m->params = vit_params_new();
    m->tape = vit_tape_new();
    vit_rng rng;
    vit_rng_seed(&rng, cfg->seed);
    if (!m->block || !m->row_labels || !m->params || !m->tape || layout(m) != VIT_OK
        || vit_params_alloc(m->params) != VIT_OK || vit_params_init(m->params, &rng) != VIT_OK
        || vit_adamw_init(&m->opt, vit_params_count(m->params), 0.9, 0.98, 1e-8, 0.0) != VIT_OK) {
        /* vit_last_error() names the failing call */
        seq_model_free(m);
        return NULL;
    }
    return m;
}

void seq_model_free(seq_model *m)
{
    if (!m)
        return;
    vit_adamw_free(&m->opt);
    vit_tape_free(m->tape);
    vit_params_free(m->params);
    free(m->block);
    free(m->row_labels);
    free(m);
}

size_t seq_model_param_count(const seq_model *m) { return m ? vit_params_count(m->params) : 0; }

/* ---- Data ------------------------------------------------------------------ */

/* A fixed mix of the digit string's bits (splitmix64's finaliser), so the
 * held-out set is a pseudo-random eighth of all strings, unrelated to the
 * generator that draws them. */
static int held_out(const int *digits, int k)
{
    uint64_t h = 0;
    for (int i = 0; i < k; i++)
        h = h * 10 + (uint64_t)digits[i];
    h += 0x9e3779b97f4a7c15ULL;
    h = (h ^ (h >> 30)) * 0xbf58476d1ce4e5b9ULL;
    h = (h ^ (h >> 27)) * 0x94d049bb133111ebULL;
    h ^= h >> 31;
    return (h & 7) == 0;
}

static int cmp_int(const void *a, const void *b)
{
    return *(const int *)a - *(const int *)b;
}

void seq_make_batch(const seq_config *cfg, vit_rng *rng, int split, int n, int *tokens,
                    int *labels)
{
    const int k = cfg->len, T = 2 * k;
    int d[16];
    if (k < 1 || k > 16)
        return; /* seq_config_check's range; nothing to make */
    for (int i = 0; i < n; i++) {
        do {
            for (int j = 0; j < k; j++)
                d[j] = (int)vit_rng_below(rng, SEQ_DIGITS);
        } while (held_out(d, k) != (split != 0));
        int *tok = tokens + (size_t)i * T, *lab = labels + (size_t)i * k;
        for (int j = 0; j < k; j++) {
            tok[j] = d[j];
            lab[j] = cfg->task == SEQ_REVERSE ? d[k - 1 - j] : d[j];
        }
        if (cfg->task == SEQ_SORT)
            qsort(lab, (size_t)k, sizeof *lab, cmp_int);
        tok[k] = SEQ_SEP;
        for (int j = 0; j + 1 < k; j++) /* the answer, shifted right by one */
            tok[k + 1 + j] = lab[j];
    }
}

/* ---- Forward ------------------------------------------------------------- */

/* A leaf over parameter tensor i, with a gradient when the tape records one. */
static vit_tensor *leaf(seq_model *m, int i)
{
    return vit_params_leaf(m->params, m->tape, i, vit_tape_grad_enabled(m->tape));
}

/* The model on the tape, in its grad mode: tokens [b, T] -> logits [b, T, 10].
 *   x = wte[tokens] + wpe
 *   per block (vit_op_block): x = x + MHA_causal(LN1(x));
 *                             x = x + W2 GELU(W1 LN2(x) + b1) + b2
 *   logits = LN_f(x) head.w + head.b */
static vit_tensor *forward_graph(seq_model *m, const int *tokens, int b)
{
    vit_tape *t = m->tape;
    const vit_real eps = (vit_real)VIT_LAYERNORM_EPS;
    vit_mha mha = m->mha;
    mha.batch = b;
    vit_tensor *x = vit_op_embedding(t, leaf(m, m->wte), tokens, 2, (const int[]){b, m->T});
    x = vit_op_pos_add(t, x, leaf(m, m->wpe));
    for (int l = 0; l < m->cfg.layers; l++) {
        const seq_block *B = &m->block[l];
        vit_block_weights w = {
            .ln1_g = leaf(m, B->ln1_g), .ln1_b = leaf(m, B->ln1_b),
            .attn = vit_params_leaf_range(m->params, t, B->attn, ATTN_TENSORS,
                                          vit_tape_grad_enabled(t)),
            .ln2_g = leaf(m, B->ln2_g), .ln2_b = leaf(m, B->ln2_b),
            .w1 = leaf(m, B->fc_w), .b1 = leaf(m, B->fc_b),
            .w2 = leaf(m, B->proj_w), .b2 = leaf(m, B->proj_b)};
        x = vit_op_block(t, &mha, &w, x, NULL);
    }
    x = vit_op_layernorm(t, x, leaf(m, m->lnf_g), leaf(m, m->lnf_b), eps);
    return vit_op_linear(t, x, leaf(m, m->head_w), leaf(m, m->head_b));
}

/* Checks the batch before anything is recorded, so the message names the
 * model's own rule (a token outside 0..10) rather than the lookup's. */
static int check_tokens(const seq_model *m, const int *tokens, int b, const char *fn)
{
    if (!tokens || b < 1 || b > m->cfg.batch)
        return vit_set_error(VIT_EINVAL, "%s: tokens is NULL or b = %d is outside 1..%d", fn, b,
                             m->cfg.batch);
    for (size_t r = 0; r < (size_t)b * m->T; r++)
        if (tokens[r] < 0 || tokens[r] >= SEQ_VOCAB)
            return vit_set_error(VIT_EINVAL,
                                 "%s: token %d (item %zu, position %zu) is outside 0..10", fn,
                                 tokens[r], r / (size_t)m->T, r % (size_t)m->T);
    return VIT_OK;
}

const vit_real *seq_forward(seq_model *m, const int *tokens, int b)
{
    if (!m) {
        vit_set_error(VIT_EINVAL, "seq_forward: model is NULL");
        return NULL;
    }
    if (check_tokens(m, tokens, b, "seq_forward") != VIT_OK)
        return NULL;
    vit_tape_reset(m->tape);
    int was = vit_tape_set_grad(m->tape, 0); /* evaluation: nothing recorded */
    vit_tensor *y = forward_graph(m, tokens, b);
    vit_tape_set_grad(m->tape, was);
    return y ? y->data : NULL;
}

/* ---- Training -------------------------------------------------------------- */

int seq_train_step(seq_model *m, const int *tokens, const int *labels, int b, double lr,
                   double *loss)
{
    if (!m || !labels)
        return vit_set_error(VIT_EINVAL, "seq_train_step: model or labels is NULL");
    if (check_tokens(m, tokens, b, "seq_train_step") != VIT_OK)
        return VIT_EINVAL;
    const int k = m->cfg.len;
    for (int i = 0; i < b * k; i++)
        if (labels[i] < 0 || labels[i] >= SEQ_DIGITS)
            return vit_set_error(VIT_EINVAL, "seq_train_step: a label is outside 0..9");
    vit_tape *t = m->tape;
    vit_tape_reset(t);
    vit_tape_set_grad(t, 1);
    vit_params_zero_grads(m->params);
    /* Loss: mean cross-entropy over the b*k answer positions k .. 2k-1 of
     * the logits as rows [b*T, 10]; every other position's label is the
     * ignore label, so it counts for nothing and gets no gradient. */
    vit_tensor *y = forward_graph(m, tokens, b);
    int T = y ? y->shape[1] : 0;
    int *all = y ? m->row_labels : NULL; /* b <= batch, checked by check_tokens */
    for (int i = 0; i < b * T; i++) {
        int p = i % T;
        all[i] = p >= k && p < 2 * k ? labels[i / T * k + p - k] : SEQ_IGNORE;
    }
    vit_tensor *z = vit_op_reshape(t, y, 2, (const int[]){b * T, SEQ_DIGITS});
    vit_tensor *l = all ? vit_op_cross_entropy_masked(t, z, all, NULL, SEQ_IGNORE, 0, NULL) : NULL;
    int rc = l ? vit_tape_backward(t, l) : vit_tape_status(t);
    int ng = 0;
    const vit_param_group *g = vit_params_groups(m->params, &ng);
    if (rc == VIT_OK)
        rc = vit_adamw_step(&m->opt, vit_params_values(m->params), vit_params_grads(m->params),
                            g, ng, lr);
    if (rc != VIT_OK)
        return rc; /* vit_last_error() gives the message of the failing call */
    if (loss)
        *loss = (double)l->data[0];
    return VIT_OK;
}

int seq_train(seq_model *m, FILE *log, int every)
{
    if (!m)
        return vit_set_error(VIT_EINVAL, "seq_train: model is NULL");
    const seq_config *c = &m->cfg;
    const int B = c->batch;
    int *tokens = malloc((size_t)B * 2 * c->len * sizeof *tokens);
    int *labels = malloc((size_t)B * c->len * sizeof *labels);
    if (!tokens || !labels) {
        free(tokens);
        free(labels);
        return vit_set_error(VIT_ENOMEM, "seq_train: out of memory");
    }
    vit_rng rng;
    vit_rng_seed(&rng, c->seed ^ 0x5eedda7aULL); /* data stream apart from the init */
    const long warmup = c->steps / 20;
    int rc = VIT_OK;
    double avg = 0;
    for (long s = 0; s < c->steps && rc == VIT_OK; s++) {
        double lr = vit_lr_at(s, c->steps, warmup, c->lr, c->lr / 10), loss = 0;
        seq_make_batch(c, &rng, 0, B, tokens, labels);
        rc = seq_train_step(m, tokens, labels, B, lr, &loss);
        avg += loss;
        if (rc == VIT_OK && log && every > 0 && (s + 1) % every == 0) {
            fprintf(log, "step %5ld  loss %.4f  lr %.2e\n", s + 1, avg / every, lr);
            avg = 0;
        }
    }
    free(tokens);
    free(labels);
    return rc;
}

/* ---- Evaluation ------------------------------------------------------------ */

static int argmax(const vit_real *x, int n)
{
    int best = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[best])
            best = i;
    return best;
}

int seq_evaluate(seq_model *m, int n, unsigned long long seed, double *seq_acc,
                 double *tok_acc)
{
    if (!m || n < 1)
        return vit_set_error(VIT_EINVAL, "seq_evaluate: model is NULL or n < 1");
    const seq_config *c = &m->cfg;
    const int k = c->len, T = m->T, B = c->batch;
    int *tokens = malloc((size_t)B * T * sizeof *tokens);
    int *labels = malloc((size_t)B * k * sizeof *labels);
    int *right = malloc((size_t)B * sizeof *right);
    if (!tokens || !labels || !right) {
        free(tokens);
        free(labels);
        free(right);
        return vit_set_error(VIT_ENOMEM, "seq_evaluate: out of memory");
    }
    vit_rng rng;
    vit_rng_seed(&rng, seed);
    long seq_ok = 0, tok_ok = 0;
    int rc = VIT_OK;
    for (int done = 0; done < n && rc == VIT_OK; done += B) {
        int b = n - done < B ? n - done : B;
        seq_make_batch(c, &rng, 1, b, tokens, labels);
        /* Hide the answer: only the digits and the separator are given; the
         * model's own predictions are written into positions k+1 .. 2k-1.
         * Until then those positions hold random digits, which a causal
         * model never sees but a model that peeks ahead is misled by. */
        for (int i = 0; i < b; i++)
            for (int t = k + 1; t < T; t++)
                tokens[(size_t)i * T + t] = (int)vit_rng_below(&rng, SEQ_DIGITS);
        memset(right, 0, (size_t)b * sizeof *right);
        for (int j = 0; j < k && rc == VIT_OK; j++) {
            const vit_real *logits = seq_forward(m, tokens, b);
            if (!logits) {
                /* a forward that failed on the tape, or refused the tokens */
                rc = vit_tape_status(m->tape) != VIT_OK ? vit_tape_status(m->tape) : VIT_EINVAL;
                break;
            }
            for (int i = 0; i < b; i++) {
                int p = argmax(logits + ((size_t)i * T + k + j) * SEQ_DIGITS, SEQ_DIGITS);
                if (j + 1 < k)
                    tokens[(size_t)i * T + k + 1 + j] = p;
                if (p == labels[(size_t)i * k + j]) {
                    tok_ok++;
                    right[i]++;
                }
            }
        }
        for (int i = 0; i < b; i++)
            seq_ok += right[i] == k;
    }
    free(tokens);
    free(labels);
    free(right);
    if (rc != VIT_OK)
        return rc;
    if (seq_acc)
        *seq_acc = (double)seq_ok / n;
    if (tok_acc)
        *tok_acc = (double)tok_ok / ((double)n * k);
    return VIT_OK;
}
