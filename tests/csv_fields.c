/*
 * csv_fields - reads a CSV file as RFC 4180 defines it (a field between
 * double quotes may hold commas, CR, LF and doubled quotes; records end
 * in CRLF or LF) and prints one line per record: its fields joined by
 * '|', each quote-free and comma-free field as it is.  For
 * tests/test_photos.sh, which checks what vit_predict --csv wrote without
 * needing Python; exits 1 (said) on a malformed file: a quote inside an
 * unquoted field, text after a closing quote, an unterminated quoted
 * field, or records of different field counts.
 *
 *   csv_fields FILE
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int bad(long rec, const char *why)
{
    fprintf(stderr, "csv_fields: record %ld: %s\n", rec, why);
    return 1;
}

int main(int argc, char **argv)
{
    FILE *f = argc == 2 ? fopen(argv[1], "rb") : NULL;
    if (f == NULL) {
        fprintf(stderr, "usage: csv_fields FILE (readable)\n");
        return 2;
    }
    long rec = 1;
    int fields = 0, want = -1, ch = fgetc(f);
    while (ch != EOF) {
        /* One field. */
        if (ch == '"') {
            for (;;) {
                ch = fgetc(f);
                if (ch == EOF)
                    return bad(rec, "unterminated quoted field");
                if (ch == '"') {
                    ch = fgetc(f);
                    if (ch != '"')
                        break;
                }
                putchar(ch);
            }
        } else {
            while (ch != EOF && ch != ',' && ch != '\r' && ch != '\n') {
                if (ch == '"')
                    return bad(rec, "a quote inside an unquoted field");
                putchar(ch);
                ch = fgetc(f);
            }
        }
        fields++;
        if (ch == ',') {
            putchar('|');
            ch = fgetc(f);
            continue;
        }
        if (ch == '\r')
            ch = fgetc(f);
        if (ch != '\n' && ch != EOF)
            return bad(rec, "text after a closing quote");
        putchar('\n');
        if (want >= 0 && fields != want)
            return bad(rec, "a different number of fields from the header");
        want = fields;
        fields = 0;
        rec++;
        ch = fgetc(f);
    }
    fclose(f);
    return 0;
}
