/*
 * Fuzz harness: the safetensors importer (vit_safetensors_load), a parser
 * of files that come from outside (PyTorch, other tools).
 *
 * The input is a safetensors file.  Checked besides memory safety: a
 * failure returns a known code with a message and leaves *model NULL; a
 * successful load yields a model whose parameters all came from the file
 * (4 bytes each) and are finite, and which saves and loads back to the
 * same parameters and config (the export of an import is the canonical
 * file, so it must re-import exactly).
 */
#include <math.h>

#include "fuzz_util.h"
#include "vit/safetensors.h"

static void check_model(vit_model *m, size_t size)
{
    size_t n = vit_model_param_count(m);
    FUZZ_CHECK(n >= 1 && n <= size / 4);
    const vit_real *p = vit_model_params(m);
    for (size_t i = 0; i < n; i++)
        FUZZ_CHECK(isfinite((double)p[i]));
}

static void check_round_trip(vit_model *m)
{
    char path[512];
    vit_model *back = NULL;
    FUZZ_CHECK(vit_safetensors_save(m, NULL, NULL, fuzz_path(path, sizeof path, "copy.safetensors"),
                                    NULL) ==
               VIT_OK);
    FUZZ_CHECK(vit_safetensors_load(path, &back) == VIT_OK);
    size_t n = vit_model_param_count(m);
    FUZZ_CHECK(vit_model_param_count(back) == n);
    FUZZ_CHECK(memcmp(vit_model_params(m), vit_model_params(back), n * sizeof(vit_real)) == 0);
    char a[4096], b[4096];
    FUZZ_CHECK(vit_config_format(vit_model_config(m), NULL, a, sizeof a) > 0);
    FUZZ_CHECK(vit_config_format(vit_model_config(back), NULL, b, sizeof b) > 0);
    FUZZ_CHECK(strcmp(a, b) == 0);
    vit_model_free(back);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char path[512];
    fuzz_path(path, sizeof path, "in.safetensors");
    fuzz_write_file(path, data, size);
    vit_model *m = (vit_model *)&m; /* any non-NULL value: must become NULL on failure */
    int rc = vit_safetensors_load(path, &m);
    if (rc != VIT_OK) {
        FUZZ_CHECK_FAILURE(rc);
        FUZZ_CHECK(m == NULL);
        return 0;
    }
    FUZZ_CHECK(m != NULL);
    check_model(m, size);
    check_round_trip(m);
    vit_model_free(m);
    return 0;
}
