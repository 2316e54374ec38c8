/*
 * seq_model.h - a small causal sequence model (a decoder-only transformer)
 * written on libvit's tape from the public API only (<vit/vit.h>), with its
 * own training loop: parameters in a vit_params, forward code on the tape,
 * the backward from vit_tape_backward, evaluation in no-grad mode.
 * examples/vit_seq is its command-line front end; tests/test_seq drives it too,
 * and test_install builds it against an installed libvit with pkg-config's
 * flags alone (tests/seq_consumer.c).
 *
 * The task: k digits, a separator, then the same digits reversed (or
 * sorted).  With k = 3 and the input 4 0 7 the sequence the model reads is
 *
 *   position   0  1  2  3    4  5
 *   token      4  0  7  SEP  7  0      (reverse: the answer is 7 0 4)
 *   target     -  -  -  7    0  4
 *
 * so T = 2k tokens, and the logits at positions k .. 2k-1 predict the k
 * answer digits.  Training uses teacher forcing (the true answer digits are
 * the inputs after the separator); evaluation is autoregressive: the model
 * reads its own previous predictions, which only works if the causal mask
 * kept it from peeking at the next input during training.
 *
 * Layers (pre-norm, as in the ViT blocks):
 *   tokens [B, T] -> lookup in wte [V, D] + wpe [T, D]         x [B, T, D]
 *   layers x:  x = x + MHA_causal(LN1(x));  x = x + W2 GELU(W1 LN2(x) + b1) + b2
 *   -> LN_f -> linear head [D, 10]                        logits [B, T, 10]
 *   loss = mean cross-entropy over the B*k answer positions (the logits at
 *   positions k .. 2k-1; the others carry the ignore label of
 *   vit_op_cross_entropy_masked).
 *
 * Buffers are row-major with the batch first, like every libvit buffer.
 * These are the example's own functions, not part of the library's API; a seq_model is used
 * by one thread at a time.  Errors are the library's: a VIT_E* code (or
 * NULL) and the message in vit_last_error() on the failing thread, the
 * model's own checks set with vit_set_error like the kernels'.
 */
#ifndef VIT_TOOLS_SEQ_MODEL_H
#define VIT_TOOLS_SEQ_MODEL_H

#include <stdio.h>

#include "vit/vit.h"

enum { SEQ_REVERSE = 0, SEQ_SORT = 1 };
enum { SEQ_DIGITS = 10, SEQ_SEP = 10, SEQ_VOCAB = 11 };

typedef struct seq_config {
    int task;       /* SEQ_REVERSE or SEQ_SORT */
    int len;        /* k, digits per input (1 .. 16); T = 2k */
    int dim;        /* D, token width */
    int heads;      /* attention heads, divides dim */
    int layers;     /* number of blocks */
    int mlp;        /* hidden width of the MLP */
    int batch;      /* sequences per training step (and the largest batch
                       seq_forward accepts) */
    int steps;      /* optimizer steps */
    double lr;      /* peak AdamW learning rate (warm-up, then cosine to lr/10) */
    int causal;     /* 1: causal mask (the model); 0 only to show what breaks */
    unsigned long long seed;
} seq_config;

/* Fills in the defaults: reverse, k = 5, D = 64, 4 heads, 2 layers, MLP 128,
 * batch 64, 500 steps, lr 3e-3, causal, seed 1. */
void seq_config_default(seq_config *cfg);

/* Checks the fields: VIT_OK, or VIT_EINVAL with *msg (if msg is not NULL)
 * pointing at a static message naming the field. */
int seq_config_check(const seq_config *cfg, const char **msg);

typedef struct seq_model seq_model;

/* A model for cfg with parameters drawn from cfg->seed (weights truncated
 * normal with std 0.02, output projections scaled down by sqrt(2 layers),
 * biases 0, layer-norm gains 1; vit_params_init).  NULL if cfg is invalid or
 * memory runs out. */
seq_model *seq_model_new(const seq_config *cfg);
void seq_model_free(seq_model *m);

/* Number of parameters. */
size_t seq_model_param_count(const seq_model *m);

/* Makes n example sequences: tokens [n, 2k] (input digits, separator, the
 * answer shifted right: the teacher-forcing input) and labels [n, k] (the
 * answer).  split 0 draws from the training inputs, split 1 from the
 * held-out ones: every input digit string belongs to exactly one split (one
 * in eight, by a hash of the digits, is held out), so held-out accuracy is
 * measured on strings never seen in training. */
void seq_make_batch(const seq_config *cfg, vit_rng *rng, int split, int n,
                    int *tokens, int *labels);

/* Forward pass over tokens [b, T] (b <= cfg->batch; token values 0..10), in
 * no-grad mode.  Returns the logits [b, T, 10], owned by the model and valid
 * until its next forward or training step, or NULL on error (message in
 * vit_last_error()). */
const vit_real *seq_forward(seq_model *m, const int *tokens, int b);

/* One training step on a batch of tokens [b, T] and labels [b, k]: forward,
 * loss, backward, AdamW with learning rate lr.  *loss gets the mean
 * cross-entropy.  VIT_OK or the failing kernel's code. */
int seq_train_step(seq_model *m, const int *tokens, const int *labels, int b, double lr,
                   double *loss);

/* Trains for cfg->steps steps on fresh training-split batches, printing the
 * loss every `every` steps to log (NULL or every <= 0: quiet). */
int seq_train(seq_model *m, FILE *log, int every);

/* Autoregressive accuracy on n held-out sequences (drawn with a generator
 * seeded by `seed`): the model sees the input digits and the separator and
 * feeds back its own greedy predictions.  *seq_acc gets the fraction of
 * sequences with every answer digit right, *tok_acc the fraction of answer
 * digits right; either may be NULL. */
int seq_evaluate(seq_model *m, int n, unsigned long long seed, double *seq_acc,
                 double *tok_acc);

#endif
