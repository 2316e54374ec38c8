/* Helpers shared by the command-line tools; see cli.h. */
#define _XOPEN_SOURCE 700 /* realpath */
#include "cli.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <unistd.h>

int cli_gemm_env_ok(const char *prog)
{
    if (vit_gemm_env_check() == VIT_OK)
        return 1;
    fprintf(stderr, "%s: %s\n", prog, vit_last_error());
    return 0;
}

int cli_fail(const char *prog, const char *what)
{
    if (what)
        fprintf(stderr, "%s: %s: %s\n", prog, what, vit_last_error());
    else
        fprintf(stderr, "%s: %s\n", prog, vit_last_error());
    return 1;
}

static void ignore_signal(int sig)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = SIG_IGN;
    sigemptyset(&sa.sa_mask);
    sigaction(sig, &sa, NULL);
}

void cli_ignore_file_size_signal(void)
{
#ifdef SIGXFSZ
    ignore_signal(SIGXFSZ);
#endif
}

void cli_ignore_broken_pipe_under_mpi(void)
{
    if (vit_dist_size() > 1)
        ignore_signal(SIGPIPE);
}

const char *cli_digits_path(void)
{
    const char *env = getenv("VIT_DIGITS");
    if (env && *env)
        return env;
    if (access(VIT_SOURCE_DATA_DIR "/digits.csv.gz", R_OK) == 0)
        return VIT_SOURCE_DATA_DIR "/digits.csv.gz";
    return VIT_INSTALL_DATA_DIR "/digits.csv.gz";
}

int cli_int(const char *prog, const char *flag, const char *text, int lo, int hi, int *out)
{
    char *end = NULL;
    errno = 0;
    long v = text ? strtol(text, &end, 10) : 0;
    if (!text || end == text || *end || errno || v < lo || v > hi) {
        fprintf(stderr, "%s: %s: expected an integer in [%d, %d], got '%s'\n", prog, flag, lo, hi,
                text ? text : "(nothing)");
        return 0;
    }
    *out = (int)v;
    return 1;
}

int cli_tta(const char *prog, const char *flag, const char *text, int *out)
{
    /* The config's names (vit_tta_name), but not "auto": that is a run's
     * choice on its validation images, which a scoring tool has not. */
    static const int modes[] = {VIT_TTA_NONE, VIT_TTA_SHIFT9, VIT_TTA_SHIFT9_FLIP};
    for (size_t i = 0; text && i < sizeof modes / sizeof modes[0]; i++)
        if (strcmp(text, vit_tta_name(modes[i])) == 0) {
            *out = modes[i];
            return 1;
        }
    fprintf(stderr, "%s: %s: expected none, shift9 or shift9flip, got '%s'\n", prog, flag,
            text ? text : "(nothing)");
    return 0;
}

int cli_duration(const char *prog, const char *flag, const char *text, double *seconds)
{
    const char *p = text ? text : "", *units = "hms";
    const double scale[3] = {3600, 60, 1};
    double total = 0;
    int next = 0, ok = *p != 0;
    while (ok && *p) {
        char *end;
        errno = 0;
        double v = (*p >= '0' && *p <= '9') || *p == '.' ? strtod(p, &end) : -1;
        ok = v >= 0 && errno == 0 && end != p;
        if (!ok)
            break;
        const char *u = *end ? strchr(units + next, *end) : NULL;
        if (!*end && p == text) { /* a bare number: seconds */
            total = v;
            p = end;
            break;
        }
        ok = u != NULL && *end;
        if (ok) {
            total += v * scale[u - units];
            next = (int)(u - units) + 1;
            p = end + 1;
        }
    }
    if (!ok || !(total > 0 && total <= 366.0 * 86400)) {
        fprintf(stderr, "%s: %s: expected a duration such as 20m, 90s or 1h30m, got '%s'\n", prog,
                flag, text ? text : "(nothing)");
        return 0;
    }
    *seconds = total;
    return 1;
}

/* ---- flags as people type them ------------------------------------------ */

/* Optimal string alignment distance (edits: insert, delete, substitute,
 * swap two neighbours) between a and b, counted up to 32 characters. */
static int edit_distance(const char *a, const char *b)
{
    enum { M = 33 };
    int d[M][M];
    int n = (int)strlen(a), m = (int)strlen(b);
    n = n < M - 1 ? n : M - 1;
    m = m < M - 1 ? m : M - 1;
    for (int i = 0; i <= n; i++)
        d[i][0] = i;
    for (int j = 0; j <= m; j++)
        d[0][j] = j;
    for (int i = 1; i <= n; i++)
        for (int j = 1; j <= m; j++) {
            int best = d[i - 1][j - 1] + (a[i - 1] != b[j - 1]);
            if (d[i - 1][j] + 1 < best)
                best = d[i - 1][j] + 1;
            if (d[i][j - 1] + 1 < best)
                best = d[i][j - 1] + 1;
            if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] &&
                d[i - 2][j - 2] + 1 < best)
                best = d[i - 2][j - 2] + 1;
            d[i][j] = best;
        }
    return d[n][m];
}

/* Config key i of every architecture: the shared and the ViT's
 * (vit_config_key_help), "arch", then the other architectures' own. */
static int any_config_key(int i, const char **key)
{
    int n = 0;
    while (vit_config_key_help(n, NULL))
        n++;
    if (i < n)
        return vit_config_key_help(i, key) != NULL;
    i -= n;
    n = 0;
    while (vit_train_config_key_help(n, NULL))
        n++;
    if (i < n)
        return vit_train_config_key_help(i, key) != NULL;
    if (i == n) {
        *key = "arch";
        return 1;
    }
    i -= n + 1;
    for (int a = 1; a < vit_arch_count(); a++) {
        const vit_arch *arch = vit_arch_at(a);
        if (i < arch->nkeys) {
            *key = arch->keys[i].key;
            return 1;
        }
        i -= arch->nkeys;
    }
    return 0;
}

/* Known option number i (tool flags first, then config keys as flags) in
 * buf; 0 past the end. */
static int known_option(const cli_flag *flags, int config_keys, int i, char *buf, size_t cap,
                        int *takes_value)
{
    int nflags = 0;
    while (flags && flags[nflags].name)
        nflags++;
    if (i < nflags) {
        snprintf(buf, cap, "%s", flags[i].name);
        *takes_value = flags[i].takes_value;
        return 1;
    }
    const char *key;
    if (!config_keys || !any_config_key(i - nflags, &key))
        return 0;
    snprintf(buf, cap, "--%s", key);
    for (char *p = buf; *p; p++)
        if (*p == '_')
            *p = '-';
    *takes_value = 1;
    return 1;
}

int cli_normalize(const char *prog, int *argc, char ***argv, const cli_flag *flags, int config_keys)
{
    static char **norm; /* lives until exit */
    /* Every tool parses its options here first: a VIT_GEMM the library
     * would not take is refused before any work, not ignored. */
    if (!cli_gemm_env_ok(prog))
        return 0;
    int n = *argc;
    char **in = *argv;
    free(norm);
    norm = malloc((2 * (size_t)n + 1) * sizeof *norm);
    if (!norm) {
        fprintf(stderr, "%s: out of memory\n", prog);
        return 0;
    }
    int k = 0;
    norm[k++] = in[0];
    for (int i = 1; i < n; i++) {
        char *a = in[i];
        if (strncmp(a, "--", 2) != 0 || !a[2]) {
            norm[k++] = a;
            continue;
        }
        char *eq = strchr(a, '=');
        if (eq)
            *eq = 0;
        for (char *p = a + 2; *p; p++)
            if (*p == '_')
                *p = '-';
        char name[80];
        int takes_value = 0, found = 0;
        for (int j = 0; known_option(flags, config_keys, j, name, sizeof name, &takes_value); j++)
            if (strcmp(name, a) == 0) {
                found = 1;
                break;
            }
        if (!found) {
            char best[80] = "";
            int best_d = 1 << 30, len = (int)strlen(a + 2);
            for (int j = 0; known_option(flags, config_keys, j, name, sizeof name, &takes_value); j++) {
                int d = edit_distance(a + 2, name + 2);
                if (d < best_d) {
                    best_d = d;
                    snprintf(best, sizeof best, "%s", name);
                }
            }
            /* close: at most one edit in three characters typed */
            if (*best && best_d <= (len + 2) / 3)
                fprintf(stderr, "%s: unknown option %s; did you mean %s?\n", prog, a, best);
            else
                fprintf(stderr, "%s: unknown option %s (see --help)\n", prog, a);
            return 0;
        }
        norm[k++] = a;
        if (!takes_value && eq) {
            fprintf(stderr, "%s: %s: takes no value, got '%s'\n", prog, a, eq + 1);
            return 0;
        }
        if (takes_value && eq)
            norm[k++] = eq + 1;
        else if (takes_value) {
            if (i + 1 >= n) {
                fprintf(stderr, "%s: %s: missing value\n", prog, a);
                return 0;
            }
            norm[k++] = in[++i];
        }
    }
    norm[k] = NULL;
    *argc = k;
    *argv = norm;
    return 1;
}

int cli_arg(const char *prog, int argc, char **argv, int *i, const cli_flag *flags,
            void (*usage)(void), const char **pos[], int npos, const char **value)
{
    const char *a = argv[*i];
    *value = NULL;
    if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
        usage();
        return 0;
    }
    if (strcmp(a, "--version") == 0) {
        printf("%s %s (%s)\n", prog, vit_version(), VIT_REAL_NAME);
        return 0;
    }
    if (strncmp(a, "--", 2) != 0) {
        for (int k = 0; k < npos; k++)
            if (!*pos[k]) {
                *pos[k] = a;
                return CLI_ARG_TAKEN;
            }
        fprintf(stderr, "%s: unexpected argument '%s' (see --help)\n", prog, a);
        return 2;
    }
    for (const cli_flag *f = flags; f->name; f++)
        if (!f->takes_value && strcmp(f->name, a) == 0)
            return CLI_ARG_OPTION;
    if (*i + 1 >= argc) {
        fprintf(stderr, "%s: %s needs a value\n", prog, a);
        return 2;
    }
    *value = argv[++*i];
    return CLI_ARG_OPTION;
}

int cli_options(const char *prog, int *argc, char ***argv, const cli_flag *flags,
                void (*usage)(void), const char **pos[], int npos, cli_option_fn option,
                void *user)
{
    if (!cli_normalize(prog, argc, argv, flags, 0))
        return 2;
    for (int i = 1; i < *argc; i++) {
        const char *flag = (*argv)[i], *value;
        int r = cli_arg(prog, *argc, *argv, &i, flags, usage, pos, npos, &value);
        if (r == CLI_ARG_OPTION)
            r = option(user, flag, value);
        if (r >= 0)
            return r;
    }
    return -1;
}

int cli_unknown_option(const char *prog, const char *option)
{
    fprintf(stderr, "%s: unknown option '%s' (see --help)\n", prog, option);
    return 2;
}

static int config_key_known(const char *key)
{
    const char *k;
    for (int i = 0; any_config_key(i, &k); i++)
        if (strcmp(k, key) == 0)
            return 1;
    return 0;
}

int cli_config_flag(const char *prog, vit_config *cfg, vit_train_config *tc, const char *flag,
                    const char *value)
{
    char key[80];
    snprintf(key, sizeof key, "%s", flag + (strncmp(flag, "--", 2) == 0 ? 2 : 0));
    for (char *p = key; *p; p++)
        if (*p == '-')
            *p = '_';
    int rc = vit_config_set_any(cfg, tc, key, value);
    if (rc == VIT_OK)
        return 1;
    /* A known key's value error is "KEY: PROBLEM" (vit/model.h); the user
     * typed the flag, so name that instead, once. */
    const char *msg = vit_last_error();
    size_t klen = strlen(key);
    if (rc == VIT_EINVAL && config_key_known(key) && strlen(msg) > klen + 2)
        msg += klen + 2;
    fprintf(stderr, "%s: %s: %s\n", prog, flag, msg);
    return 0;
}

int cli_run_dir(const char *spec, char *out, size_t cap)
{
    char path[4096], *name;
    int n = snprintf(path, sizeof path, "%s", spec);
    if (n < 0 || (size_t)n >= sizeof path)
        return 0;
    while (n > 0 && path[n - 1] == '/')
        path[--n] = 0;
    name = strrchr(path, '/');
    name = name ? name + 1 : path;
    char real[PATH_MAX];
    if (!*name || strcmp(name, ".") == 0 || strcmp(name, "..") == 0) {
        /* "--data ." names the folder the user stands in */
        name = "data";
        if (realpath(spec, real) && strrchr(real, '/') && strrchr(real, '/')[1])
            name = strrchr(real, '/') + 1;
    }
    n = snprintf(out, cap, "runs/%s", name);
    return n >= 0 && (size_t)n < cap;
}

void cli_print_config_keys(FILE *f)
{
    const char *key, *help;
    vit_config d;
    vit_train_config dtc;
    char buf[4096];
    vit_config_default(&d);
    vit_train_config_default(&dtc);
    vit_config_format(&d, &dtc, buf, sizeof buf);
    int nnet = 0;
    while (vit_config_key_help(nnet, NULL))
        nnet++;
    for (int i = 0; (help = i < nnet ? vit_config_key_help(i, &key)
                                     : vit_train_config_key_help(i - nnet, &key)); i++) {
        char flag[64];
        snprintf(flag, sizeof flag, "--%s", key);
        for (char *p = flag + 2; *p; p++)
            if (*p == '_')
                *p = '-';
        /* default value: the line "key = value" of the formatted defaults
         * (at a line start: "lr = " also ends "min_lr = ") */
        char pat[80];
        int plen = snprintf(pat, sizeof pat, "%s = ", key);
        const char *line = buf;
        while (line && strncmp(line, pat, (size_t)plen) != 0)
            line = (line = strchr(line, '\n')) ? line + 1 : NULL;
        char def[64] = "";
        if (line) {
            snprintf(def, sizeof def, "%s", line + plen);
            def[strcspn(def, "\n")] = 0;
        }
        /* a key the text leaves out when off (image_norm) is 0; data_norm's
         * statistics are the training set's unless given */
        int stats = strcmp(key, "data_mean") == 0 || strcmp(key, "data_std") == 0;
        fprintf(f, "  %-20s %s (default %s)\n", flag, help,
                line ? def : stats ? "the training set's" : "0");
    }
    /* The other architectures' own keys (vit/arch.h), under their names. */
    for (int a = 1; a < vit_arch_count(); a++) {
        const vit_arch *arch = vit_arch_at(a);
        fprintf(f, "With --arch %s (%s):\n", arch->name, arch->summary);
        for (int k = 0; k < arch->nkeys; k++) {
            char flag[64];
            snprintf(flag, sizeof flag, "--%s", arch->keys[k].key);
            for (char *p = flag + 2; *p; p++)
                if (*p == '_')
                    *p = '-';
            fprintf(f, "  %-20s %s (default %s)\n", flag, arch->keys[k].help, arch->keys[k].def);
        }
    }
}

/* Characters (UTF-8 lead bytes) in the first n bytes of s. */
static int utf8_chars(const char *s, size_t n)
{
    int c = 0;
    for (size_t i = 0; i < n; i++)
        c += ((unsigned char)s[i] & 0xC0) != 0x80;
    return c;
}

/* "k name" in buf, cut to CLI_CLASS_LABEL characters; returns its width. */
static int class_label(char *buf, size_t cap, int k, const char *name)
{
    int n = snprintf(buf, cap, "%d %s", k, name);
    size_t len = n < 0 ? 0 : (size_t)n < cap ? (size_t)n : cap - 1;
    if (utf8_chars(buf, len) > CLI_CLASS_LABEL) {
        size_t keep = 0;
        for (int chars = 0; keep < len; keep++) {
            if (((unsigned char)buf[keep] & 0xC0) != 0x80 && ++chars > CLI_CLASS_LABEL - 3)
                break;
        }
        memcpy(buf + keep, "...", 4);
        len = keep + 3;
    }
    return utf8_chars(buf, len);
}

void cli_print_confusion(const int *confusion, int K, char *const *names)
{
    int named = 0, width = 5;
    char num[16], label[4 * CLI_CLASS_LABEL + 8];
    for (int k = 0; names && k < K; k++) {
        snprintf(num, sizeof num, "%d", k);
        named |= strcmp(names[k], num) != 0;
    }
    for (int k = 0; named && k < K; k++) {
        int w = class_label(label, sizeof label, k, names[k]);
        width = w > width ? w : width;
    }
    printf("confusion matrix (rows: true class, columns: predicted)\n%*s", width, "");
    for (int j = 0; j < K; j++)
        printf("%5d", j);
    printf("\n");
    for (int i = 0; i < K; i++) {
        if (named) {
            int w = class_label(label, sizeof label, i, names[i]);
            printf("%s%*s", label, width - w, "");
        } else {
            printf("%*d", width, i);
        }
        for (int j = 0; j < K; j++)
            printf("%5d", confusion[i * K + j]);
        printf("\n");
    }
}

static int no_terminal;

void cli_no_terminal(void) { no_terminal = 1; }

int cli_terminal_columns(void) { return cli_columns_of(stdout); }

int cli_columns_of(FILE *f)
{
    int fd = fileno(f);
    if (no_terminal || fd < 0 || !isatty(fd))
        return 0;
    struct winsize ws;
    if (ioctl(fd, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0)
        return ws.ws_col;
    const char *e = getenv("COLUMNS");
    char *end;
    long n = e ? strtol(e, &end, 10) : 0;
    return n > 0 && n < 100000 && *end == 0 ? (int)n : 80;
}

void cli_print_fitted(FILE *f, const char *text)
{
    int cols = cli_columns_of(f);
    size_t width = cols > 1 ? (size_t)cols - 1 : 0, at = 0;
    if (width == 0 || strlen(text) <= width) {
        fprintf(f, "%s\n", text);
        return;
    }
    for (const char *p = text; *p;) {
        size_t word = strcspn(p, " ");
        if (at > 0 && at + 1 + word > width) {
            fputs("\n  ", f);
            at = 2;
        } else if (at > 0) {
            fputc(' ', f);
            at++;
        }
        fwrite(p, 1, word, f);
        at += word;
        p += word;
        while (*p == ' ')
            p++;
    }
    fputc('\n', f);
}

void cli_print_item(FILE *f, const char *lead, const char *item)
{
    int cols = cli_columns_of(f);
    if (cols <= 1 || strlen(lead) + 1 + strlen(item) <= (size_t)cols - 1)
        fprintf(f, "%s %s\n", lead, item);
    else
        fprintf(f, "%s\n%s\n", lead, item);
}

const char *cli_shell_word(const char *s, char *buf, size_t cap)
{
    if (cap == 0)
        return "";
    if (*s && s[strspn(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
                          "/._-+,:=@%")] == 0) {
        snprintf(buf, cap, "%s", s);
        return buf;
    }
    size_t n = 0;
    buf[n++] = '\'';
    for (; *s && n + 6 < cap; s++) {
        if (*s == '\'') {
            memcpy(buf + n, "'\\''", 4);
            n += 4;
        } else {
            buf[n++] = *s;
        }
    }
    buf[n++] = '\'';
    buf[n] = 0;
    return buf;
}

void cli_short_path(const char *path, int max, char *out, size_t cap)
{
    size_t len = strlen(path);
    if (cap == 0)
        return;
    if ((int)len <= max || max < 8) {
        snprintf(out, cap, "%s", path);
        return;
    }
    /* A third of the room for the start, the rest for the end (the run
     * folder and last.ckpt), each moved to a '/' within a few characters. */
    size_t keep = (size_t)max - 3, head = keep / 3, tail = keep - head;
    for (size_t k = head; k > head / 2 && k > 1; k--)
        if (path[k - 1] == '/') {
            tail += head - k;
            head = k;
            break;
        }
    const char *t = path + len - tail;
    for (const char *q = t; q < path + len && q < t + tail / 2; q++)
        if (*q == '/') {
            t = q;
            break;
        }
    snprintf(out, cap, "%.*s...%s", (int)head, path, t);
}

const char *cli_data_of_run(const vit_run_data *rec, int known, const char *given,
                            vit_data_opts *opts)
{
    char abs[PATH_MAX];
    memset(opts, 0, sizeof *opts);
    opts->skip_bad = 1;
    if (known && *rec->spec && (!given || (realpath(given, abs) && strcmp(abs, rec->spec) == 0))) {
        opts->split = rec->split;
        opts->fit = vit_run_data_fit(rec, known);
    } else if (known) {
        opts->fit = rec->fit;
    }
    if (given)
        return given;
    return known && *rec->spec ? rec->spec : "digits";
}

int cli_load_data(const char *prog, const char *data, const vit_data_opts *opts,
                  vit_dataset *train, vit_dataset *test)
{
    vit_data_report rep;
    if (vit_data_load_opts(data, cli_digits_path(), opts, train, test, NULL, &rep))
        return cli_fail(prog, NULL);
    if (rep.skipped > 0)
        fprintf(stderr, "%s: skipped %d unreadable file%s (%s%s)\n", prog,
                rep.skipped, rep.skipped == 1 ? "" : "s", rep.skipped_why[0],
                rep.skipped > 1 ? ", ..." : "");
    return 0;
}

int cli_reported_accuracy(const char *ckpt, long long epoch, double *acc, int *tta, int *scored)
{
    char path[PATH_MAX + 16];
    const char *slash = strrchr(ckpt, '/');
    snprintf(path, sizeof path, "%.*sfinal.csv", slash ? (int)(slash - ckpt + 1) : 0, ckpt);
    vit_metrics_table t;
    if (access(path, F_OK) != 0 || vit_metrics_read(path, &t) != VIT_OK)
        return 0;
    const double *ep = vit_metrics_column(&t, "epoch"), *a = vit_metrics_column(&t, "test_acc");
    const double *tt = vit_metrics_column(&t, "tta"), *best = vit_metrics_column(&t, "best_epoch");
    double model = best && best[0] > 0 ? best[0] : ep[0];
    int ok = t.rows == 1 && a && !isnan(a[0]) && (epoch < 0 || model == (double)epoch);
    if (ok) {
        *acc = a[0];
        *tta = tt && !isnan(tt[0]) ? (int)tt[0] : VIT_TTA_NONE;
        if (scored)
            *scored = (int)model;
    }
    vit_metrics_free(&t);
    return ok;
}

/* 1 if dir/name is a regular file, its path in buf. */
static int run_file(const char *dir, const char *name, char *buf, size_t cap, int *fits)
{
    struct stat sb;
    size_t len = strlen(dir);
    while (len > 1 && dir[len - 1] == '/') /* "runs/x/" names runs/x/last.ckpt */
        len--;
    int n = snprintf(buf, cap, "%.*s/%s", (int)len, dir, name);
    *fits = n >= 0 && (size_t)n < cap;
    return *fits && stat(buf, &sb) == 0 && S_ISREG(sb.st_mode);
}

const char *cli_run_checkpoint(const char *prog, const char *flag, const char *arg, int resume,
                               char *buf, size_t cap)
{
    struct stat sb;
    if (!arg || stat(arg, &sb) != 0 || !S_ISDIR(sb.st_mode))
        return arg; /* a file, or nothing: the loader says what is wrong */
    const char *what = flag ? flag : "checkpoint";
    int fits = 1;
    if (!resume && run_file(arg, "best.ckpt", buf, cap, &fits)) {
        fprintf(stderr, "%s: %s %s: best.ckpt, the model the run kept (its last epoch is "
                "last.ckpt)\n", prog, what, arg);
        return buf;
    }
    if (fits && run_file(arg, "last.ckpt", buf, cap, &fits))
        return buf;
    if (!fits)
        fprintf(stderr, "%s: %s %s: path too long\n", prog, what, arg);
    else
        fprintf(stderr, "%s: %s %s: a folder without last.ckpt, so not a run's folder (give "
                "a run's folder or a checkpoint file)\n", prog, what, arg);
    return NULL;
}

int cli_refuse_existing(const char *prog, const char *flag, const char *path, int force)
{
    if (force || access(path, F_OK) != 0)
        return 0;
    fprintf(stderr, "%s: %s%s%s already exists; pass --force to replace it\n", prog,
            flag ? flag : "", flag ? " " : "", path);
    return 1;
}
