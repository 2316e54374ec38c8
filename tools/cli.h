/* Small helpers the command-line tools share: option parsing of config
 * keys, the default data path and error printing. */
#ifndef VIT_TOOLS_CLI_H
#define VIT_TOOLS_CLI_H

#include "vit/vit.h"

/* Prints "PROG: MESSAGE" (the last library error) to stderr and returns 1. */
int cli_fail(const char *prog, const char *what);

/* 1 if the environment's VIT_GEMM is one the library takes
 * (vit_gemm_env_check); else prints "PROG: MESSAGE" on stderr and returns
 * 0, for the caller to exit with status 2.  cli_normalize calls it; tools
 * that parse their own options call it first. */
int cli_gemm_env_ok(const char *prog);

/* Path of the shipped digits file: $VIT_DIGITS if set, else the source
 * tree's data/digits.csv.gz if it exists, else the installed copy. */
const char *cli_digits_path(void);

/* Parses a strictly positive int option value; prints an error naming the
 * flag and returns 0 on failure. */
int cli_int(const char *prog, const char *flag, const char *text, int lo, int hi, int *out);

/* Parses a test-time augmentation name (none, shift9, shift9flip) into
 * *out (VIT_TTA_*); prints an error naming the flag and returns 0 on
 * failure.  ("auto" is the config key's, not a scoring tool's.) */
int cli_tta(const char *prog, const char *flag, const char *text, int *out);

/* Parses a duration such as "20m", "90s", "1h30m", "1.5h" or "600" (bare:
 * seconds) into *seconds: numbers each followed by h, m or s, in that
 * order, at most once each; the total must be more than 0 and at most a
 * year.  Prints an error naming the flag and returns 0 on failure. */
int cli_duration(const char *prog, const char *flag, const char *text, double *seconds);

/* Ignores SIGXFSZ, so that writing past a file-size limit (ulimit -f) makes
 * write() fail with EFBIG, which the library reports and cleans up after
 * (no temporary file left), instead of the kernel killing the tool in the
 * middle of a write.  Call first thing in main() of a tool that writes files. */
void cli_ignore_file_size_signal(void);

/* Under mpirun with more than one rank: ignores SIGPIPE.  When a rank is
 * lost, a survivor sending to it over TCP would otherwise be killed by the
 * broken pipe at once, and mpirun, hearing of that death first, would name
 * the survivor (rank 0, signal 13) instead of the rank that was lost; with
 * the signal ignored the send fails, and mpirun names the lost rank when
 * its daemon reports.  (Not for one process: `vit_train | head` should end
 * the run when head does.)  Call after vit_dist_init. */
void cli_ignore_broken_pipe_under_mpi(void);

/* One option of a tool: its name as --help shows it (leading "--", words
 * joined by '-'), and whether it takes a value.  A tool lists its options
 * in an array ended by {NULL, 0}. */
typedef struct cli_flag {
    const char *name;
    int takes_value;
} cli_flag;

/* Rewrites *argv into the one form the tools' loops read, so that flags
 * work as people type them: "--key=value" becomes "--key" "value", and
 * '_' in a flag's name becomes '-' (--min_lr is --min-lr).  Options are
 * `flags`, plus every config key as a flag taking a value when
 * `config_keys` is set; "-h" and arguments not starting with "--" pass
 * through, and so does the value after an option that takes one, whatever
 * it looks like (--lr -1).  An unknown option, a missing value or a value
 * given to an option that takes none prints one line naming the option
 * (with the nearest known option when one is close) and returns 0; the
 * tool then exits with 2.  Returns 1 on success.  The new array is
 * allocated once and lives until exit; the strings are argv's own. */
int cli_normalize(const char *prog, int *argc, char ***argv, const cli_flag *flags, int config_keys);

/* What cli_arg found, besides an exit status (0 or 2). */
#define CLI_ARG_OPTION (-1) /* an option: the tool reads it (and *value) */
#define CLI_ARG_TAKEN (-2)  /* a positional argument, stored: go on */

/* One step of the option loop every tool runs over argv after
 * cli_normalize, at argv[*i]:
 *  - "--help" or "-h": calls usage() and returns 0 (the tool exits 0);
 *  - "--version": prints "PROG VERSION (PRECISION)" and returns 0;
 *  - an argument not starting with "--": stored in the first of
 *    *pos[0..npos) still NULL, returns CLI_ARG_TAKEN; when none is free,
 *    prints "PROG: unexpected argument 'ARG' (see --help)" and returns 2;
 *  - an option that flags lists as taking no value: *value NULL,
 *    returns CLI_ARG_OPTION;
 *  - any other option: *value is the argument after it and *i moves past
 *    that, returns CLI_ARG_OPTION; when none follows, prints
 *    "PROG: OPTION needs a value" and returns 2. */
int cli_arg(const char *prog, int argc, char **argv, int *i, const cli_flag *flags,
            void (*usage)(void), const char **pos[], int npos, const char **value);

/* A tool's reader of one option for cli_options: flag as cli_normalize
 * wrote it ("--out"), value the argument after it (NULL for a flag that
 * takes none), user the tool's own state.  Returns -1 to go on, or the
 * status to exit with after saying the problem (2; cli_unknown_option for
 * a flag the tool lists but does not read). */
typedef int (*cli_option_fn)(void *user, const char *flag, const char *value);

/* The whole option loop of a tool without config keys: cli_normalize,
 * then cli_arg on each argument, positional ones stored into
 * *pos[0..npos) and each option handed to option(user, flag, value).
 * Returns -1 when every argument was read, else the status to exit with
 * (0 after --help or --version, 2 after an error said). */
int cli_options(const char *prog, int *argc, char ***argv, const cli_flag *flags,
                void (*usage)(void), const char **pos[], int npos, cli_option_fn option,
                void *user);

/* Prints "PROG: unknown option 'OPTION' (see --help)" and returns 2 (for an
 * option a tool lists but its loop does not read). */
int cli_unknown_option(const char *prog, const char *option);

/* Sets config key from flag ("--min-lr" sets min_lr) to value, a key of the
 * network into *cfg, of the recipe into *tc (vit_config_set_any); on failure
 * prints "PROG: --min-lr: PROBLEM" (the library's message without its own
 * key prefix, so that the option is named once) and returns 0. */
int cli_config_flag(const char *prog, vit_config *cfg, vit_train_config *tc, const char *flag,
                    const char *value);

/* The default run folder for a data spec: "runs/" and the last path
 * component of spec, trailing slashes ignored ("digits", "data/mnist/" and
 * "/abs/mnist//" give runs/digits, runs/mnist, runs/mnist).  "." and ".."
 * are named after the folder they resolve to; "/" gives runs/data.
 * Returns 0 if spec or the result does not fit. */
int cli_run_dir(const char *spec, char *out, size_t cap);

/* Prints the confusion matrix [K, K] (row = true class, column =
 * predicted) to stdout under a title line.  Columns are headed by the class
 * index; rows by "INDEX NAME" when names (K of them, NULL for none) differ
 * from the indices, else by the index alone.  A name longer than fits
 * (CLI_CLASS_LABEL characters) is cut, on a UTF-8 character boundary, and
 * ends in "...". */
#define CLI_CLASS_LABEL 24
void cli_print_confusion(const int *confusion, int K, char *const *names);

/* Seconds as h:mm:ss into buf (0:02:05, 1:03:07; negative or not finite:
 * 0:00:00); returns buf. */
const char *cli_hms(double s, char *buf, size_t cap);

/* Columns of the terminal stdout is, or 0 when it is not one: the window
 * size, else $COLUMNS, else 80. */
int cli_terminal_columns(void);

/* Columns of the terminal f is (its window size, else $COLUMNS, else 80),
 * or 0 when f is not a terminal or after cli_no_terminal. */
int cli_columns_of(FILE *f);

/* From now on every stream counts as a file (cli_columns_of and
 * cli_terminal_columns give 0): for a process whose terminal says nothing
 * about where its output ends up (a rank under mpirun, which gets a
 * pseudo-terminal even when mpirun writes to a file). */
void cli_no_terminal(void);

/* Prints text and a newline to f, fitted to the terminal f is: broken at
 * spaces into lines of at most its width - 1 characters, the lines after
 * the first indented by two spaces.  A word longer than that (a path) is
 * never cut: it goes whole on a line of its own, where the terminal wraps
 * it, so that it can still be copied.  To a file or pipe, text as it is. */
void cli_print_fitted(FILE *f, const char *text);

/* Prints "LEAD ITEM" and a newline to f when that fits the terminal's
 * width - 1 (or f is no terminal); else LEAD on one line and ITEM whole on
 * the next, so that ITEM (a path, a command) is never split or shortened
 * and a copy of its line pastes as it is. */
void cli_print_item(FILE *f, const char *lead, const char *item);

/* s as one shell word into buf[cap]: as it is when it holds only
 * characters a shell takes literally (letters, digits, / . _ - + , : = @ %),
 * else in single quotes ('\'' for a quote).  Returns buf. */
const char *cli_shell_word(const char *s, char *buf, size_t cap);

/* path into out (cap bytes), shortened to at most max characters when it
 * is longer: its start and its end joined by "...", cut at a '/' where one
 * is near, so that the run folder and file name stay readable. */
void cli_short_path(const char *path, int max, char *out, size_t cap);

/* The data set a tool works on for a run whose checkpoint recorded *rec
 * (known 0: it recorded none): given (--data) when not NULL, else the
 * record's spec, else "digits" (a checkpoint written before runs recorded
 * their data).  *opts gets how to load it as the run did: when the data is
 * the record's (given NULL, or naming the same folder), its split and its
 * fit (vit_run_data_fit: the recorded transform, or the recorded shape);
 * for other data the recorded transform alone (all zero without one).
 * skip_bad is set: files the run skipped are skipped again (and said by
 * cli_load_data).  Points at given, into rec or at a constant. */
const char *cli_data_of_run(const vit_run_data *rec, int known, const char *given,
                            vit_data_opts *opts);

/* vit_data_load_opts(data, digits, opts, ...), saying on stderr how many
 * unreadable files were skipped (the first named).  0, else 1 with the
 * error said. */
int cli_load_data(const char *prog, const char *data, const vit_data_opts *opts,
                  vit_dataset *train, vit_dataset *test);

/* The final test figure the run of checkpoint ckpt reported: final.csv
 * beside it (vit/train.h), when the model it scored (best_epoch's, or the
 * last epoch's) is the checkpoint's, at epoch `epoch`
 * (vit_run_state.epoch; -1: any).  1 with *acc, *tta (VIT_TTA_*) and
 * *scored (that model's epoch; may be NULL) filled; 0 when there is none
 * or it scored another model (best.ckpt's, not this last.ckpt's). */
int cli_reported_accuracy(const char *ckpt, long long epoch, double *acc, int *tta, int *scored);

/* 1, with one line on stderr (`PROG: FLAG PATH already exists; pass
 * --force to replace it`, without FLAG when flag is NULL), when an output
 * file the tool would write exists and force is 0: a file may be someone's
 * (a downloaded model, an input picture named by mistake, last week's
 * figure), so it is replaced only when asked.  0 otherwise. */
int cli_refuse_existing(const char *prog, const char *flag, const char *path, int force);

/* What a checkpoint argument names: a checkpoint file, or a run's folder.
 * For a folder, `resume` 1 takes its last.ckpt (where the run stopped);
 * 0 takes the model the run kept, best.ckpt when the run wrote one (its
 * final figures scored it; a note on stderr says so) else last.ckpt.  The
 * path is written to buf (cap bytes) for a folder; a file argument is
 * returned as given.  NULL, with one line on stderr naming the flag (or
 * "checkpoint" for NULL flag) and the folder, when the folder holds no
 * such file or the path does not fit. */
const char *cli_run_checkpoint(const char *prog, const char *flag, const char *arg, int resume,
                               char *buf, size_t cap);

/* Prints the config keys as options (for --help). */
void cli_print_config_keys(FILE *f);

/* ---- training progress (cli_progress.c) ---- */

/* What vit_train shows of a run, as the state of the callback below.
 * mode 0 quiet (only a resume's changed keys are said); 1 plain lines, for
 * a file or pipe: no \r, the epoch table and inside an epoch a progress
 * line at most every `every` seconds; 2 a bar redrawn in place on a
 * terminal, never wider than its width - 1, then the table.  Epoch rows
 * fit 100 columns, and on a terminal its width - 1 (columns give way:
 * img/s, lr, time, train acc, test loss, train loss).  With 1 or 2, a
 * model line (parameters, tokens, measured img/s and ETA) after the first
 * steps. */
typedef struct cli_progress {
    int mode;
    double every;              /* seconds between plain lines (0: 30) */
    const char *out_dir;       /* the run's folder, for the set-aside line */
    int with_val;              /* the table shows validation, not test */
    FILE *out;                 /* stdout */
    int bar_len;               /* characters of the bar on screen */
    double last_print;         /* when the last plain line or row went out */
    int epoch_w, cols;         /* the table's first column; its columns (bits) */
    int header_max, header_due;
    double t_first;            /* after the run's first step */
    int summary_done;
    int score_images;          /* images scored per epoch: validation, or test */
    double budget_before;      /* seconds of --budget spent before the run
                                  began (loading): added to the plan's times */
    double budget_after;       /* and kept for after it (the exit) */
    double t_last_step;        /* when the last step's event came */
    double score_seconds;      /* one epoch's scoring, once measured */
    double last_lr;            /* the last step's learning rate */
} cli_progress;

void cli_progress_init(cli_progress *p, int mode, double every, const char *out_dir, int with_val,
                       int score_images);

/* Before a message that follows a stop: on a terminal, ends the line
 * when a bar is up or typed is set (a typed Ctrl-C echoes "^C" where the
 * cursor is, and the terminal may discard output not yet shown), so that
 * the message starts at the beginning of a fresh line and never writes
 * over what is on screen.  Nothing to a file or pipe. */
void cli_progress_fresh_line(cli_progress *p, int typed);

/* A vit_train_callback; user is a cli_progress.  Never asks for a stop. */
int cli_progress_event(const vit_train_event *ev, void *user);

/* ---- cli_images.c: images for a model, CSV, folders of images */

/* The image at path as model c takes it ([H, W, C] malloc'd), or NULL
 * (said on stderr): read with vit_image_load (alpha over white); an image
 * of another size or channel count is fitted (vit_image_fit) when fit is
 * 1, else refused naming both shapes and --fit. */
vit_real *cli_model_image(const char *prog, const char *path, const vit_config *c, int fit);

/* Whether a run recorded a transform of its images (vit_run_data.fit):
 * then images are fitted to the model without --fit. */
int cli_run_fits(const vit_run_state *st);

/* Writes s to f as one CSV field (RFC 4180): as it is, or between double
 * quotes with each quote doubled when it holds a comma, a quote, a CR or
 * LF, or starts or ends with a space. */
void cli_csv_field(FILE *f, const char *s);

/* The image files of a list of paths: a file is taken as it is, a folder
 * is walked recursively for files whose name ends in .png, .jpg or .jpeg
 * (any case; entries starting with '.' skipped), each folder's entries in
 * strcmp order.  *files: a malloc'd array of *n malloc'd paths (free with
 * cli_paths_free); *ignored counts the other files found in folders.
 * 0, else 1 with the reason said (a path that does not exist, a folder
 * that cannot be read, out of memory). */
int cli_image_paths(const char *prog, char **paths, int npaths, char ***files, int *n,
                    int *ignored);
void cli_paths_free(char **files, int n);

#endif
