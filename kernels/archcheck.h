/* Whether a device-code image can run on a GPU of a compute capability, by
 * the driver's rules: a cubin for sm_XY runs on compute capability X.Z
 * with Z >= Y (same major: binary compatibility within an architecture
 * family only), PTX for compute_XY is JIT-compiled for any X.Y or later.
 * Pure: reads the image with the fatbin reader (fatbin/fatbin.h). */
#ifndef ES_KERNELS_ARCHCHECK_H
#define ES_KERNELS_ARCHCHECK_H

#include <stddef.h>

/* 1 when image (a fatbin, cubin or PTX; size SIZE_MAX if unknown) holds
 * code a device of compute capability major.minor can run, 0 when not,
 * a negative errno for an unreadable image. */
int es_image_runs_on(const void *image, size_t size, int major, int minor);

#endif
