/*
 * vit_export - write a checkpoint's weights as a safetensors file with the
 * tensor names and layouts of timm's VisionTransformer, so PyTorch can load
 * them; optionally also the model's logits on the test split as CSV, which
 * tools/torch_check_export.py compares against PyTorch's.
 */
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "vit/vit.h"

static const char *prog = "vit_export";

static void usage(void)
{
    printf("usage: vit_export CKPT --out MODEL.safetensors [--logits LOGITS.csv]\n"
           "                  [--data SPEC] [--force]\n"
           "Writes the weights of checkpoint CKPT as float32 safetensors under timm's\n"
           "VisionTransformer names (patch_embed.proj, cls_token, pos_embed,\n"
           "blocks.N.attn.qkv, ..., head; a stem as patch_embed.backbone.0, the 3x3\n"
           "Conv2d before GELU, stem2 as backbone.2; with lsa = 1 also\n"
           "blocks.N.attn.tau, a tensor timm lacks), with the model config in\n"
           "__metadata__.  CKPT may be a run's folder: its best.ckpt when the run kept\n"
           "one, else last.ckpt.  An existing --out or --logits file is refused unless\n"
           "--force.\n"
           "--logits also writes the logits of the test split of --data (default: the\n"
           "data the run trained on) as CSV (index,label,pred,logit_0,...) for\n"
           "tools/torch_check_export.py to compare with PyTorch; the data is checked\n"
           "before anything is written.  The weights compute one pass per image: for a\n"
           "model with tta shift9, whose run reported the average over 9 shifted passes,\n"
           "it says so (and the metadata's tta_note); docs/cli.md shows the PyTorch lines\n"
           "that do the same.  For a run that fitted its images on load (a folder of\n"
           "photos, --image-size, --channels), the metadata also has fit and a fit_note\n"
           "saying how to prepare an image as the run did.  A model with image_norm = 1\n"
           "standardises each image per channel first; one with data_norm = 1 normalises\n"
           "each channel by the training set's mean and std (data_mean and data_std in\n"
           "the metadata); it says so.\n");
}

/* The files the options name. */
typedef struct export_opts {
    const char *out, *logits, *data;
    int force; /* replace existing files */
} export_opts;

static int read_option(void *user, const char *a, const char *v)
{
    export_opts *o = user;
    if (strcmp(a, "--force") == 0) {
        o->force = 1;
        return -1;
    }
    const char **to = strcmp(a, "--out") == 0      ? &o->out
                      : strcmp(a, "--logits") == 0 ? &o->logits
                      : strcmp(a, "--data") == 0   ? &o->data
                                                   : NULL;
    if (!to)
        return cli_unknown_option(prog, a);
    *to = v;
    return -1;
}

/* The script that rebuilds an exported file of a built-in layout in
 * PyTorch and applies its image_norm, by the file's "layout" metadata
 * (vit_arch.export_layout): a new layout is one row.  A layout not listed,
 * or none (a user's architecture), names no script. */
static const struct {
    const char *layout, *script;
} torch_checks[] = {
    {"timm.VisionTransformer", "tools/torch_check_export.py"},
    {"torchvision.SwinTransformer", "tools/torch_check_swin.py"},
};

static const char *torch_check_script(const char *layout)
{
    for (size_t i = 0; layout && i < sizeof torch_checks / sizeof torch_checks[0]; i++)
        if (strcmp(torch_checks[i].layout, layout) == 0)
            return torch_checks[i].script;
    return NULL;
}

int main(int argc, char **argv)
{
    cli_ignore_file_size_signal();
    const char *ckpt = NULL;
    export_opts o = {NULL, NULL, NULL, 0};
    static const cli_flag flags[] = {{"--out", 1}, {"--logits", 1}, {"--data", 1}, {"--force", 0},
                                     {"--help", 0}, {"--version", 0}, {NULL, 0}};
    const char **pos[] = {&ckpt};
    int exit_rc = cli_options(prog, &argc, &argv, flags, usage, pos, 1, read_option, &o);
    if (exit_rc >= 0)
        return exit_rc;
    const char *out = o.out, *logits = o.logits, *data = o.data;
    if (!ckpt || !out) {
        fprintf(stderr, "%s: %s (see --help)\n", prog,
                !ckpt ? "no checkpoint given" : "no --out file given");
        return 2;
    }
    /* An existing file may be someone's (a downloaded model): replaced
     * only when asked. */
    if (cli_refuse_existing(prog, "--out", out, o.force)
        || (logits && cli_refuse_existing(prog, "--logits", logits, o.force)))
        return 2;
    char ckpt_path[PATH_MAX + 16]; /* a run folder's checkpoint */
    if (!(ckpt = cli_run_checkpoint(prog, NULL, ckpt, 0, ckpt_path, sizeof ckpt_path)))
        return 2;
    vit_model *m = NULL;
    vit_run_state st;
    vit_train_config tc; /* the run's recipe: into the metadata, its tta said */
    if (vit_run_load(ckpt, &m, &tc, NULL, &st))
        return cli_fail(prog, NULL);
    /* Without --data: the data (and split) the checkpoint's run trained on. */
    vit_data_opts how;
    data = cli_data_of_run(&st.data, st.has_data, data, &how);
    size_t bytes = 0;
    int rc = 1;
    vit_dataset train = {0}, test = {0};
    double acc = 0;
    const vit_config *c = vit_model_config(m);
    /* The data first: nothing is written for data the model cannot take. */
    if (logits) {
        if (cli_load_data(prog, data, &how, &train, &test))
            goto done;
        if (test.count <= 0 || test.height != c->image_height || test.width != c->image_width ||
            test.channels != c->channels) {
            fprintf(stderr, "%s: --logits: the test split of %s has %d images of %dx%dx%d; the "
                    "model takes %dx%dx%d (height x width x channels); nothing written\n", prog,
                    data, test.count, test.height, test.width, test.channels, c->image_height,
                    c->image_width, c->channels);
            goto done;
        }
    }
    int existed = access(out, F_OK) == 0;
    /* A run that fitted its images says how, so that the weights' user
     * prepares images as the run (and vit_predict) did. */
    const vit_data_fit *fit = cli_run_fits(&st) ? &st.data.fit : NULL;
    if (vit_safetensors_save_fit(m, &tc, st.class_names, fit, out, &bytes)) {
        cli_fail(prog, NULL);
        goto done;
    }
    if (logits && vit_export_logits_csv(m, &test, logits, &acc)) {
        cli_fail(prog, NULL);
        if (!existed)
            unlink(out); /* all or nothing: not the weights without their logits */
        goto done;
    }
    printf("wrote %s: %d tensors, %zu parameters, %zu bytes\n", out, vit_model_tensor_count(m),
           vit_model_param_count(m), bytes);
    if (logits)
        printf("wrote %s: logits of %d test images, accuracy %.4f (one pass)\n", logits,
               test.count, acc);
    if (fit) {
        char line[256];
        snprintf(line, sizeof line, "note: the run fitted its images to %dx%dx%d (height x width x "
                 "channels); the metadata's fit_note says how, for preparing images elsewhere",
                 c->image_height, c->image_width, c->channels);
        cli_print_fitted(stdout, line);
    }
    if (c->image_norm) {
        char line[400];
        const vit_arch *a = vit_model_arch(m);
        const char *check = torch_check_script(a->export_layout);
        snprintf(line, sizeof line, "note: the model standardises each image per channel before "
                 "its first layer (image_norm = 1; the metadata's input says how), which %s "
                 "does not: (x - mean) / sqrt(var + %g), each channel's over the image's "
                 "pixels%s%s%s", a->export_layout ? a->export_layout : a->name,
                 VIT_IMAGE_NORM_EPS, check ? ", as " : "", check ? check : "",
                 check ? " does" : "");
        cli_print_fitted(stdout, line);
    }
    if (tc.tta == VIT_TTA_SHIFT9 || tc.tta == VIT_TTA_SHIFT9_FLIP) {
        double rep;
        int rep_tta;
        char line[256], was[48] = "";
        if (cli_reported_accuracy(ckpt, (long long)st.epoch, &rep, &rep_tta, NULL) && rep_tta == tc.tta)
            snprintf(was, sizeof was, " (%.4f)", rep);
        cli_print_fitted(stdout, "note: these weights give one pass per image (as --logits and "
                                 "metrics.csv's epochs);");
        snprintf(line, sizeof line, "the run's final test accuracy%s was scored with tta %s, the "
                 "mean softmax over the image and its 8 one-pixel shifts (zeros shifted in)%s: "
                 "docs/cli.md shows it in PyTorch", was, vit_tta_name(tc.tta),
                 tc.tta == VIT_TTA_SHIFT9_FLIP ? ", and the same of its mirror image" : "");
        cli_print_fitted(stdout, line);
    }
    if (c->data_norm) {
        char line[400];
        int at = snprintf(line, sizeof line, "note: the model normalises each channel before its "
                          "first layer by the training set's statistics (data_norm = 1 in the "
                          "metadata): (x - mean) / std, mean");
        for (int k = 0; k < c->channels; k++)
            at += snprintf(line + at, sizeof line - (size_t)at, "%s%.4g", k ? "," : " ",
                           c->data_mean.v[k]);
        at += snprintf(line + at, sizeof line - (size_t)at, ", std");
        for (int k = 0; k < c->channels; k++)
            at += snprintf(line + at, sizeof line - (size_t)at, "%s%.4g", k ? "," : " ",
                           c->data_std.v[k]);
        snprintf(line + at, sizeof line - (size_t)at, " (data_mean and data_std hold every "
                 "digit; torchvision's Normalize(data_mean, data_std) before the weights)");
        cli_print_fitted(stdout, line);
    }
    rc = 0;
done:
    vit_dataset_free(&train);
    vit_dataset_free(&test);
    vit_run_state_free(&st);
    vit_model_free(m);
    return rc;
}
