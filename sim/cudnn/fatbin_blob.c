/* The kernels of sim/cudnn/kernels.cu as nvcc built them, in this
 * library's .nv_fatbin section (where NVIDIA's libraries carry their device
 * code, so easyscale-audit reads it from the library file too); the library
 * loads them with cuModuleLoadData. SIMCUDNN_FATBIN is the fatbin's path
 * (module.mk). */
#ifndef SIMCUDNN_FATBIN
#error "SIMCUDNN_FATBIN (path of the fatbin) must be defined"
#endif
__asm__(".section .nv_fatbin,\"a\"\n"
        ".balign 16\n"
        ".globl simcudnn_fatbin\n"
        ".hidden simcudnn_fatbin\n"
        "simcudnn_fatbin:\n"
        ".incbin \"" SIMCUDNN_FATBIN "\"\n"
        ".previous\n");
