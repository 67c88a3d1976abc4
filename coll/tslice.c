/* Time-slicing in the virtual collectives (docs/MOVING.md, section 6).
 * An EST that takes turns on its GPU with others (es_mover_tslice) cannot
 * wait for them while it holds the GPU: at a collective (and at the
 * rendezvous of a new communicator) it yields -- parks and passes the turn
 * -- takes part while parked, and comes back at its next turn. While
 * parked its thread makes no driver call: the host transport's copies go
 * to and from the EST's host copies (es_swap_park_read/write) and the
 * steps run in the calling thread. Calls move/ and util.c only. */
#include "coll/coll_int.h"
#include "move/mover.h"
#include "move/swap.h"

#include <errno.h>
#include <stdlib.h>

static __thread int es_parked_vdev = -1;
static __thread int es_parked_host;

int es_coll_parked_vdev(void)
{
    return es_parked_vdev;
}

void es_coll_set_parked_vdev(int vdev)
{
    es_parked_vdev = vdev;
}

int es_coll_parked_host(void)
{
    return es_parked_host;
}

void es_coll_set_parked_host(int on)
{
    es_parked_host = on;
}

/* This thread's collective made its rotation change at its hold. */
static __thread int es_ts_applied;

void es_coll_ts_apply_early(void)
{
    es_mover_ts_apply();
    es_ts_applied = 1;
}

void es_coll_ts_apply(void)
{
    if (es_ts_applied)
        es_ts_applied = 0;
    else
        es_mover_ts_apply();
}

int es_coll_ts_fixed(void)
{
    es_tslice_t *t = es_mover_tslice(NULL);
    return t != NULL && !es_tslice_dynamic(t);
}

int es_coll_ts_yield(void)
{
    es_mover_ts_apply(); /* a rotation the controller started or ended, from here */
    return es_coll_ts_park();
}

int es_coll_ts_park(void)
{
    es_tslice_t *t = es_mover_tslice(NULL);
    if (!t)
        return 0;
    char msg[256] = "";
    if (es_mover_yield(t, msg, sizeof(msg)) != 0) {
        es_coll_error("time-slicing: cannot yield the GPU: %s", msg);
        return -1;
    }
    return 1;
}

int es_coll_ts_resume(void)
{
    int slot;
    es_tslice_t *t = es_mover_tslice(&slot);
    char msg[256] = "";
    for (;;) {
        int rc = es_mover_resume(t, slot, msg, sizeof(msg));
        if (rc == 0)
            return 0;
        if (rc != -ENOMEM) {
            es_coll_error("time-slicing: cannot come back onto GPU %d: %s", slot, msg);
            return -1;
        }
        /* memory the parked ESTs keep on the slot (EASYSCALE_TIME_SLICE_KEEP)
         * may be what is missing: none of them keeps any from now on, this
         * one at once, the others at their next yield */
        if (es_mover_keep_none() && es_tslice_keeping(t)) {
            es_tslice_keep_off(t);
            ES_WARN("time-slicing: no room on GPU %d beside the memory parked ESTs keep "
                    "(EASYSCALE_TIME_SLICE_KEEP is too large for this GPU): no EST of the slot "
                    "keeps memory there from now on", slot);
        }
        /* the previous EST's memory is not gone yet: its turn again later */
        ES_WARN("time-slicing: no room on GPU %d yet (%s): waiting for the next turn", slot, msg);
        char m2[256];
        if (es_mover_yield(t, m2, sizeof(m2)) != 0 && es_mover_where_est() != -1) {
            es_coll_error("time-slicing: %s", m2);
            return -1;
        }
    }
}

CUresult es_coll_parked_copy(int vdev, void *dst, const void *src, size_t n)
{
    void *tmp = malloc(n ? n : 1);
    if (!tmp)
        return CUDA_ERROR_OUT_OF_MEMORY;
    int rc = es_swap_park_read(vdev, tmp, (CUdeviceptr)(uintptr_t)src, n);
    if (rc == 0)
        rc = es_swap_park_write(vdev, (CUdeviceptr)(uintptr_t)dst, tmp, n);
    free(tmp);
    return rc == 0 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}
