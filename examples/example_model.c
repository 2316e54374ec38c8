#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <vit/vit.h>

/* Does a padded sequence of tokens 0..15 contain token 15?  Real lengths 2..16. */
enum { V = 16, T = 16, D = 16, HEADS = 2, B = 32, STEPS = 100, N_TEST = 500, NEEDLE = 15 };

/* n sequences; label 1 iff NEEDLE is among the real tokens.  Padding slots
 * hold junk ids (the needle too), as a reused buffer would: only the mask
 * tells the model to ignore them. */
static void make_batch(vit_rng *r, int n, int *ids, unsigned char *valid, int *labels)
{
    for (int b = 0; b < n; b++) {
        int len = 2 + (int)vit_rng_below(r, T - 1);
        labels[b] = (int)vit_rng_below(r, 2);
        for (int t = 0; t < T; t++) {
            valid[b * T + t] = t < len;
            ids[b * T + t] = (int)vit_rng_below(r, t < len ? NEEDLE : V);
        }
        if (labels[b])
            ids[b * T + (int)vit_rng_below(r, (uint32_t)len)] = NEEDLE;
    }
}

/* The custom op: y[r, j] = x[r, j] * sigmoid(g[j]), a learnable gate per
 * feature.  The forward saves sigmoid(g) in the tape's arena and leaves the
 * pointer in its copy of the context, where the backward finds it. */
typedef struct gate_ctx {
    vit_real *s;
} gate_ctx;

static int gate_forward(const vit_op_call *c)
{
    gate_ctx *ctx = c->ctx;
    const vit_tensor *x = c->in[0], *g = c->in[1];
    int d = g->shape[0];
    ctx->s = vit_tape_alloc(c->tape, (size_t)d * sizeof *ctx->s);
    if (!ctx->s)
        return VIT_ENOMEM;
    for (int j = 0; j < d; j++)
        ctx->s[j] = (vit_real)(1 / (1 + exp(-(double)g->data[j])));
    for (size_t i = 0; i < x->size; i++)
        c->out->data[i] = x->data[i] * ctx->s[i % (size_t)d];
    return VIT_OK;
}

/* Adds (+=) into the inputs' gradients; din[k] is NULL when input k needs none. */
static int gate_backward(const vit_op_call *c)
{
    const gate_ctx *ctx = c->ctx;
    const vit_tensor *x = c->in[0];
    size_t d = (size_t)c->in[1]->shape[0];
    for (size_t i = 0; i < x->size; i++) {
        vit_real s = ctx->s[i % d];
        if (c->din[0])
            c->din[0][i] += c->dout[i] * s;
        if (c->din[1])
            c->din[1][i % d] += c->dout[i] * x->data[i] * s * (1 - s);
    }
    return VIT_OK;
}

static vit_tensor *gate(vit_tape *tape, vit_tensor *x, vit_tensor *g)
{
    if (!x || !g)
        return NULL;
    gate_ctx ctx = {NULL};
    vit_tensor *in[2] = {x, g};
    return vit_op_custom(tape, "gate", 2, in, x->ndim, x->shape, gate_forward, gate_backward,
                         &ctx, sizeof ctx);
}

/* Indices of the model's tensors in its vit_params. */
typedef struct model {
    vit_params *p;
    int embed, attn, gate, head_w, head_b;
} model;

/* Logits [n, 2] of n sequences; leaves with gradients when grad != 0. */
static vit_tensor *forward(vit_tape *tape, model *m, const int *ids, const unsigned char *valid,
                           int n, int grad)
{
    vit_mha cfg = {.batch = n, .n_q = T, .n_k = T, .d_model = D, .heads = HEADS, .has_bias = 1};
    cfg.mask.key_valid = valid;                  /* no query attends to padding */
    vit_tensor *x = vit_op_embedding(tape, vit_params_leaf(m->p, tape, m->embed, grad), ids, 2,
                                     (int[]){n, T});
    vit_tensor *a = vit_op_mha(tape, &cfg, vit_params_leaf_range(m->p, tape, m->attn, 4, grad),
                               x, x, NULL);
    vit_tensor *h = gate(tape, vit_op_add(tape, x, a), vit_params_leaf(m->p, tape, m->gate, grad));
    vit_tensor *pooled = vit_op_masked_mean(tape, h, valid);   /* mean of the real tokens */
    return vit_op_linear(tape, pooled, vit_params_leaf(m->p, tape, m->head_w, grad),
                         vit_params_leaf(m->p, tape, m->head_b, grad));
}

/* The attention's tensors in the flat order vit_op_mha takes for
 * self-attention: W_QKV = [W_Q | W_K | W_V] [D, 3D], W_O [D, D], then the
 * biases [b_Q | b_K | b_V] and b_O. */
static const char *const attn_names[4] = {"attn.w_qkv", "attn.w_o", "attn.b_qkv", "attn.b_o"};

int main(int argc, char **argv)
{
    /* Parameters by name; weight matrices are decayed. */
    model m = {.p = vit_params_new()};
    m.embed = vit_params_add(m.p, "embed", 2, (int[]){V, D}, VIT_INIT_NORMAL, 1.0, 0);
    m.attn = m.embed + 1;
    for (int i = 0; i < 4; i++) {
        int width = i % 2 == 0 ? 3 * D : D; /* the joint Q/K/V parts are 3D wide */
        if (i < 2)
            vit_params_add(m.p, attn_names[i], 2, (int[]){D, width}, VIT_INIT_NORMAL, 0.25, 1);
        else
            vit_params_add(m.p, attn_names[i], 1, (int[]){width}, VIT_INIT_ZERO, 0, 0);
    }
    m.gate = vit_params_add(m.p, "gate", 1, (int[]){D}, VIT_INIT_ZERO, 0, 0);
    m.head_w = vit_params_add(m.p, "head.w", 2, (int[]){D, 2}, VIT_INIT_NORMAL, 0.02, 1);
    m.head_b = vit_params_add(m.p, "head.b", 1, (int[]){2}, VIT_INIT_ZERO, 0, 0);
    vit_rng init_rng, train_rng, test_rng;
    vit_rng_seed(&init_rng, 1);
    vit_rng_seed(&train_rng, 2);
    vit_rng_seed(&test_rng, 3);
    vit_adamw opt = {0};
    vit_tape *tape = vit_tape_new();
    int rc = 1;                                  /* until the end is reached */
    /* A failed add leaves p as it was, so 8 tensors means every add worked. */
    if (vit_params_tensor_count(m.p) != 8 || vit_params_alloc(m.p) != VIT_OK ||
        vit_params_init(m.p, &init_rng) != VIT_OK || !tape ||
        vit_adamw_init(&opt, vit_params_count(m.p), 0.9, 0.999, 1e-8, 0.01) != VIT_OK)
        goto done;
    int ngroups;
    const vit_param_group *groups = vit_params_groups(m.p, &ngroups);

    int ids[N_TEST * T], labels[N_TEST];
    unsigned char valid[N_TEST * T];
    for (int step = 0; step < STEPS; step++) {
        make_batch(&train_rng, B, ids, valid, labels);
        vit_tape_reset(tape);
        vit_params_zero_grads(m.p);
        vit_tensor *loss = vit_op_cross_entropy(tape, forward(tape, &m, ids, valid, B, 1), labels,
                                                0, NULL);
        if (vit_tape_backward(tape, loss) != VIT_OK ||
            vit_adamw_step(&opt, vit_params_values(m.p), vit_params_grads(m.p), groups, ngroups,
                           vit_lr_at(step, STEPS, 10, 0.003, 0.0)) != VIT_OK)
            goto done;
        if (step == 0 || step == STEPS - 1)
            printf("step %d: training loss %.4f\n", step, (double)loss->data[0]);
    }

    /* Held-out sequences in no-grad mode: same forward, nothing recorded. */
    vit_tape_reset(tape);
    vit_tape_set_grad(tape, 0);
    make_batch(&test_rng, N_TEST, ids, valid, labels);
    vit_tensor *logits = forward(tape, &m, ids, valid, N_TEST, 0);
    vit_tensor *loss = vit_op_cross_entropy(tape, logits, labels, 0, NULL);
    if (!loss)
        goto done;
    int correct = 0;
    for (int b = 0; b < N_TEST; b++)
        correct += (logits->data[2 * b + 1] > logits->data[2 * b]) == labels[b];
    printf("held-out: loss %.4f, accuracy %.3f (%d of %d)\n", (double)loss->data[0],
           (double)correct / N_TEST, correct, N_TEST);
    printf("first held-out sequence: label %d, logits %.4f %.4f\n", labels[0],
           (double)logits->data[0], (double)logits->data[1]);

    /* Optionally save the trained tensors under their names. */
    if (argc > 1) {
        vit_ckpt_tensor t[16];
        int n = vit_params_tensor_count(m.p);
        for (int i = 0; i < n; i++) {
            const vit_param_tensor *d = vit_params_tensor(m.p, i);
            t[i] = (vit_ckpt_tensor){.ndim = d->ndim, .data = vit_params_value_of(m.p, i)};
            snprintf(t[i].name, sizeof t[i].name, "%s", d->name);
            for (int k = 0; k < d->ndim; k++)
                t[i].dims[k] = d->shape[k];
        }
        vit_ckpt c = {.step = STEPS, .ntensors = n, .tensors = t};
        if (vit_ckpt_write(argv[1], &c) != VIT_OK)
            goto done;
    }
    rc = 0;
done:
    if (rc)
        fprintf(stderr, "example_model: %s\n", vit_last_error());
    vit_tape_free(tape);
    vit_adamw_free(&opt);
    vit_params_free(m.p);
    return rc;
}
