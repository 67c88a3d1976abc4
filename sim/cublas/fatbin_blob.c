/* The kernels of sim/cublas/kernels.cu as nvcc built them, in this
 * library's .nv_fatbin section (where NVIDIA's libraries carry their device
 * code, so easyscale-audit reads it from the library file too); the library
 * loads them with cuModuleLoadData. SIMCUBLAS_FATBIN is the fatbin's path
 * (module.mk). */
#ifndef SIMCUBLAS_FATBIN
#error "SIMCUBLAS_FATBIN (path of the fatbin) must be defined"
#endif
__asm__(".section .nv_fatbin,\"a\"\n"
        ".balign 16\n"
        ".globl simcublas_fatbin\n"
        ".hidden simcublas_fatbin\n"
        "simcublas_fatbin:\n"
        ".incbin \"" SIMCUBLAS_FATBIN "\"\n"
        ".previous\n");
