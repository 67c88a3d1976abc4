/* The digest hash kernel's fatbin (built by nvcc from kernels/digest.cu)
 * embedded in libeasyscale.so. ES_DIGEST_FATBIN is its path (set by
 * kernels/module.mk). */
#ifndef ES_DIGEST_FATBIN
#error "ES_DIGEST_FATBIN (path of the fatbin) must be defined"
#endif
__asm__(".section .rodata\n"
        ".balign 16\n"
        ".globl es_digest_fatbin\n"
        ".hidden es_digest_fatbin\n"
        "es_digest_fatbin:\n"
        ".incbin \"" ES_DIGEST_FATBIN "\"\n"
        ".byte 0\n"
        ".previous\n");
