/*
 * tests/attention_util.h - what the two attention suites (test_attention,
 * test_attention_tiled) both need: a problem's shape, the mask read straight
 * off its definition, and the argument-error check.
 */
#ifndef VIT_TESTS_ATTENTION_UTIL_H
#define VIT_TESTS_ATTENTION_UTIL_H

#include <check.h>
#include <string.h>

#include "vit/attention.h"

/* call must fail with VIT_EINVAL and a non-empty message that mentions
 * needle. */
#define EXPECT_EINVAL(call, needle)                                                  \
    do {                                                                             \
        int rc_ = (call);                                                            \
        ck_assert_msg(rc_ == VIT_EINVAL, "%s returned %d", #call, rc_);              \
        ck_assert_msg(strlen(vit_last_error()) > 0, "%s: empty message", #call);     \
        ck_assert_msg(strstr(vit_last_error(), (needle)) != NULL,                    \
                      "%s: message \"%s\" does not mention \"%s\"", #call,           \
                      vit_last_error(), (needle));                                   \
    } while (0)

/* A vit_sdpa of B items, H heads, nq queries, nk keys, head sizes dk and
 * dv; everything else zero (no mask, no bias, the default scale). */
vit_sdpa sdpa_shape(int B, int H, int nq, int nk, int dk, int dv);

/* Whether query i of item b may see key j under a's mask, read straight
 * off the mask's definition (causal, key_valid, allowed). */
int ref_allowed(const vit_sdpa *a, int b, int i, int j);

#endif
