/* analyzer/validate_model.c — --model checks: node shapes and bytes per expert against the GGUF.
 * The GGUF reader (runtime/gguf.h) has not landed on this branch yet: --model is refused with a
 * clear error rather than silently skipped. */
#include "analyzer/validate.h"

mp_status mp_an_check_model(mp_an_input *in, const char *model_path, mp_an_problems *pb,
                            mp_error *err)
{
    (void)in, (void)pb;
    return mp_fail(err, MP_ERR_UNSUPPORTED, "analyzer: --model %s: model checks need the GGUF "
                   "reader, which this build lacks", model_path);
}
