/* Placement and virtual devices (see vdev.h): the slot of this EST and the
 * translation between the application's virtual device ordinals and the
 * physical devices. */
#include "device/vdev.h"
#include "shim/config.h"
#include "shim/log.h"
#include "shim/real.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static pthread_once_t es_vdev_once = PTHREAD_ONCE_INIT;
static int es_vdev_rc;
static char es_vdev_msg[256];
static int es_vdev_phys_n = -1;      /* physical count, -1 before init */
static int es_vdev_local_world;      /* LOCAL_WORLD_SIZE, 0 unknown */
static int es_vdev_slot_env;         /* the slot came from EASYSCALE_SLOT */
static int es_vdev_slot_v = -1;      /* atomic: physical slot */
static int es_vdev_sel_v = -1;       /* atomic: selected virtual ordinal */

int es_vdev_active(void)
{
    return es_cfg.collectives == ES_COLL_VIRTUAL;
}

int es_vdev_count_for(int phys, int local_world)
{
    return local_world > phys ? local_world : phys;
}

int es_vdev_share_for(int phys, int local_world, int slot, int slot_from_env)
{
    if (phys <= 0 || local_world <= 0 || slot < 0 || slot >= phys)
        return 1;
    if (slot_from_env)
        return (local_world + phys - 1) / phys;
    int k = 0;
    for (int r = 0; r < local_world; r++)
        k += r % phys == slot;
    return k > 0 ? k : 1;
}

/* LOCAL_WORLD_SIZE as torchrun sets it; a bad value is said and ignored (it
 * is not ours to refuse). */
static int es_vdev_parse_local_world(void)
{
    const char *v = getenv("LOCAL_WORLD_SIZE");
    if (!v || !*v)
        return 0;
    char *end = NULL;
    errno = 0;
    long n = (*v >= '0' && *v <= '9') ? strtol(v, &end, 10) : 0;
    if (!end || *end || errno || n < 1 || n > 4096) {
        ES_WARN("LOCAL_WORLD_SIZE=\"%.32s\" is not an integer in [1, 4096]: ignored for the "
                "virtual device count", v);
        return 0;
    }
    return (int)n;
}

static int es_vdev_uuid_eq(const CUuuid *u, const char *text)
{
    /* text: GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx (syntax checked by config.c) */
    char hex[33];
    int k = 0;
    for (const char *p = text + 4; *p && k < 32; p++)
        if (*p != '-')
            hex[k++] = *p;
    hex[k] = '\0';
    for (int i = 0; i < 16; i++) {
        char b[3] = { hex[2 * i], hex[2 * i + 1], 0 };
        if ((unsigned char)u->bytes[i] != (unsigned)strtoul(b, NULL, 16))
            return 0;
    }
    return 1;
}

static void es_vdev_do_init(void)
{
    int n = 0;
    if (ES_REAL(cuda, cuDeviceGetCount)(&n) != CUDA_SUCCESS || n < 1) {
        /* No device: nothing to place; the application will find out. */
        es_vdev_phys_n = 0;
        return;
    }
    es_vdev_local_world = es_vdev_parse_local_world();
    if (es_cfg.slot[0]) {
        int slot = -1;
        if (es_cfg.slot[0] >= '0' && es_cfg.slot[0] <= '9') {
            long s = strtol(es_cfg.slot, NULL, 10);
            if (s < n)
                slot = (int)s;
        } else {
            for (int d = 0; d < n && slot < 0; d++) {
                CUuuid u;
                CUdevice dev;
                if (ES_REAL(cuda, cuDeviceGet)(&dev, d) == CUDA_SUCCESS &&
                    ES_REAL(cuda, cuDeviceGetUuid_v2)(&u, dev) == CUDA_SUCCESS &&
                    es_vdev_uuid_eq(&u, es_cfg.slot))
                    slot = d;
            }
        }
        if (slot < 0) {
            snprintf(es_vdev_msg, sizeof(es_vdev_msg),
                     "EASYSCALE_SLOT=%s names no visible device (%d visible)", es_cfg.slot, n);
            es_vdev_rc = -ENODEV;
            es_vdev_phys_n = n;
            return;
        }
        es_vdev_slot_env = 1;
        __atomic_store_n(&es_vdev_slot_v, slot, __ATOMIC_RELEASE);
    }
    __atomic_store_n(&es_vdev_phys_n, n, __ATOMIC_RELEASE);
    ES_INFO("virtual devices: %d physical, %d virtual%s%s", n,
            es_vdev_count_for(n, es_vdev_local_world), es_vdev_slot_env ? ", slot " : "",
            es_vdev_slot_env ? es_cfg.slot : "");
}

int es_vdev_init(char *msg, size_t msglen)
{
    if (!es_vdev_active())
        return 0;
    pthread_once(&es_vdev_once, es_vdev_do_init);
    if (es_vdev_rc && msg && msglen)
        snprintf(msg, msglen, "%s", es_vdev_msg);
    return es_vdev_rc;
}

static int es_vdev_phys_count(void)
{
    return __atomic_load_n(&es_vdev_phys_n, __ATOMIC_ACQUIRE);
}

int es_vdev_count(int phys)
{
    if (!es_vdev_active())
        return phys;
    return es_vdev_count_for(phys, es_vdev_local_world);
}

CUdevice es_vdev_phys(CUdevice v)
{
    int p = es_vdev_phys_count();
    if (!es_vdev_active() || p <= 0 || v < 0 || v >= es_vdev_count_for(p, es_vdev_local_world))
        return v;
    int slot = __atomic_load_n(&es_vdev_slot_v, __ATOMIC_ACQUIRE);
    return slot >= 0 ? slot : v % p;
}

void es_vdev_select(CUdevice v)
{
    int p = es_vdev_phys_count();
    if (!es_vdev_active() || p <= 0 || v < 0 || v >= es_vdev_count_for(p, es_vdev_local_world))
        return;
    int none = -1;
    if (__atomic_compare_exchange_n(&es_vdev_sel_v, &none, (int)v, 0, __ATOMIC_ACQ_REL,
                                    __ATOMIC_ACQUIRE)) {
        none = -1;
        __atomic_compare_exchange_n(&es_vdev_slot_v, &none, (int)(v % p), 0, __ATOMIC_ACQ_REL,
                                    __ATOMIC_ACQUIRE);
        ES_INFO("virtual device %d selected: slot %d (%d ESTs on it)", (int)v,
                es_vdev_slot(), es_vdev_share());
    }
}

CUdevice es_vdev_virt(CUdevice phys)
{
    if (!es_vdev_active())
        return phys;
    int slot = __atomic_load_n(&es_vdev_slot_v, __ATOMIC_ACQUIRE);
    int sel = __atomic_load_n(&es_vdev_sel_v, __ATOMIC_ACQUIRE);
    return (slot >= 0 && sel >= 0 && phys == slot) ? sel : phys;
}

int es_vdev_share(void)
{
    if (!es_vdev_active())
        return 1;
    return es_vdev_share_for(es_vdev_phys_count(), es_vdev_local_world, es_vdev_slot(),
                             es_vdev_slot_env);
}

void es_vdev_set_slot(int phys)
{
    if (!es_vdev_active() || phys < 0 || phys >= es_vdev_phys_count())
        return;
    __atomic_store_n(&es_vdev_slot_v, phys, __ATOMIC_RELEASE);
}

int es_vdev_slot(void)
{
    return __atomic_load_n(&es_vdev_slot_v, __ATOMIC_ACQUIRE);
}

int es_vdev_selected(void)
{
    return __atomic_load_n(&es_vdev_sel_v, __ATOMIC_ACQUIRE);
}
