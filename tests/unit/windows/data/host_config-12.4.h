/* Excerpt (written for the farm's tests) of nvidia/cuda_nvcc/include/crt/host_config.h in
   nvidia-cuda-nvcc-cu12==12.4.131 (win_amd64; that wheel has no nvcc.exe, only headers and ptxas).
   12.x also has a deprecation range, empty in 12.4 (1910 <= v < 1910). */
#if defined(_WIN32)

#if _MSC_VER < 1910 || _MSC_VER >= 1950

#error -- unsupported Microsoft Visual Studio version! Only the versions between 2017 and 2022 (inclusive) are supported! The nvcc flag '-allow-unsupported-compiler' can be used to override this version check.

#elif _MSC_VER >= 1910 && _MSC_VER < 1910

#pragma message("support for this version of Microsoft Visual Studio has been deprecated! Only the versions between 2017 and 2022 (inclusive) are supported!")

#endif /* (_MSC_VER < 1910 || _MSC_VER >= 1950) || (_MSC_VER >= 1910 && _MSC_VER < 1910) */

#endif /* _WIN32 */
