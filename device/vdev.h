/* Placement and virtual devices: which physical GPU (the slot) an EST runs
 * on, and the device numbering the application sees.
 *
 * Active while the collectives are virtual (EASYSCALE_COLLECTIVES, default
 * at d1/d2); otherwise every function here is the identity and the
 * application sees the driver's devices.
 *
 * - Virtual device count: max(P, LOCAL_WORLD_SIZE), P the physical count
 *   the driver reports (after CUDA_VISIBLE_DEVICES), so a torchrun-style
 *   job of N ESTs can select device LOCAL_RANK on fewer GPUs.
 * - The slot: EASYSCALE_SLOT (a physical ordinal or the device's UUID
 *   "GPU-..."), else the first device the application makes a context on
 *   (cuDevicePrimaryCtxRetain, cuCtxCreate), modulo P. Once the slot is
 *   fixed every virtual ordinal stands for it; before that, virtual
 *   ordinal v stands for physical v % P (the device selecting v would
 *   give).
 * - CUdevice values handed to the application are virtual ordinals
 *   (cuDeviceGet returns the ordinal asked for); every query taking a
 *   CUdevice translates it to the physical device (es_vdev_phys); a device
 *   returned by the driver (cuCtxGetDevice, a pointer's device ordinal) is
 *   translated back (es_vdev_virt: the slot reads as the virtual ordinal the
 *   application selected).
 * - Memory share: cuMemGetInfo divides the slot's total and free memory by
 *   the number of ESTs placed on it (es_vdev_share).
 *
 * Thread-safe; lock-free after initialisation.
 */
#ifndef ES_DEVICE_VDEV_H
#define ES_DEVICE_VDEV_H

#include <cuda.h>
#include <stddef.h>

/* Whether virtual devices are on (the configuration; cheap). */
int es_vdev_active(void);

/* Called after a successful cuInit: reads the physical devices and resolves
 * EASYSCALE_SLOT once. Returns 0, or -ENODEV with a one-line explanation in
 * msg when EASYSCALE_SLOT names no visible device (the caller exits with
 * status 2: a configuration error). Repeated calls return the first
 * result. */
int es_vdev_init(char *msg, size_t msglen);

/* Pure parts, exposed for the unit tests: the count the application sees
 * for P physical devices and local world size L (<= 0: unknown); the
 * number of ESTs a slot holds (local ranks r < L with r % P == slot, or
 * ceil(L / P) when the slot was given by EASYSCALE_SLOT; 1 when L is
 * unknown). */
int es_vdev_count_for(int phys, int local_world);
int es_vdev_share_for(int phys, int local_world, int slot, int slot_from_env);

/* The virtual device count for a physical count (identity when inactive). */
int es_vdev_count(int phys);

/* The physical device a virtual CUdevice stands for (values outside
 * [0, count) are returned unchanged: the driver then refuses them). */
CUdevice es_vdev_phys(CUdevice v);

/* The application makes a context on virtual device v: fixes the slot
 * (v % P) unless already fixed. */
void es_vdev_select(CUdevice v);

/* The virtual ordinal a physical device reads as. */
CUdevice es_vdev_virt(CUdevice phys);

/* ESTs sharing this EST's slot (>= 1): cuMemGetInfo's divisor. */
int es_vdev_share(void);

/* The physical slot, or -1 while not fixed; the selected virtual ordinal,
 * or -1. */
int es_vdev_slot(void);
int es_vdev_selected(void);

/* The EST now runs on physical device phys (it was moved there:
 * docs/MOVING.md): every virtual ordinal answers for it from now on. */
void es_vdev_set_slot(int phys);

#endif
