/* simcuda architectures: which compiled device code a simulated GPU can run,
 * by NVIDIA's rules.
 *
 * - SASS (a cubin for sm_XY) runs on devices of the same major version X
 *   whose minor version is at least Y ("binary compatibility is guaranteed
 *   from one minor revision to the next one, but not from one minor revision
 *   to the previous one or across major revisions", CUDA C++ Programming
 *   Guide). Arch-specific SASS (sm_90a, sm_100a) runs on that exact compute
 *   capability only; family-specific SASS (sm_100f) follows the plain rule.
 * - PTX for compute_XY is compiled by the driver's JIT for any device of
 *   compute capability X.Y or higher; family-specific PTX (compute_100f) only
 *   for the same major version and a minor at least Y ("compatibility is
 *   guaranteed across minor versions but not major versions"); arch-specific
 *   PTX (compute_90a) only for exactly X.Y. (NVIDIA, "Blackwell and CUDA 12.9
 *   introduce family-specific architecture features", and the nvcc manual.)
 * How images say it: a fatbin entry's flags carry 0x100000 for "a" and
 * 0x200000 for "f" (nvcc 13 output); a raw cubin marks "a" in its
 * .nv.compat section (attribute 0x09 = 1); PTX names its target
 * (".target sm_90a"). */
#include "sim/driver/internal.h"

int sim_arch_runs(int kind, unsigned arch, int arch_specific, int family_specific, int major,
                  int minor)
{
    int tmaj = (int)arch / 10, tmin = (int)arch % 10;
    if (arch < 10)
        return 0;
    if (arch_specific)
        return major == tmaj && minor == tmin;
    if (kind == 2 /* SASS */ || family_specific)
        return major == tmaj && minor >= tmin;
    return major * 10 + minor >= (int)arch; /* PTX, JIT-compiled forward */
}
