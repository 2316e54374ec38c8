/*
 * Internal: the windowed attention's backward for the tape's op
 * (src/tape/tape_ops_window.c), and its windows' tokens for Swin's
 * attention maps (src/model/model_swin.c).  Private to the library.
 */
#ifndef VIT_WINDOW_INTERNAL_H
#define VIT_WINDOW_INTERNAL_H

#include "vit/attention.h"

/* vit_window_attn_backward, with dq, dk and dv written instead of added
 * to when overwrite is nonzero: every row of the grid belongs to one
 * window of each (item, head), so each of their values is written once
 * (the columns of every head; between rows, past the heads' columns when
 * ld_q exceeds heads * d_k, nothing is written).  For a gradient buffer
 * that nothing has written yet: no clearing first.  The same values as
 * adding them to zeros (only a -0 stays -0 instead of becoming +0). */
int vit_window_attn_backward_to(const vit_window_attn *w, vit_real *dq, vit_real *dk,
                                vit_real *dv, vit_real *dbias, const vit_real *dout,
                                const vit_real *lse, const vit_real *q, const vit_real *k,
                                const vit_real *v, int overwrite);

/* The tokens of window wi of w (windows numbered row by row over the
 * SHIFTED grid, as vit/attention.h lays out lse and probs): tok[p] is the
 * original token number (row-major over the grid) of its position
 * p = py * window_w + px, and label[p] (label may be NULL) its region
 * (Swin's region mask: two positions of a window interact only with equal
 * labels).  w is checked by the caller (vit_window_attn_forward's rules);
 * tok and label hold window_h * window_w ints. */
void vit_window_tokens(const vit_window_attn *w, int wi, int *tok, int *label);

#endif
