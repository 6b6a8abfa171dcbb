/* Neural Pose Editor's compiled kernels: the per-pose stages where numpy's per-call overhead,
 * not arithmetic, sets the time (a few hundred numpy calls on arrays of a few dozen numbers).
 *
 * Plain C99 with the C library's math only, no Python API: loaded with ctypes, so one build
 * per platform serves every Python version, and build_native.py cross-compiles every
 * platform's library from one machine (zig cc). Each function is the numpy algorithm it
 * replaces written pose by pose and bone by bone; the tests hold the two to 1e-9, and the
 * loader (native.py) falls back to numpy where the library is missing or disagrees.
 *
 * Arrays are C-contiguous float64 / int64, quaternions w, x, y, z; matrices row-major and
 * acting on column vectors (v' = R v), as in quaternions.py.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#ifdef _WIN32
#define NPE_API __declspec(dllexport)
#else
#define NPE_API __attribute__((visibility("default")))
#endif

/* Bumped whenever a signature changes: the loader refuses a library of another version. */
#define NPE_ABI_VERSION 9
/* quaternions.EPS: vectors shorter than this have no direction (the loader checks it). */
#define EPS 1e-12

NPE_API int64_t npe_abi_version(void) { return NPE_ABI_VERSION; }
NPE_API double npe_eps(void) { return EPS; }

/* The kernels, one idea per file, compiled as this one translation unit (static helpers
 * shared, one library): the order matters, each part uses those above it. */
#include "npe_algebra.c"
#include "npe_kinematics.c"
#include "npe_reach.c"
#include "npe_refine.c"
#include "npe_networks.c"
