/* Helpers shared by the command-line tools; see cli.h. */
#include "cli.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int cli_fail(const char *prog, const char *what)
{
    if (what)
        fprintf(stderr, "%s: %s: %s\n", prog, what, vit_last_error());
    else
        fprintf(stderr, "%s: %s\n", prog, vit_last_error());
    return 1;
}

void cli_ignore_file_size_signal(void)
{
#ifdef SIGXFSZ
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = SIG_IGN;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGXFSZ, &sa, NULL);
#endif
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

void cli_print_config_keys(FILE *f)
{
    const char *key, *help;
    vit_config d;
    char buf[4096];
    vit_config_default(&d);
    vit_config_format(&d, buf, sizeof buf);
    for (int i = 0; (help = vit_config_key_help(i, &key)); i++) {
        char flag[64];
        snprintf(flag, sizeof flag, "--%s", key);
        for (char *p = flag + 2; *p; p++)
            if (*p == '_')
                *p = '-';
        /* default value: the line "key = value" of the formatted defaults */
        const char *line = strstr(buf, key);
        char def[64] = "";
        if (line && (line = strchr(line, '='))) {
            snprintf(def, sizeof def, "%s", line + 2);
            def[strcspn(def, "\n")] = 0;
        }
        fprintf(f, "  %-20s %s (default %s)\n", flag, help, def);
    }
}
