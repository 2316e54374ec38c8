/*
 * seq_model.c - a decoder-only transformer on digit sequences, written the
 * way a user would lift libvit's layers into their own training code: only
 * the public kernels (include/vit), called directly, each forward next to the
 * matching backward.  The one piece the library lacks, the token lookup, is
 * a gather here and a scatter-add in the backward.  See seq_model.h.
 */
#include "seq_model.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* ---- Errors ------------------------------------------------------------ */

static char seq_msg[160];

const char *seq_error(void) { return seq_msg[0] ? seq_msg : vit_last_error(); }

static int seq_failf(const char *what)
{
    snprintf(seq_msg, sizeof seq_msg, "%s", what);
    return VIT_EINVAL;
}

/* Kernel calls: on failure return their code; vit_last_error() has the text. */
#define TRY(call)                        \
    do {                                 \
        int rc_ = (call);                \
        if (rc_ != VIT_OK) {             \
            seq_msg[0] = '\0';           \
            return rc_;                  \
        }                                \
    } while (0)

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

/* ---- Parameters ---------------------------------------------------------- */

/* Pointers into a flat buffer (parameters or their gradients, laid out
 * alike).  Per layer: ln1 gain/shift, the attention layer's own flat block
 * (vit/attention.h), ln2, the MLP. */
typedef struct layer_views {
    vit_real *ln1_g, *ln1_b, *attn, *ln2_g, *ln2_b, *fc_w, *fc_b, *proj_w, *proj_b;
} layer_views;

typedef struct views {
    vit_real *wte, *wpe;            /* [V, D], [T, D] */
    layer_views *layer;             /* [layers] */
    vit_real *lnf_g, *lnf_b;        /* [D] */
    vit_real *head_w, *head_b;      /* [D, 10], [10] */
} views;

/* Saved forward values of one block, each [B*T, width] (rows = tokens). */
typedef struct layer_acts {
    vit_real *x_in, *ln1, *mean1, *rstd1, *cache, *att, *x_mid;
    vit_real *ln2, *mean2, *rstd2, *fc, *gl, *proj;
} layer_acts;

struct seq_model {
    seq_config cfg;
    int T, D, F;
    vit_mha mha;                 /* shape at the largest batch */
    size_t n_attn, n_params;
    vit_real *params, *grads;    /* flat, n_params each */
    views p, g;
    layer_acts *act;             /* [layers] */
    vit_real *x_fin, *lnf, *meanf, *rstdf, *logits;
    /* backward scratch */
    vit_real *dres, *dtmp, *dF1, *dF2, *dlogits, *work;
    vit_real *sel_logits, *sel_probs, *sel_dlogits; /* [B*k, 10] answer rows */
    int *sel_labels;
    vit_adamw opt;
    long step;
    void *block;                 /* every buffer above comes from this one allocation */
};

/* The attention layer's shape for a batch of b sequences. */
static vit_mha mha_for(const seq_model *m, int b)
{
    vit_mha a = m->mha;
    a.batch = b;
    return a;
}

/* Lays out a flat buffer; returns the number of reals it needs. */
static size_t map_views(const seq_model *m, vit_real *base, views *v)
{
    size_t o = 0;
    const size_t D = (size_t)m->D, F = (size_t)m->F;
#define TAKE(ptr, count) do { (ptr) = base ? base + o : NULL; o += (count); } while (0)
    TAKE(v->wte, SEQ_VOCAB * D);
    TAKE(v->wpe, (size_t)m->T * D);
    for (int l = 0; l < m->cfg.layers; l++) {
        layer_views *L = &v->layer[l];
        TAKE(L->ln1_g, D); TAKE(L->ln1_b, D);
        TAKE(L->attn, m->n_attn);
        TAKE(L->ln2_g, D); TAKE(L->ln2_b, D);
        TAKE(L->fc_w, D * F); TAKE(L->fc_b, F);
        TAKE(L->proj_w, F * D); TAKE(L->proj_b, D);
    }
    TAKE(v->lnf_g, D); TAKE(v->lnf_b, D);
    TAKE(v->head_w, D * SEQ_DIGITS); TAKE(v->head_b, SEQ_DIGITS);
#undef TAKE
    return o;
}

/* Sizes of every buffer, in order, so one allocation holds them all. */
typedef struct carve { char *base; size_t used; } carve;

static void *take(carve *c, size_t bytes)
{
    size_t at = (c->used + 63) & ~(size_t)63; /* cache-line aligned slices */
    c->used = at + bytes;
    return c->base ? c->base + at : NULL;
}
#define REALS(c, n) ((vit_real *)take((c), (size_t)(n) * sizeof(vit_real)))

static void carve_all(seq_model *m, carve *c)
{
    const size_t N = (size_t)m->cfg.batch * m->T, D = (size_t)m->D, F = (size_t)m->F;
    const size_t sel = (size_t)m->cfg.batch * m->cfg.len * SEQ_DIGITS;
    m->params = REALS(c, m->n_params);
    m->grads = REALS(c, m->n_params);
    m->p.layer = take(c, (size_t)m->cfg.layers * sizeof(layer_views));
    m->g.layer = take(c, (size_t)m->cfg.layers * sizeof(layer_views));
    m->act = take(c, (size_t)m->cfg.layers * sizeof(layer_acts));
    for (int l = 0; l < m->cfg.layers; l++) {
        layer_acts a;
        a.x_in = REALS(c, N * D); a.ln1 = REALS(c, N * D);
        a.mean1 = REALS(c, N); a.rstd1 = REALS(c, N);
        a.cache = REALS(c, vit_mha_cache_size(&m->mha));
        a.att = REALS(c, N * D); a.x_mid = REALS(c, N * D); a.ln2 = REALS(c, N * D);
        a.mean2 = REALS(c, N); a.rstd2 = REALS(c, N);
        a.fc = REALS(c, N * F); a.gl = REALS(c, N * F); a.proj = REALS(c, N * D);
        if (m->act)
            m->act[l] = a;
    }
    m->x_fin = REALS(c, N * D); m->lnf = REALS(c, N * D);
    m->meanf = REALS(c, N); m->rstdf = REALS(c, N);
    m->logits = REALS(c, N * SEQ_DIGITS);
    m->dres = REALS(c, N * D); m->dtmp = REALS(c, N * D);
    m->dF1 = REALS(c, N * F); m->dF2 = REALS(c, N * F);
    m->dlogits = REALS(c, N * SEQ_DIGITS);
    m->work = REALS(c, vit_mha_work_size(&m->mha));
    m->sel_logits = REALS(c, sel); m->sel_probs = REALS(c, sel); m->sel_dlogits = REALS(c, sel);
    m->sel_labels = take(c, (size_t)m->cfg.batch * m->cfg.len * sizeof(int));
}

static void fill_normal(vit_real *x, size_t n, double std, vit_rng *r)
{
    for (size_t i = 0; i < n; i++)
        x[i] = (vit_real)(std * vit_rng_normal(r));
}

static void fill_const(vit_real *x, size_t n, vit_real v)
{
    for (size_t i = 0; i < n; i++)
        x[i] = v;
}

/* GPT-2's recipe: small normal weights, and the two projections that write
 * into the residual stream scaled by 1/sqrt(2 layers) so its variance does
 * not grow with depth. */
static void init_params(seq_model *m)
{
    vit_rng r;
    vit_rng_seed(&r, m->cfg.seed);
    const size_t D = (size_t)m->D, F = (size_t)m->F;
    const double std = 0.02, out_std = 0.02 / sqrt(2.0 * m->cfg.layers);
    memset(m->params, 0, m->n_params * sizeof *m->params);
    fill_normal(m->p.wte, SEQ_VOCAB * D, std, &r);
    fill_normal(m->p.wpe, (size_t)m->T * D, std, &r);
    for (int l = 0; l < m->cfg.layers; l++) {
        layer_views *L = &m->p.layer[l];
        vit_mha_views a;
        vit_mha_views_of(&m->mha, L->attn, &a);
        fill_const(L->ln1_g, D, 1);
        fill_const(L->ln2_g, D, 1);
        fill_normal(a.w_q, D * D, std, &r);
        fill_normal(a.w_k, D * D, std, &r);
        fill_normal(a.w_v, D * D, std, &r);
        fill_normal(a.w_o, D * D, out_std, &r);
        fill_normal(L->fc_w, D * F, std, &r);
        fill_normal(L->proj_w, F * D, out_std, &r);
    }
    fill_const(m->p.lnf_g, D, 1);
    fill_normal(m->p.head_w, D * SEQ_DIGITS, std, &r);
}

seq_model *seq_model_new(const seq_config *cfg)
{
    const char *msg;
    if (!cfg || seq_config_check(cfg, &msg) != VIT_OK) {
        seq_failf(cfg ? msg : "cfg is NULL");
        return NULL;
    }
    seq_model *m = calloc(1, sizeof *m);
    if (!m) {
        seq_failf("out of memory");
        return NULL;
    }
    m->cfg = *cfg;
    m->T = 2 * cfg->len;
    m->D = cfg->dim;
    m->F = cfg->mlp;
    m->mha = (vit_mha){.batch = cfg->batch, .n_q = m->T, .n_k = m->T, .d_model = m->D,
                       .heads = cfg->heads, .has_bias = 1};
    m->mha.mask.causal = cfg->causal;
    m->n_attn = vit_mha_param_count(&m->mha);
    views probe = {0};
    layer_views *tmp = calloc((size_t)cfg->layers, sizeof *tmp);
    if (!tmp || m->n_attn == 0) {
        if (!tmp)
            seq_failf("out of memory");
        free(tmp);
        free(m);
        return NULL;
    }
    probe.layer = tmp;
    m->n_params = map_views(m, NULL, &probe);
    free(tmp);

    carve c = {NULL, 0};
    carve_all(m, &c);            /* first pass: sizes only */
    m->block = calloc(1, c.used);
    if (!m->block || vit_adamw_init(&m->opt, m->n_params, 0.9, 0.98, 1e-8, 0.0) != VIT_OK) {
        seq_failf("out of memory");
        free(m->block);
        free(m);
        return NULL;
    }
    c = (carve){m->block, 0};
    carve_all(m, &c);
    map_views(m, m->params, &m->p);
    map_views(m, m->grads, &m->g);
    init_params(m);
    return m;
}

void seq_model_free(seq_model *m)
{
    if (!m)
        return;
    vit_adamw_free(&m->opt);
    free(m->block);
    free(m);
}

size_t seq_model_param_count(const seq_model *m) { return m ? m->n_params : 0; }

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

/* Token lookup: x[r] = wte[tokens[r]] for the n = b*T rows, then + wpe. */
static int embed_forward(seq_model *m, vit_real *x, const int *tokens, int b)
{
    const size_t D = (size_t)m->D;
    for (size_t r = 0; r < (size_t)b * m->T; r++)
        memcpy(x + r * D, m->p.wte + (size_t)tokens[r] * D, D * sizeof *x);
    return vit_pos_add_forward(x, x, m->p.wpe, b, m->T, m->D);
}

/* Its backward: dwpe += sum over the batch, dwte[tokens[r]] += dx[r]. */
static int embed_backward(seq_model *m, const vit_real *dx, const int *tokens, int b)
{
    const size_t D = (size_t)m->D;
    TRY(vit_pos_add_backward(NULL, m->g.wpe, dx, b, m->T, m->D));
    for (size_t r = 0; r < (size_t)b * m->T; r++) {
        vit_real *dst = m->g.wte + (size_t)tokens[r] * D;
        for (size_t i = 0; i < D; i++)
            dst[i] += dx[r * D + i];
    }
    return VIT_OK;
}

/* One pre-norm block: x_mid = x_in + MHA(LN1(x_in)); out = x_mid + MLP(LN2(x_mid)). */
static int block_forward(seq_model *m, int l, vit_real *out, int b)
{
    const layer_views *P = &m->p.layer[l];
    const layer_acts *a = &m->act[l];
    const int n = b * m->T, D = m->D, F = m->F;
    const size_t nD = (size_t)n * D;
    vit_mha mha = mha_for(m, b);
    TRY(vit_layernorm_forward(a->ln1, a->mean1, a->rstd1, a->x_in, P->ln1_g, P->ln1_b, n, D,
                              VIT_LAYERNORM_EPS));
    TRY(vit_mha_forward(&mha, P->attn, a->att, a->ln1, a->ln1, a->cache));
    TRY(vit_residual_forward(a->x_mid, a->x_in, a->att, nD));
    TRY(vit_layernorm_forward(a->ln2, a->mean2, a->rstd2, a->x_mid, P->ln2_g, P->ln2_b, n, D,
                              VIT_LAYERNORM_EPS));
    TRY(vit_linear_forward(a->fc, a->ln2, P->fc_w, P->fc_b, n, D, F));
    TRY(vit_gelu_forward(a->gl, a->fc, (size_t)n * F));
    TRY(vit_linear_forward(a->proj, a->gl, P->proj_w, P->proj_b, n, F, D));
    return vit_residual_forward(out, a->x_mid, a->proj, nD);
}

/* Its backward.  On entry dres holds d(out); on return d(x_in).  The
 * residual paths need no code: the kernels accumulate into dres. */
static int block_backward(seq_model *m, int l, int b)
{
    const layer_views *P = &m->p.layer[l];
    const layer_views *G = &m->g.layer[l];
    const layer_acts *a = &m->act[l];
    const int n = b * m->T, D = m->D, F = m->F;
    const size_t nD = (size_t)n * D, nF = (size_t)n * F;
    vit_mha mha = mha_for(m, b);
    memset(m->dF2, 0, nF * sizeof *m->dF2);
    TRY(vit_linear_backward(m->dF2, G->proj_w, G->proj_b, m->dres, a->gl, P->proj_w, n, F, D));
    memset(m->dF1, 0, nF * sizeof *m->dF1);
    TRY(vit_gelu_backward(m->dF1, m->dF2, a->fc, nF));
    memset(m->dtmp, 0, nD * sizeof *m->dtmp);
    TRY(vit_linear_backward(m->dtmp, G->fc_w, G->fc_b, m->dF1, a->ln2, P->fc_w, n, D, F));
    TRY(vit_layernorm_backward(m->dres, G->ln2_g, G->ln2_b, m->dtmp, a->x_mid, a->mean2,
                               a->rstd2, P->ln2_g, n, D));
    /* Self-attention: the same buffer receives the query and key/value parts. */
    memset(m->dtmp, 0, nD * sizeof *m->dtmp);
    TRY(vit_mha_backward(&mha, P->attn, G->attn, m->dtmp, m->dtmp, NULL, m->dres, a->ln1,
                         a->ln1, a->cache, m->work));
    TRY(vit_layernorm_backward(m->dres, G->ln1_g, G->ln1_b, m->dtmp, a->x_in, a->mean1,
                               a->rstd1, P->ln1_g, n, D));
    return VIT_OK;
}

static int forward(seq_model *m, const int *tokens, int b)
{
    const int n = b * m->T;
    seq_msg[0] = '\0';
    if (!tokens || b < 1 || b > m->cfg.batch)
        return seq_failf("seq_forward: tokens is NULL or b is outside 1..batch");
    for (int r = 0; r < n; r++)
        if (tokens[r] < 0 || tokens[r] >= SEQ_VOCAB)
            return seq_failf("seq_forward: a token is outside 0..10");
    TRY(embed_forward(m, m->act[0].x_in, tokens, b));
    for (int l = 0; l < m->cfg.layers; l++) {
        vit_real *out = l + 1 < m->cfg.layers ? m->act[l + 1].x_in : m->x_fin;
        TRY(block_forward(m, l, out, b));
    }
    TRY(vit_layernorm_forward(m->lnf, m->meanf, m->rstdf, m->x_fin, m->p.lnf_g, m->p.lnf_b,
                              n, m->D, VIT_LAYERNORM_EPS));
    return vit_linear_forward(m->logits, m->lnf, m->p.head_w, m->p.head_b, n, m->D,
                              SEQ_DIGITS);
}

const vit_real *seq_forward(seq_model *m, const int *tokens, int b)
{
    if (!m || forward(m, tokens, b) != VIT_OK)
        return NULL;
    return m->logits;
}

/* ---- Loss and backward ---------------------------------------------------- */

/* The logits rows at the answer positions k .. 2k-1 of each sequence, as a
 * [b*k, 10] block for the cross-entropy kernels. */
static void gather_answers(seq_model *m, int b)
{
    const int k = m->cfg.len;
    for (int i = 0; i < b; i++)
        for (int j = 0; j < k; j++)
            memcpy(m->sel_logits + ((size_t)i * k + j) * SEQ_DIGITS,
                   m->logits + ((size_t)i * m->T + k + j) * SEQ_DIGITS,
                   SEQ_DIGITS * sizeof(vit_real));
}

static int backward(seq_model *m, const int *tokens, int b)
{
    const int k = m->cfg.len, n = b * m->T, D = m->D;
    const size_t nD = (size_t)n * D, sel = (size_t)b * k * SEQ_DIGITS;
    memset(m->grads, 0, m->n_params * sizeof *m->grads);
    memset(m->sel_dlogits, 0, sel * sizeof *m->sel_dlogits);
    TRY(vit_cross_entropy_backward(m->sel_dlogits, m->sel_probs, m->sel_labels, b * k,
                                   SEQ_DIGITS, 0, 1));
    /* Scatter back: positions before the separator carry no loss. */
    memset(m->dlogits, 0, (size_t)n * SEQ_DIGITS * sizeof *m->dlogits);
    for (int i = 0; i < b; i++)
        for (int j = 0; j < k; j++)
            memcpy(m->dlogits + ((size_t)i * m->T + k + j) * SEQ_DIGITS,
                   m->sel_dlogits + ((size_t)i * k + j) * SEQ_DIGITS,
                   SEQ_DIGITS * sizeof(vit_real));
    memset(m->dtmp, 0, nD * sizeof *m->dtmp);
    TRY(vit_linear_backward(m->dtmp, m->g.head_w, m->g.head_b, m->dlogits, m->lnf,
                            m->p.head_w, n, D, SEQ_DIGITS));
    memset(m->dres, 0, nD * sizeof *m->dres);
    TRY(vit_layernorm_backward(m->dres, m->g.lnf_g, m->g.lnf_b, m->dtmp, m->x_fin, m->meanf,
                               m->rstdf, m->p.lnf_g, n, D));
    for (int l = m->cfg.layers - 1; l >= 0; l--)
        TRY(block_backward(m, l, b));
    return embed_backward(m, m->dres, tokens, b);
}

int seq_train_step(seq_model *m, const int *tokens, const int *labels, int b, double lr,
                   double *loss)
{
    if (!m || !labels)
        return seq_failf("seq_train_step: model or labels is NULL");
    TRY(forward(m, tokens, b));
    const int k = m->cfg.len;
    for (int i = 0; i < b * k; i++) {
        if (labels[i] < 0 || labels[i] >= SEQ_DIGITS)
            return seq_failf("seq_train_step: a label is outside 0..9");
        m->sel_labels[i] = labels[i];
    }
    gather_answers(m, b);
    vit_real l;
    TRY(vit_cross_entropy_forward(&l, m->sel_probs, m->sel_logits, m->sel_labels, b * k,
                                  SEQ_DIGITS, 0));
    TRY(backward(m, tokens, b));
    vit_param_group all = {0, m->n_params, 0};
    TRY(vit_adamw_step(&m->opt, m->params, m->grads, &all, 1, lr));
    m->step++;
    if (loss)
        *loss = (double)l;
    return VIT_OK;
}

int seq_train(seq_model *m, FILE *log, int every)
{
    if (!m)
        return seq_failf("seq_train: model is NULL");
    const seq_config *c = &m->cfg;
    const int B = c->batch;
    int *tokens = malloc((size_t)B * 2 * c->len * sizeof *tokens);
    int *labels = malloc((size_t)B * c->len * sizeof *labels);
    if (!tokens || !labels) {
        free(tokens);
        free(labels);
        return seq_failf("seq_train: out of memory");
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
        return seq_failf("seq_evaluate: model is NULL or n < 1");
    const seq_config *c = &m->cfg;
    const int k = c->len, T = m->T, B = c->batch;
    int *tokens = malloc((size_t)B * T * sizeof *tokens);
    int *labels = malloc((size_t)B * k * sizeof *labels);
    if (!tokens || !labels) {
        free(tokens);
        free(labels);
        return seq_failf("seq_evaluate: out of memory");
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
        int *right = calloc((size_t)b, sizeof *right);
        if (!right) {
            rc = seq_failf("seq_evaluate: out of memory");
            break;
        }
        for (int j = 0; j < k && rc == VIT_OK; j++) {
            rc = forward(m, tokens, b);
            for (int i = 0; i < b && rc == VIT_OK; i++) {
                int p = argmax(m->logits + ((size_t)i * T + k + j) * SEQ_DIGITS, SEQ_DIGITS);
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
        free(right);
    }
    free(tokens);
    free(labels);
    if (rc != VIT_OK)
        return rc;
    if (seq_acc)
        *seq_acc = (double)seq_ok / n;
    if (tok_acc)
        *tok_acc = (double)tok_ok / ((double)n * k);
    return VIT_OK;
}
