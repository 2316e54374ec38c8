/* Small helpers the command-line tools share: option parsing of config
 * keys, the default data path and error printing. */
#ifndef VIT_TOOLS_CLI_H
#define VIT_TOOLS_CLI_H

#include "vit/vit.h"

/* Prints "PROG: MESSAGE" (the last library error) to stderr and returns 1. */
int cli_fail(const char *prog, const char *what);

/* Path of the shipped digits file: $VIT_DIGITS if set, else the source
 * tree's data/digits.csv.gz if it exists, else the installed copy. */
const char *cli_digits_path(void);

/* Parses a strictly positive int option value; prints an error naming the
 * flag and returns 0 on failure. */
int cli_int(const char *prog, const char *flag, const char *text, int lo, int hi, int *out);

/* Ignores SIGXFSZ, so that writing past a file-size limit (ulimit -f) makes
 * write() fail with EFBIG, which the library reports and cleans up after
 * (no temporary file left), instead of the kernel killing the tool in the
 * middle of a write.  Call first thing in main() of a tool that writes files. */
void cli_ignore_file_size_signal(void);

/* Prints the config keys as options (for --help). */
void cli_print_config_keys(FILE *f);

#endif
