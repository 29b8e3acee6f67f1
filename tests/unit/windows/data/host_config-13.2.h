/* Excerpt (written for the farm's tests) of crt/host_config.h in nvidia-cuda-crt==13.2.86 (win_amd64). */
#if defined(_WIN32)

#if _MSC_VER < 1920 || _MSC_VER >= 1960

#error -- unsupported Microsoft Visual Studio version! Only the versions between 2019 and 2026 (inclusive) are supported! The nvcc flag '-allow-unsupported-compiler' can be used to override this version check.

#endif /* (_MSC_VER < 1910 || _MSC_VER >= 1960) */

#endif /* _WIN32 */
