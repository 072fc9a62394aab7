/* base/build_info.h — which build of moeplan this is, beside its release version (MP_VERSION,
 * meson's project version): the git commit of the source tree and the build options that change
 * what the binary computes or checks. `moeplan --version`, traces (run.moeplan_commit) and bench
 * JSON (moeplan_commit) take them from here. */
#ifndef MP_BASE_BUILD_INFO_H
#define MP_BASE_BUILD_INFO_H

/* `git describe --tags --always --dirty` of the source tree when it was built, e.g. "a12578e" or
 * "a12578e-dirty"; "unknown" for a tree that is not a git checkout of its own (a release
 * tarball). Regenerated at every build, so it never names an older commit than the code's. */
const char *mp_build_commit(void);

/* The options that matter, as key=value words: "buildtype=release cuda=enabled sm_arch=90
 * cupti=yes sanitize=none fuzz=no" (cuda=disabled has no sm_arch). */
const char *mp_build_options(void);

#endif
