/*
 * vit_import - turn a safetensors file with timm's VisionTransformer names
 * (written by vit_export, or by PyTorch with the same metadata) into a
 * checkpoint that vit_train --resume, vit_eval and vit_predict read.  The
 * work is vit_safetensors_import (vit/safetensors.h).
 */
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "vit/vit.h"

static const char *prog = "vit_import";

int main(int argc, char **argv)
{
    cli_ignore_file_size_signal();
    const char *in = NULL, *out = NULL;
    int force = 0;
    static const cli_flag flags[] = {{"--out", 1}, {"--force", 0}, {"--help", 0}, {"--version", 0},
                                     {NULL, 0}};
    if (!cli_normalize(prog, &argc, &argv, flags, 0))
        return 2;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            printf("usage: vit_import MODEL.safetensors --out CKPT [--force]\n"
                   "Reads float32 weights under timm's VisionTransformer names (the layout\n"
                   "vit_export writes) and the model config from the file's __metadata__\n"
                   "(dim, depth, heads, mlp, patch, image_height, image_width, channels,\n"
                   "classes, pool or global_pool), checks every tensor's name, dtype and\n"
                   "shape, and writes CKPT atomically with a fresh optimizer state (zero\n"
                   "AdamW moments, step 0), so that vit_train --resume CKPT trains on.\n"
                   "The metadata's class_names come back into CKPT.  An existing CKPT (a run's\n"
                   "checkpoint, with its optimizer state) is refused unless --force.\n");
            return 0;
        }
        if (strcmp(a, "--version") == 0) {
            printf("vit_import %s (%s)\n", vit_version(), VIT_REAL_NAME);
            return 0;
        }
        if (strcmp(a, "--force") == 0) {
            force = 1;
        } else if (strcmp(a, "--out") == 0) {
            out = argv[++i]; /* cli_normalize checked that a value follows */
        } else if (in) {
            fprintf(stderr, "%s: unexpected argument '%s'\n", prog, a);
            return 2;
        } else {
            in = a;
        }
    }
    if (!in || !out) {
        fprintf(stderr, "%s: %s (see --help)\n", prog,
                !in ? "no safetensors file given" : "no --out checkpoint given");
        return 2;
    }
    if (cli_refuse_existing(prog, NULL, out, force))
        return 1;
    vit_model *m = NULL;
    if (vit_safetensors_import(in, out, &m))
        return cli_fail(prog, NULL);
    const vit_config *c = vit_model_config(m);
    if (vit_model_arch(m) != vit_arch_vit())
        printf("wrote %s: %zu parameters (%s, %dx%dx%d images, %d classes), fresh optimizer "
               "state\n", out, vit_model_param_count(m), vit_model_arch(m)->name, c->image_height,
               c->image_width, c->channels, c->classes);
    else
        printf("wrote %s: %zu parameters (dim %d, depth %d, heads %d, %dx%dx%d images, %d "
               "classes, pool %s), fresh optimizer state\n", out, vit_model_param_count(m),
               c->dim, c->depth, c->heads, c->image_height, c->image_width, c->channels,
               c->classes, c->pool == VIT_POOL_MEAN ? "mean" : "cls");
    vit_model_free(m);
    return 0;
}
