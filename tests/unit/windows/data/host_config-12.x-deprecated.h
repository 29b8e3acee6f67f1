/* Written for the farm's tests: the 12.x layout with a non-empty deprecation range (VS 2017 deprecated). */
#if defined(_WIN32)
#if _MSC_VER < 1910 || _MSC_VER >= 1950
#error -- unsupported Microsoft Visual Studio version! Only the versions between 2017 and 2022 (inclusive) are supported!
#elif _MSC_VER >= 1910 && _MSC_VER < 1920
#pragma message("support for this version of Microsoft Visual Studio has been deprecated!")
#endif
#endif /* _WIN32 */
