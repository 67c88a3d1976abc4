/* The portable kernels' fatbin (built by nvcc from kernels/portable.cu)
 * embedded in libeasyscale.so. ES_PORTABLE_FATBIN is its path (set by
 * shim/module.mk). */
#ifndef ES_PORTABLE_FATBIN
#error "ES_PORTABLE_FATBIN (path of the fatbin) must be defined"
#endif
__asm__(".section .rodata\n"
        ".balign 16\n"
        ".globl es_portable_fatbin\n"
        ".hidden es_portable_fatbin\n"
        "es_portable_fatbin:\n"
        ".incbin \"" ES_PORTABLE_FATBIN "\"\n"
        ".byte 0\n"
        ".previous\n");
