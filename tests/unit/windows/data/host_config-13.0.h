/* Excerpt (written for the farm's tests) of nvidia/cu13/include/crt/host_config.h in the
   nvidia-cuda-crt==13.0.88 win_amd64 wheel: the GNU branch above it and the _WIN32 block.
   Note the #endif comment still says 1910; the check says 1920. */
#if defined(__GNUC__)
#if __GNUC__ > 15
#error -- unsupported GNU version! gcc versions later than 15 are not supported!
#endif /* __GNUC__ > 15 */
#endif /* __GNUC__ */

#if defined(_WIN32)

#if _MSC_VER < 1920 || _MSC_VER >= 1950

#error -- unsupported Microsoft Visual Studio version! Only the versions between 2019 and 2022 (inclusive) are supported! The nvcc flag '-allow-unsupported-compiler' can be used to override this version check.

#endif /* (_MSC_VER < 1910 || _MSC_VER >= 1950) */

#endif /* _WIN32 */
