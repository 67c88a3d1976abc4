/* The kernels of sim/nccl/kernels.cu as nvcc built them, in this
 * library's .nv_fatbin section (where NVIDIA's libraries carry their device
 * code, so easyscale-audit reads it from the library file too); the library
 * loads them with cuModuleLoadData. SIMNCCL_FATBIN is the fatbin's path
 * (module.mk). */
#ifndef SIMNCCL_FATBIN
#error "SIMNCCL_FATBIN (path of the fatbin) must be defined"
#endif
__asm__(".section .nv_fatbin,\"a\"\n"
        ".balign 16\n"
        ".globl simnccl_fatbin\n"
        ".hidden simnccl_fatbin\n"
        "simnccl_fatbin:\n"
        ".incbin \"" SIMNCCL_FATBIN "\"\n"
        ".previous\n");
