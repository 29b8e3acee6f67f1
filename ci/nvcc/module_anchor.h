/* Included first in every .cu file compiled with nvcc older than 12.8 by the farm's container builds:
 * see nvcc-module-anchor next to this file. FARM_MODULE_ANCHOR is unique per source file. */
#ifdef FARM_MODULE_ANCHOR
extern "C" {
__attribute__((visibility("hidden"))) int FARM_MODULE_ANCHOR = 0;
}
#endif
