/* The architecture "convmlp" (examples/convmlp.c): two convolutions, mean
 * pooling and an MLP, with its own config keys width1, width2, hidden. */
#ifndef EXAMPLES_CONVMLP_H
#define EXAMPLES_CONVMLP_H

#include <vit/vit.h>

/* Its vit_arch (static storage), for vit_arch_register. */
const vit_arch *convmlp_arch(void);

#endif
