/* Excerpt (written for the farm's tests) of crt/host_config.h in nvidia-cuda-crt==13.5.37 (win_amd64):
   the Windows check is 13.2's; only the gcc/clang limits moved (gcc 16, clang 22). */
#if __GNUC__ > 16
#error -- unsupported GNU version! gcc versions later than 16 are not supported!
#endif /* __GNUC__ > 16 */

#if defined(_WIN32)

#if _MSC_VER < 1920 || _MSC_VER >= 1960

#error -- unsupported Microsoft Visual Studio version! Only the versions between 2019 and 2026 (inclusive) are supported! The nvcc flag '-allow-unsupported-compiler' can be used to override this version check.

#endif /* (_MSC_VER < 1910 || _MSC_VER >= 1960) */

#endif /* _WIN32 */
