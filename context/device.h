/* Canonical device attributes for d2: every GPU model reports the same
 * figures for the attributes that programs size their work (and therefore
 * their reductions) from.
 *
 * The canonical device is the element-wise minimum over the models named in
 * EASYSCALE_CANONICAL_DEVICE (compute capability compared as a pair), so
 * the answer depends on the set of models of the job, never on the GPU a
 * process runs on or the order of the list. Unset: a built-in V100-like
 * device (80 SMs, 7.0). The device name is not canonicalised (it is for
 * people and logs; the vendor libraries identify the model by it).
 */
#ifndef ES_CONTEXT_DEVICE_H
#define ES_CONTEXT_DEVICE_H

#include <stddef.h>

/* Parses a model list ("a100,v100"; known: p100 v100 t4 a100 a10 l4 h100
 * h200; case-insensitive; no empty entries; NULL or "" = built-in) and
 * makes it the canonical device. Returns 0 or -EINVAL with a message. */
int es_device_init(const char *list, char *msg, size_t msglen);

/* The canonical value of attribute attr (a CUdevice_attribute): returns 1
 * and sets *value when the attribute is canonicalised, 0 otherwise. */
int es_device_canonical_attr(int attr, int *value);

/* Canonical compute capability. */
void es_device_canonical_cc(int *major, int *minor);

#endif
