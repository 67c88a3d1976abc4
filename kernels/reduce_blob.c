/* The collectives' reduction kernel fatbin (built by nvcc from
 * kernels/reduce.cu) embedded in libeasyscale.so. ES_REDUCE_FATBIN is its
 * path (set by kernels/module.mk). */
#ifndef ES_REDUCE_FATBIN
#error "ES_REDUCE_FATBIN (path of the fatbin) must be defined"
#endif
__asm__(".section .rodata\n"
        ".balign 16\n"
        ".globl es_reduce_fatbin\n"
        ".hidden es_reduce_fatbin\n"
        "es_reduce_fatbin:\n"
        ".incbin \"" ES_REDUCE_FATBIN "\"\n"
        ".byte 0\n"
        ".previous\n");
