/* Shared between kernels/digest.cu (device) and kernels/digest.c (host):
 * the launch shape of the digest hash. */
#ifndef ES_KERNELS_DIGEST_KERNEL_H
#define ES_KERNELS_DIGEST_KERNEL_H

#define ES_DG_BLOCK 256     /* threads per block (a power of two) */
#define ES_DG_MAX_GRID 256  /* blocks at most; a grid stride covers the rest */

#endif
