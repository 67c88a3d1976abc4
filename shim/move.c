/* The moves seam (shim/move.h): the controller's place / migrate / swap-out
 * / swap-in requests, run by the move orchestrator (context/mover.h) at the
 * EST's next safe point (context/door.h), while the control thread waits
 * for the outcome. */
#include "shim/move.h"

#include "context/door.h"
#include "context/drv.h"
#include "context/memreg.h"
#include "context/mover.h"
#include "context/vhandle.h"
#include "controller/proto.h"
#include "shim/shim.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static uint64_t es_last_epoch;

static uint64_t es_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

/* A slot the controller names: a device ordinal, or a device's UUID
 * ("GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx"). The driver's ordinal, or
 * -1. */
static int es_slot_device(const char *slot)
{
    int n = 0;
    if (!es_drv_ready() || es_drv.cuDeviceGetCount(&n) != CUDA_SUCCESS)
        return -1;
    if (slot[0] >= '0' && slot[0] <= '9') {
        char *end;
        errno = 0;
        long v = strtol(slot, &end, 10);
        return !*end && !errno && v >= 0 && v < n ? (int)v : -1;
    }
    if (strncmp(slot, "GPU-", 4) != 0)
        return -1;
    for (int d = 0; d < n; d++) {
        CUuuid u;
        char s[48];
        if (es_drv.cuDeviceGetUuid_v2(&u, d) != CUDA_SUCCESS)
            continue;
        const unsigned char *b = (const unsigned char *)u.bytes;
        snprintf(s, sizeof(s),
                 "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0],
                 b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13],
                 b[14], b[15]);
        if (strcasecmp(s, slot) == 0)
            return d;
    }
    return -1;
}

int es_move_request(const es_move_t *m, es_move_result_t *r)
{
    static const char *const names[] = { "?", "place", "migrate", "swap-out", "swap-in" };
    uint64_t t0 = es_ns();
    int op = m && m->op > 0 && m->op < ES_MOVE_NOPS ? m->op : 0;
    int rc = 0, dev = ES_MOVER_PARK;
    if (!m || !r || !op)
        return -EINVAL;
    if (!es_vh_on) {
        snprintf(r->reason, sizeof(r->reason), "%s: moves are off (EASYSCALE_MOVE=off, or "
                 "EASYSCALE_DETERMINISM=off)", names[op]);
        return -ENOTSUP;
    }
    if (m->epoch < es_last_epoch) {
        snprintf(r->reason, sizeof(r->reason), "%s: epoch %llu is older than %llu, applied",
                 names[op], (unsigned long long)m->epoch, (unsigned long long)es_last_epoch);
        return -ESTALE;
    }
    int where = es_mover_where_est();
    if (where == -2) {
        snprintf(r->reason, sizeof(r->reason), "%s: the EST holds nothing on a GPU yet",
                 names[op]);
        return -EINVAL;
    }
    if (op != ES_MOVE_SWAP_OUT) {
        dev = es_slot_device(m->slot);
        if (dev < 0) {
            snprintf(r->reason, sizeof(r->reason), "%s: no device \"%s\"", names[op], m->slot);
            return -EINVAL;
        }
    }
    if ((op == ES_MOVE_MIGRATE && where == ES_MOVER_PARK) ||
        (op == ES_MOVE_SWAP_IN && where != ES_MOVER_PARK)) {
        snprintf(r->reason, sizeof(r->reason), "%s: the EST is %s", names[op],
                 where == ES_MOVER_PARK ? "swapped out" : "resident");
        return -EINVAL;
    }
    long tk = es_mover_post_est(dev);
    if (tk < 0) {
        snprintf(r->reason, sizeof(r->reason), "%s: %s", names[op],
                 tk == -EBUSY ? "another move is pending" : strerror((int)-tk));
        return (int)tk;
    }
    /* the EST's next call moves it; a thread inside a long call (a
     * collective) does it at its safe point */
    char msg[256] = "";
    int res = 0;
    if (es_door_result(tk, (es_cfg.move_timeout_s + 5) * 1000, &res, msg, sizeof(msg)) != 0) {
        if (es_door_cancel(tk) == 0) {
            snprintf(r->reason, sizeof(r->reason), "%s: the EST reached no safe point in %d s "
                     "(no CUDA call): not moved", names[op], es_cfg.move_timeout_s + 5);
            return -EBUSY;
        }
        es_door_result(tk, -1, &res, msg, sizeof(msg)); /* it started: wait for it */
    }
    rc = res;
    if (rc == 0)
        es_last_epoch = m->epoch;
    else
        snprintf(r->reason, sizeof(r->reason), "%s: %s", names[op], msg);
    where = es_mover_where_est();
    if (where == ES_MOVER_PARK)
        snprintf(r->slot, sizeof(r->slot), "host");
    else if (rc == 0)
        snprintf(r->slot, sizeof(r->slot), "%s", m->slot);
    es_swap_stats_t st;
    es_mover_last_stats(&st);
    r->bytes = st.bytes_d2h + st.bytes_h2d + st.bytes_d2d;
    r->copy_ns = (uint64_t)(st.ms_copy * 1e6);
    r->sync_ns = (uint64_t)(st.ms_sync * 1e6);
    r->total_ns = es_ns() - t0;
    return rc == 0 ? 0 : rc == -ENOMEM || rc == -EINVAL || rc == -EBUSY ? rc : -EIO;
}

uint64_t es_move_footprint(void)
{
    return es_memreg_footprint();
}
