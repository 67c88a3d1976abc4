/* d2's device identity: the attributes programs size their work (and so
 * their reductions) from are reported as those of the job's canonical
 * device, the least capable model of the job's set, so every process of
 * the job makes the same choices whatever GPU it runs on.
 *
 * The canonical device is the element-wise minimum over the models named in
 * EASYSCALE_CANONICAL_DEVICE (compute capability compared as a pair), so
 * the answer depends on the set of models of the job, never on the GPU a
 * process runs on or the order of the list. Unset: each device is its own
 * canonical device (a plain d2 run on one model reports the truth).
 *
 * Values are only ever lowered: a device reports min(real, canonical) for
 * each attribute (and the smaller compute capability), never more than the
 * GPU has (a limit a program relied on and the GPU lacks would fail at
 * launch). The compute capability stays real for the code generators and
 * loaders that must produce or pick code the GPU can run: NVIDIA's JIT
 * libraries (libnvrtc, libnvJitLink, libnvptxcompiler; today they reach the
 * driver only through cuGetExportTable, which the shim does not touch, so
 * this is a guard for any direct query), Triton's driver utilities and
 * launchers (cuda_utils*.so, __triton_launcher*.so: shared memory and SM
 * figures are still lowered for them, the autotuner's limits), and the
 * vendor libraries (which d2 hands the real driver functions). The
 * driver's own module loads check the real architecture inside the
 * driver. The device name is not changed (it is for people and logs; the
 * vendor libraries identify the model by it).
 */
#ifndef ES_DEVICE_DEVICE_H
#define ES_DEVICE_DEVICE_H

#include <stddef.h>

/* Parses a model list ("a100,t4"; known: t4 a100 a10 l4 h100 h200 b200, the
 * GPUs CUDA 13 supports; case-insensitive; no empty entries; NULL or "" =
 * none: every device reports itself) and makes it the canonical device.
 * Returns 0 or -EINVAL with a message. */
int es_device_init(const char *list, char *msg, size_t msglen);

/* 1 when a canonical device is set (a model list was given). */
int es_device_canonical_set(void);

/* The canonical value of a lowered attribute (a CUdevice_attribute): 1 and
 * *value when attr is one d2 lowers and a canonical device is set, else 0.
 * The compute capability is not among these (see es_device_lower_cc). */
int es_device_canonical_attr(int attr, int *value);

/* The canonical compute capability (99.99 when none is set). */
void es_device_canonical_cc(int *major, int *minor);

/* Reads one real attribute of a device (0 on success). */
typedef int (*es_attr_query_fn)(int attr, int dev, int *value);

/* d2's answer to cuDeviceGetAttribute(attr, dev) called from address
 * caller, given the real answer in *value: lowered to the canonical
 * device's when that is smaller. For the compute capability attributes the
 * pair is compared (the other half read with query), and a caller that
 * must see the real architecture keeps it; a vendor library keeps every
 * real value. Returns 1 when *value changed. */
int es_device_lower_attr(int attr, int dev, int *value, const void *caller,
                         es_attr_query_fn query);

/* The same for cuDeviceComputeCapability: the real pair in place. */
int es_device_lower_cc(int *major, int *minor, const void *caller);

/* Who is asking, by the file of the code at address caller:
 * ES_CALLER_VENDOR (cuBLAS, cuBLASLt, cuDNN, NCCL: every value real),
 * ES_CALLER_CODEGEN (JIT libraries, Triton's utilities and launchers: the
 * compute capability real), ES_CALLER_APP (everyone else). */
enum { ES_CALLER_APP = 0, ES_CALLER_CODEGEN, ES_CALLER_VENDOR };
int es_device_caller_kind(const void *caller);

#endif
