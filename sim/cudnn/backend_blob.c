/* simcuda cuDNN backend's kernel image (sim/cudnn/backend_kernels.cu built
 * by nvcc) embedded in the library. SIM_CUDNN_BK_FATBIN is its path. */
#ifndef SIM_CUDNN_BK_FATBIN
#error "SIM_CUDNN_BK_FATBIN (path of the fatbin) must be defined"
#endif
__asm__(".section .rodata\n"
        ".balign 16\n"
        ".globl sim_cudnn_bk_fatbin\n"
        ".hidden sim_cudnn_bk_fatbin\n"
        "sim_cudnn_bk_fatbin:\n"
        ".incbin \"" SIM_CUDNN_BK_FATBIN "\"\n"
        ".byte 0\n"
        ".previous\n");
