/* Internal to vit_train: what vit_train.c shares with its helper files,
 * train_split.c (the split flags), train_recipe.c (the recipe for the
 * data), train_print.c (what is printed about the data and the result)
 * and train_seeds.c (--seeds). */
#ifndef VIT_TOOLS_VIT_TRAIN_H
#define VIT_TOOLS_VIT_TRAIN_H

#include <stddef.h>

#include "vit/vit.h"

/* The program name messages start with. */
static const char *const prog = "vit_train";

/* How the run is shown: progress 0 quiet, 1 plain lines (a file or pipe),
 * 2 a bar on a terminal (cli_progress); every: seconds between plain
 * lines. */
typedef struct shown {
    int progress;
    double every;
} shown;

/* The data flags: --val-split, --test-split and --split-seed (the split
 * asked for, and which were given: bits 1, 2, 4); --image-size (or the
 * config keys --image-height and --image-width on the line) and
 * --channels (the transform asked for; bits 8 size, 16 channels), and
 * --skip-bad and --class-names. */
typedef struct split_flags {
    vit_data_split s;
    int given;
    vit_data_fit fit;
    int skip_bad;
    const char *class_names;
    const char *fit_arch; /* fit set to the size of the weights of this
                             architecture (finetune_fit), not by a flag */
} split_flags;

/* --seeds takes at most this many seeds. */
#define MAX_SEEDS 64
/* The epochs a budget's plan may take when none are given (the recipe and
 * fine-tuning's): as many as it allows. */
#define BUDGET_EPOCHS 1000000

/* ---- train_finetune.c */

/* One of the fine-tuning flags with a value (--init-from, --init-arch,
 * --init-heads, --init-norm, --layer-decay, --freeze) into *o: 0 when
 * taken, 2 (said) for a bad value, -1 when a is not one of them. */
int finetune_flag(const char *a, const char *v, vit_train_opts *o);

/* A fine-tuning flag without --init-from, --init-from with --resume or
 * with a flag that sets the architecture (the file's; cli_normalize wrote
 * the flags with '-'): 2 (said); else -1. */
int finetune_check(const vit_train_opts *o, int argc, char **argv);

/* The config of --init-from's weights, our checkpoint or export: 1 with
 * *cfg filled; 0 for another file (a timm ViT) or one that cannot be read
 * here (the trainer says why when it loads it). */
int finetune_weights_config(const char *path, vit_config *cfg);

/* Weights whose architecture keeps no resampling for another image size
 * (a Swin's windows, unlike a ViT's position embeddings) fine-tune at
 * their own size: with ws (finetune_weights_config's, NULL without one)
 * and no --image-size (or --image-height/--image-width), sets f->fit's
 * sides to the weights' image size and f->fit_arch to the architecture's
 * name. */
void finetune_fit(const vit_config *ws, split_flags *f);

/* The fine-tuning recipe for the keys nobody set, said in one line when
 * speak (user: what the file and the flags gave, vit_config_given): the data's rule (vit_recipe_pick) for epochs (the budget's with
 * one; costed on ws, the weights' config, when there is one, else on
 * cfg's model), batch, shift and flip; cfg's peak lr kept (said), warm-up
 * 2 epochs (a rule that fails is said and left out).  0. */
int finetune_recipe(vit_config *cfg, vit_train_config *tc, const vit_train_config *utc,
                    vit_train_opts *o, const vit_config *ws,
                    const vit_dataset *train, int val, int speak);

/* ---- vit_train.c */

/* One run of vit_train_run and what it prints; the exit status.  res, if
 * not NULL, gets the result's figures (no confusion matrix). */
int train_once(const vit_config *cfg, const vit_train_config *tc, const vit_dataset *train,
               const vit_dataset *test,
               const vit_train_opts *op, const shown *look, const char *data, int threads,
               vit_train_result *keep);

/* ---- train_split.c */

/* One of the data flags that take a value into *f: 0 when taken, 2
 * (said) for a bad value, -1 when a is none of them. */
int split_flag(const char *a, const char *v, split_flags *f);

/* Loads the data with the split and transform settled (rec: a resumed
 * run's record, NULL for none), sets o->val_count (a validation tail),
 * o->data_split and o->data_fit; says in one line when a flat folder got
 * the default test fraction, and in one line what was done to the images
 * (fitted, and why) and what was skipped (unreadable files); puts
 * --class-names (or a resumed run's names) on both sets; *ignored gets the
 * count of files in class folders that are not images, for the data line.
 * 0, else the exit status. */
int load_data(const char *data, const split_flags *f, const vit_run_data *rec,
              const char *resume, vit_train_opts *o, vit_dataset *train, vit_dataset *test,
              int speak, int *ignored);

/* ---- train_recipe.c */

/* No patch given (vit_config_given): the recipe's (vit_recipe_pick: the
 * model's, unless the data's images are larger than the config's or it
 * does not divide them; then a grid of at most 8x8), said in one line when
 * the rule picked it (the stride and padding are settled after it, in
 * run).  picked: what apply_recipe applied, or on a resume a recipe with
 * only the model's patch set.  The ViT's alone. */
void fit_patch(vit_config *cfg, const vit_recipe *picked, int speak);

/* The default's overlap (stride and padding, made for its 4x4 patches
 * on 8x8 images) goes with the default patch on images of the default
 * size: any other patch, given or picked for larger images, tiles the
 * image without overlap unless a stride or padding was given too (in
 * user: what the file and flags gave).  The ViT's alone. */
void settle_overlap(vit_config *cfg, const vit_config *user, int patch_default,
                    int stride_default, int pad_default, const vit_dataset *train);

/* An architecture's own keys nobody gave, fitted to the data by its adapt
 * hook (vit/arch.h), said in one line.  0, or the exit status. */
int adapt_arch(vit_config *cfg, const vit_dataset *train, int val, int speak);

/* The recipe for this data (vit_recipe_pick) for the keys nobody set on
 * the line or in the --config file (user: the config as they left it, its
 * keys knowing whether they were given); those that change a value are
 * said in one line.  With --budget and no epochs given, the epochs are
 * what the budget's plan gives (BUDGET_EPOCHS at most, not the recipe's:
 * a small set's end far inside a long budget).  The warm-up not
 * given is a 28th of the given epochs, or under a budget of the plan's
 * (*warmup_fraction 1/28, else 0).  *picked: the recipe (for fit_patch).
 * 0, or the exit status. */
int apply_recipe(vit_config *cfg, vit_train_config *tc, const vit_config *user,
                 const vit_train_config *utc, const vit_dataset *train, int val,
                 double budget, int speak, vit_recipe *picked, double *warmup_fraction);

/* ---- train_print.c */

/* Per-class counts of the training file (before --val): all of them when
 * they fit in a line, else the range (or the one count they share); then
 * what looks wrong: classes of under 5 images, a 10x imbalance. */
void print_class_counts(const vit_dataset *train);

/* --val N holds out the training set's last N images: in data stored
 * class by class (class folders) that tail can be one or two classes, and
 * its accuracy says little.  Warns when the tail covers under half of the
 * classes the training set has, naming the stratified flag instead. */
void warn_val_tail(const vit_dataset *train, int val);

/* With --tta auto: what was chosen, and the figure that decided it (or
 * the shift9 test figure beside the one-pass headline). */
void print_tta_auto(const vit_train_result *r, const vit_train_config *tc);

/* The last lines: "ACC (LABELS; TIMING); checkpoint PATH" when that fits
 * (a terminal's width - 1, or 100 columns in a file or pipe); else the
 * checkpoint goes on a line of its own; else, when even "ACC (LABELS;
 * TIMING)" is too wide (ema, tta and the one-pass figure), the labelled
 * figures stay on the first line and the timing opens the second.  The
 * path is never shortened: on a terminal too narrow for "checkpoint PATH"
 * it goes whole on a line of its own (cli_print_item), which the terminal
 * wraps and a copy pastes as it is.
 * labels is "" or e.g. "tta shift9; one pass 0.9639". */
void print_result(const char *acc, const char *labels, const char *timing, const char *path);

/* ---- train_seeds.c */

/* --seeds: "1,2,3", ranges "1-5", or both ("1-3,7"), at most MAX_SEEDS. */
int parse_seeds(const char *text, unsigned long long *seeds, int *n);

/* --seed and --seeds together: one would be ignored, so neither is taken. */
int seed_flag_clash(int argc, char **argv);

/* OUT/seed-N, the folder of seed N's run, into dir[cap]. */
void seed_dir(const char *out, unsigned long long seed, char *dir, size_t cap);

/* --seeds: the run once per seed, each in OUT/seed-N, then the spread. */
int train_seeds(const vit_config *cfg, const vit_train_config *tc, const vit_dataset *train,
                const vit_dataset *test,
                const vit_train_opts *op, const shown *look, const char *data,
                int threads, const unsigned long long *seeds, int n);

#endif
