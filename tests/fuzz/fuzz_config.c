/*
 * Fuzz harness: the model/recipe config parser (vit_config_parse and
 * vit_config_load).
 *
 * The input is config text.  It is parsed from a NUL-terminated copy (cut
 * at the first NUL, as a C string would be) and loaded from a file (where
 * a NUL byte or more than 16 KiB must be rejected).  Checked besides
 * memory safety: failures leave a message; the two ways agree on inputs
 * without NUL bytes; a parsed config, formatted back to text and parsed
 * again, formats to the same text; the parameter count of a config is 0
 * exactly when vit_config_check rejects it.
 */
#include "fuzz_util.h"
#include "vit/model.h"

#define FORMAT_CAP 4096

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char path[512], a[FORMAT_CAP], b[FORMAT_CAP];
    vit_config cfg, again, from_file;
    vit_train_config tc, tc_again, tc_file;
    char *text = malloc(size + 1);
    FUZZ_CHECK(text != NULL);
    memcpy(text, data, size);
    text[size] = '\0';

    vit_config_default(&cfg);
    vit_train_config_default(&tc);
    int rc = vit_config_parse(&cfg, &tc, text, "fuzz.cfg");
    if (rc != VIT_OK)
        FUZZ_CHECK_FAILURE(rc);

    fuzz_write_file(fuzz_path(path, sizeof path, "fuzz.cfg"), data, size);
    vit_config_default(&from_file);
    vit_train_config_default(&tc_file);
    int rc_file = vit_config_load(&from_file, &tc_file, path);
    if (rc_file != VIT_OK)
        FUZZ_CHECK_FAILURE(rc_file);
    if (memchr(data, 0, size) == NULL && size < 16383)
        FUZZ_CHECK((rc == VIT_OK) == (rc_file == VIT_OK));

    if (rc == VIT_OK) {
        int n = vit_config_format(&cfg, &tc, a, sizeof a);
        FUZZ_CHECK(n > 0 && (size_t)n < sizeof a);
        vit_config_default(&again);
        vit_train_config_default(&tc_again);
        FUZZ_CHECK(vit_config_parse(&again, &tc_again, a, "formatted") == VIT_OK);
        FUZZ_CHECK(vit_config_format(&again, &tc_again, b, sizeof b) == n);
        FUZZ_CHECK(strcmp(a, b) == 0);
        if (rc_file == VIT_OK) {
            FUZZ_CHECK(vit_config_format(&from_file, &tc_file, b, sizeof b) == n);
            FUZZ_CHECK(strcmp(a, b) == 0);
        }
        int ok = vit_config_check(&cfg) == VIT_OK;
        FUZZ_CHECK(ok == (vit_config_param_count(&cfg) > 0));
    }
    free(text);
    return 0;
}
