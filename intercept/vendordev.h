/* The vendor libraries' view of the devices (intercept/vendordev.c): private
 * to intercept/. */
#ifndef ES_INTERCEPT_VENDORDEV_H
#define ES_INTERCEPT_VENDORDEV_H

/* For a lookup from NVIDIA's cuBLAS, cuBLASLt or cuDNN while virtual
 * devices are on: the function to hand out for driver function idx of
 * shim/funcs.h instead of the application's wrapper, or NULL (the
 * application's answer stands). */
void *es_vendor_dev_fn(int idx);

/* For a lookup from the CUDA runtime (which gets the real driver) while
 * virtual devices are on: the function that also fixes the EST's slot when
 * the runtime makes its first context, or NULL (the driver's own). */
void *es_runtime_dev_fn(int idx);

#endif
