/* simcuda cuBLASLt's kernel image (sim/cublaslt/kernels.cu built by nvcc)
 * embedded in the library. SIM_CUBLASLT_FATBIN is its path (module.mk). */
#ifndef SIM_CUBLASLT_FATBIN
#error "SIM_CUBLASLT_FATBIN (path of the fatbin) must be defined"
#endif
__asm__(".section .rodata\n"
        ".balign 16\n"
        ".globl sim_cublaslt_fatbin\n"
        ".hidden sim_cublaslt_fatbin\n"
        "sim_cublaslt_fatbin:\n"
        ".incbin \"" SIM_CUBLASLT_FATBIN "\"\n"
        ".byte 0\n"
        ".previous\n");
