/* The swap checksum kernel's fatbin (built by nvcc from kernels/swapsum.cu)
 * embedded in the object that links it. ES_SWAPSUM_FATBIN is its path (set
 * by kernels/module.mk). */
#ifndef ES_SWAPSUM_FATBIN
#error "ES_SWAPSUM_FATBIN (path of the fatbin) must be defined"
#endif
__asm__(".section .rodata\n"
        ".balign 16\n"
        ".globl es_swapsum_fatbin\n"
        ".hidden es_swapsum_fatbin\n"
        "es_swapsum_fatbin:\n"
        ".incbin \"" ES_SWAPSUM_FATBIN "\"\n"
        ".byte 0\n"
        ".previous\n");
