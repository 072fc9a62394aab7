/* base/build_info.c — the build's record (build_info.h): the commit from the generated
 * build_commit.h, the options from mp_config.h (meson.build). */
#include "base/build_info.h"

#include "base/build_commit.h"
#include "mp_config.h"

const char *mp_build_commit(void)
{
    return MP_BUILD_COMMIT;
}

const char *mp_build_options(void)
{
    return MP_BUILD_OPTIONS;
}
