/* simcuda: definitions of the functions listed in unsupported.h. This file
 * deliberately does not include cuda.h: each definition ignores its
 * arguments (the caller owns them; on x86-64 and AArch64 the callee may
 * disregard any register or stack arguments) and returns
 * CUDA_ERROR_NOT_SUPPORTED (801), logging its name under SIMCUDA_TRACE=1. */
#include "sim/driver/unsupported.h"

#define SIM_NOT_SUPPORTED 801

void sim_trace(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

#define SIM_U_DEF(name, ver, sym)                                  \
    int sym(void);                                                 \
    int sym(void)                                                  \
    {                                                              \
        sim_trace("%s: not supported by simcuda", #sym);           \
        return SIM_NOT_SUPPORTED;                                  \
    }
#define SIM_UP_DEF(name, ver, sym, pt) SIM_U_DEF(name, ver, sym) SIM_U_DEF(name, ver, pt)
SIM_UNSUPPORTED(SIM_U_DEF, SIM_UP_DEF)
