/* A library that asks the driver for device attributes from its own code:
 * built by tests/device/module.mk under the file names of the callers d2 tells
 * apart (tests/device/identity_test.c): libnvrtc-estest.so (a JIT library),
 * triton/cuda_utils.so (Triton's driver utilities) and
 * libplain-estest.so (anyone else). */
#include <cuda.h>

#pragma GCC diagnostic ignored "-Wdeprecated-declarations" /* cuDeviceComputeCapability */

/* The calls are not tail calls (the shim sees the return address: a tail
 * call would make the caller's caller the one asking). */
static volatile int g_calls;

int es_id_caller_attr(int attr, int dev, int *value)
{
    int r = (int)cuDeviceGetAttribute(value, (CUdevice_attribute)attr, (CUdevice)dev);
    g_calls++;
    return r;
}

int es_id_caller_cc(int dev, int *major, int *minor)
{
    int r = (int)cuDeviceComputeCapability(major, minor, (CUdevice)dev);
    g_calls++;
    return r;
}
