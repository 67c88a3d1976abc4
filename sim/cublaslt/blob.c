/* The kernels of sim/cublaslt/kernels.cu as nvcc built them, in this
 * library's .nv_fatbin section (where NVIDIA's libraries carry their device
 * code, so easyscale-audit reads it from the library file too); the library
 * loads them with cuModuleLoadData. SIM_CUBLASLT_FATBIN is the fatbin's
 * path (module.mk). */
#ifndef SIM_CUBLASLT_FATBIN
#error "SIM_CUBLASLT_FATBIN (path of the fatbin) must be defined"
#endif
__asm__(".section .nv_fatbin,\"a\"\n"
        ".balign 16\n"
        ".globl sim_cublaslt_fatbin\n"
        ".hidden sim_cublaslt_fatbin\n"
        "sim_cublaslt_fatbin:\n"
        ".incbin \"" SIM_CUBLASLT_FATBIN "\"\n"
        ".previous\n");
