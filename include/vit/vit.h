/* vit/vit.h - the whole public API of the vit library in one include. */
#ifndef VIT_VIT_H
#define VIT_VIT_H
#include "vit/core.h"
#include "vit/linear.h"
#include "vit/layernorm.h"
#include "vit/activations.h"
#include "vit/loss.h"
#include "vit/embeddings.h"
#include "vit/pool.h"
#include "vit/attention.h"
#include "vit/tape.h"
#include "vit/model.h"
#include "vit/optim.h"
#include "vit/rng.h"
#include "vit/params.h"
#include "vit/data.h"
#include "vit/checkpoint.h"
#include "vit/augment.h"
#include "vit/train.h"
#include "vit/dist.h"
#include "vit/safetensors.h"
#include "vit/gemm.h"
#endif
