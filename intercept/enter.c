/* The entry path's slow half (intercept/enter.h) and the start-up hook the
 * spine calls (shim/hooks.h). */
#include "intercept/enter.h"

#include "device/device.h"
#include "shim/config.h"
#include "shim/hooks.h"

void es_enter_slow(int lib, int idx, int door)
{
    if (__atomic_load_n(&es_slow[lib], __ATOMIC_ACQUIRE))
        es_slowpath(lib, idx);
    if (door)
        es_door_slow();
}

int es_intercept_start(char *msg, size_t msglen)
{
    return es_device_init(es_cfg.canonical, msg, msglen);
}
