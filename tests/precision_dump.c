/*
 * tests/precision_dump.c - runs the precision cases with the float64 library
 * and prints every output and gradient, for test_precision (float32) to
 * compare against.  Usage: precision_dump [CASE...]  (no argument: all).
 *
 * Output, one block per tensor:
 *   tensor NAME COUNT
 *   COUNT lines, each one value printed with %.17g (round-trips a double)
 * A case whose library call fails prints instead
 *   error CASE STATUS_NAME MESSAGE
 * and the last line is "end".
 */
#include <stdio.h>
#include <stdlib.h>

#include "precision_cases.h"

static void print_tensor(void *ctx, const char *name, const vit_real *v, size_t n)
{
    FILE *f = ctx;
    fprintf(f, "tensor %s %zu\n", name, n);
    for (size_t i = 0; i < n; i++)
        fprintf(f, "%.17g\n", (double)v[i]);
}

static void run(int i)
{
    int rc = pc_run_case(i, print_tensor, stdout);
    if (rc != VIT_OK)
        printf("error %s %s %s\n", pc_case_name(i), vit_status_name(rc), vit_last_error());
}

int main(int argc, char **argv)
{
    if (vit_real_size() != 8 || sizeof(vit_real) != 8) {
        fprintf(stderr, "precision_dump: must be built against the float64 library\n");
        return EXIT_FAILURE;
    }
    if (argc == 1) {
        for (int i = 0; i < pc_case_count(); i++)
            run(i);
    } else {
        for (int a = 1; a < argc; a++) {
            int i = pc_case_find(argv[a]);
            if (i < 0) {
                fprintf(stderr, "precision_dump: unknown case '%s'\n", argv[a]);
                return EXIT_FAILURE;
            }
            run(i);
        }
    }
    printf("end\n");
    return fflush(stdout) == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
