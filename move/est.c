/* Moving this process's EST from the shim's side (docs/MOVING.md): the
 * configuration (EASYSCALE_MOVE and friends) applied at start-up, the
 * signal that requests a move (EASYSCALE_MOVE_SIGNAL: sigqueue's value is
 * the target device, -1 to park; a plain signal toggles parked / back),
 * the control hook easyscale_move (shim/easyscale.h), and the controller's
 * moves seam (shim/move.h: place, migrate, swap-out, swap-in run at the
 * EST's next safe point while the control thread waits for the outcome). */
#include "shim/config.h"
#include "shim/log.h"
#include "shim/export.h"
#include "shim/easyscale.h"
#include "shim/move.h"
#include "wire/proto.h"
#include "move/drv.h"
#include "move/memreg.h"
#include "move/door.h"
#include "move/mover.h"
#include "device/vdev.h"
#include "move/swap.h"
#include "move/tslice.h"
#include "move/vhandle.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

static void es_move_signal(int sig, siginfo_t *si, void *uc)
{
    (void)sig;
    (void)uc;
    int target = si && si->si_code == SI_QUEUE ? si->si_value.sival_int : ES_MOVER_TOGGLE;
    es_mover_signal_est(target);
    es_door_request_from_signal();
}

static void es_move_report(int rc, int dev, const char *msg, const es_swap_stats_t *st)
{
    /* the virtual devices answer for the new slot from now on */
    if (rc == 0 && dev >= 0)
        es_vdev_set_slot(dev);
    char where[32];
    if (dev == ES_MOVER_PARK)
        snprintf(where, sizeof(where), "host memory");
    else
        snprintf(where, sizeof(where), "device %d", dev);
    if (rc == 0)
        ES_INFO("moved to %s in %.1f ms (%.1f MiB copied, %.1f MiB unchanged)", where, st->ms,
                (st->bytes_d2h + st->bytes_h2d + st->bytes_d2d) / 1048576.0,
                st->bytes_skipped / 1048576.0);
    else if (rc == -EINPROGRESS)
        ES_INFO("move to %s: %s", where, msg);
    else
        ES_WARN("move to %s failed: %s", where, msg);
}

static int es_move_resolve(int vdev)
{
    return es_vdev_active() ? es_vdev_phys(vdev) : vdev;
}

void es_move_setup(void);
void es_move_setup(void)
{
    es_vh_on = es_cfg.move != ES_MOVE_OFF;
    if (!es_vh_on)
        return;
    es_swap_opts_t o;
    es_swap_get_opts(&o);
    o.streams = es_cfg.swap_streams;
    o.sums = es_cfg.swap_sums;
    o.keep = es_cfg.ts_keep;
    es_swap_set_opts(&o);
    es_door_set_timeout_ms(es_cfg.move_timeout_s * 1000);
    es_mover_init();
    es_mover_set_report(es_move_report);
    /* several ESTs' ordinals on one GPU: a virtual device's real device,
     * until a move sets it, is the one device/vdev.h gives it */
    es_memreg_set_resolver(es_move_resolve);
    if (es_cfg.move_signal) {
        struct sigaction sa;
        memset(&sa, 0, sizeof(sa));
        sa.sa_sigaction = es_move_signal;
        sa.sa_flags = SA_SIGINFO | SA_RESTART;
        sigemptyset(&sa.sa_mask);
        if (sigaction(es_cfg.move_signal, &sa, NULL) != 0)
            ES_WARN("EASYSCALE_MOVE_SIGNAL: cannot install the handler: %s", strerror(errno));
    }
}

/* ---- time-slicing (EASYSCALE_TIME_SLICE=on) ----------------------------------------------
 * The ESTs of this host whose local ranks share a slot (r % P == slot, P
 * the GPUs the driver shows) take turns on it, in rank order
 * (move/tslice.h): an EST joins its slot's rotation and waits for its
 * turn before it first makes a context there, yields at each collective
 * (the engine, coll/tslice.c) and, at exit, parks and leaves so that the
 * next one can come in. */

static pthread_mutex_t es_ts_mu = PTHREAD_MUTEX_INITIALIZER;
static int es_ts_state; /* 0 not yet, 1 in a rotation, 2 none */

static int es_env_int(const char *name, int dflt)
{
    const char *v = getenv(name);
    if (!v || !*v)
        return dflt;
    char *end;
    errno = 0;
    long x = strtol(v, &end, 10);
    return *end || errno || x < 0 || x > 1 << 20 ? -1 : (int)x;
}

/* A name the ESTs of one job share: a hash of what the launcher gave them
 * all (the rendezvous directory, the controller's socket, the master's
 * address). */
static void es_ts_job(char *out, size_t len)
{
    const char *keys[] = { "ES_RDZV_DIR", "EASYSCALE_CONTROL", "MASTER_ADDR", "MASTER_PORT" };
    uint64_t h = 1469598103934665603ULL;
    for (size_t k = 0; k < sizeof(keys) / sizeof(keys[0]); k++) {
        const char *v = getenv(keys[k]);
        for (const char *c = v ? v : ""; *c; c++)
            h = (h ^ (unsigned char)*c) * 1099511628211ULL;
        h = (h ^ 0xff) * 1099511628211ULL;
    }
    snprintf(out, len, "j%016llx", (unsigned long long)h);
}

static void es_ts_exit(void)
{
    int slot;
    es_tslice_t *t = es_mover_tslice(&slot);
    if (!t)
        return;
    char msg[256] = "";
    /* hand the slot over empty: park (its memory goes), then leave */
    if (es_tslice_mine(t) && es_mover_where_est() >= 0 &&
        es_mover_run_est(ES_MOVER_PARK, msg, sizeof(msg)) != 0)
        ES_WARN("time-slicing: parking at exit failed: %s", msg);
    es_mover_set_tslice(NULL, -1);
    es_tslice_leave(t);
    es_mover_ts_stats_t st;
    es_mover_ts_stats(&st);
    ES_INFO("time-slicing: slot %d: %llu yields, %llu swap-outs (%llu bytes copied, %llu "
            "unchanged), %llu swap-ins (%llu bytes copied, %llu kept), footprint %llu bytes, slot peak "
            "%llu bytes; swaps %.1f ms (copies %.1f, checksums %.1f, draining %.1f)", slot,
            (unsigned long long)st.yields, (unsigned long long)st.swaps_out,
            (unsigned long long)st.bytes_out, (unsigned long long)st.bytes_skipped,
            (unsigned long long)st.swaps_in, (unsigned long long)st.bytes_in,
            (unsigned long long)st.bytes_kept, (unsigned long long)st.footprint, (unsigned long long)st.slot_peak, st.ms_moves,
            st.ms_copy, st.ms_sums, st.ms_sync);
}

void es_move_first_touch(int vdev);
void es_move_first_touch(int vdev)
{
    if (!es_cfg.time_slice || __atomic_load_n(&es_ts_state, __ATOMIC_ACQUIRE))
        return;
    pthread_mutex_lock(&es_ts_mu);
    if (es_ts_state)
        goto out;
    es_ts_state = 2;
    int p = 0;
    if (!es_drv_ready() || es_drv.cuDeviceGetCount(&p) != CUDA_SUCCESS || p <= 0)
        goto out;
    int lw = es_env_int("LOCAL_WORLD_SIZE", 1), me = es_env_int("LOCAL_RANK", 0);
    if (es_cfg.slot[0] || lw < 1 || me < 0 || me >= lw) {
        ES_ERROR("time-slicing: needs LOCAL_RANK and LOCAL_WORLD_SIZE and no EASYSCALE_SLOT "
                 "(the ESTs of a slot are the local ranks r with r %% GPUs == slot): off");
        goto out;
    }
    int slot = es_vdev_active() ? (int)es_vdev_phys(vdev) : vdev % p;
    int ranks[ES_TSLICE_MAX], n = 0;
    for (int r = 0; r < lw && n < ES_TSLICE_MAX; r++)
        if (r % p == slot)
            ranks[n++] = r;
    if (n < 2 || me % p != slot) {
        ES_INFO("time-slicing: alone on slot %d", slot);
        goto out;
    }
    char job[32];
    es_ts_job(job, sizeof(job));
    es_tslice_t *t = NULL;
    int rc = es_tslice_join_cap(&t, job, slot, me, ranks, n, es_cfg.time_slice == 2 ? 2 : 1);
    if (rc != 0) {
        ES_ERROR("time-slicing: cannot join slot %d's rotation (%s): off", slot, strerror(-rc));
        goto out;
    }
    ES_INFO("time-slicing: rank %d waits for its turn on slot %d (%d ESTs)", me, slot, n);
    rc = es_tslice_wait(t, -1);
    if (rc != 0) {
        ES_ERROR("time-slicing: no turn on slot %d (%s): off", slot, strerror(-rc));
        es_tslice_leave(t);
        goto out;
    }
    /* two footprints: the previous holder's memory may still be going, and
     * the next one's coming back: room before the first allocation */
    if (es_tslice_cap(t) > 1 && (rc = es_tslice_wait_room(t, -1)) != 0) {
        ES_ERROR("time-slicing: no room on slot %d (%s): off", slot, strerror(-rc));
        es_tslice_leave(t);
        goto out;
    }
    es_mover_set_tslice(t, slot);
    atexit(es_ts_exit);
    es_ts_state = 1;
out:
    pthread_mutex_unlock(&es_ts_mu);
}

ES_EXPORT int easyscale_move(int slot)
{
    if (!es_vh_on)
        return -ENOTSUP;
    if (slot < ES_MOVER_TOGGLE || slot == -2)
        return -EINVAL;
    long tk = es_mover_post_self(slot);
    if (tk < 0)
        return (int)tk;
    /* outside every call: this thread is at a safe point, it moves now */
    if (es_door_tls.depth == 0) {
        if (es_door_enter())
            es_door_slow();
        es_door_leave();
    }
    int rc = 0;
    char msg[256] = "";
    if (es_door_result(tk, 0, &rc, msg, sizeof(msg)) != 0)
        return 1;
    if (rc == -EINPROGRESS) { /* at a hold of the whole job (a later collective) */
        ES_INFO("move: %s", msg);
        return 1;
    }
    if (rc)
        ES_ERROR("move: %s", msg);
    return rc;
}

ES_EXPORT int easyscale_where(void)
{
    return es_mover_where_est();
}

ES_EXPORT unsigned easyscale_moves(void)
{
    return es_door_moves();
}

/* ---- the controller's moves seam (shim/move.h) ------------------------------------------- */

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

/* ---- time-slicing a running job (the controller's _TS_JOIN / _TS_LEAVE) ------------------ */

int es_move_time_sliced(void)
{
    es_tslice_t *t = es_mover_tslice(NULL);
    return t && es_tslice_dynamic(t);
}

static pthread_once_t es_ts_exit_once = PTHREAD_ONCE_INIT;

static void es_ts_exit_register(void)
{
    atexit(es_ts_exit);
}

static int es_move_ts(const es_move_t *m, es_move_result_t *r, const char *name, int dev)
{
    int slot, rc = 0, res = 0, rank = es_cfg.rank;
    char msg[256] = "";
    es_tslice_t *cur = es_mover_tslice(&slot);
    es_mover_ts_change_t c = { .op = m->op == ES_MOVE_TS_JOIN ? ES_MOVER_TS_JOIN
                                                              : ES_MOVER_TS_LEAVE,
                               .slot = dev };
    if (c.op == ES_MOVER_TS_JOIN) {
        int in = 0;
        for (int i = 0; i < m->nranks; i++)
            in |= m->ranks[i] == rank;
        if (rank < 0 || !in) {
            snprintf(r->reason, sizeof(r->reason), "%s: this EST (RANK %d) is not one of the "
                     "rotation's ranks", name, rank);
            return -EINVAL;
        }
        if (cur) {
            snprintf(r->reason, sizeof(r->reason), "%s: already time-sliced on device %d", name,
                     slot);
            return -EBUSY;
        }
        /* its turns are moves: refused like one while the collectives'
         * staging is device memory (-EXDEV: the controller sets a hold of
         * the job, where the staging is down, and asks again) */
        char why[200] = "";
        if ((rc = es_mover_gates_check(why, sizeof(why))) < 0) {
            snprintf(r->reason, sizeof(r->reason), "%s: %s", name, why);
            return rc == -EXDEV ? -EXDEV : -EINVAL;
        }
        char job[64], base[32];
        es_ts_job(base, sizeof(base));
        snprintf(job, sizeof(job), "%s-e%llu", base, (unsigned long long)m->epoch);
        rc = es_tslice_join_dynamic(&c.t, job, dev, rank, m->ranks, m->nranks);
        if (rc != 0) {
            snprintf(r->reason, sizeof(r->reason), "%s: cannot join the rotation of device %d "
                     "(%s)", name, dev, strerror(-rc));
            return -EINVAL;
        }
        pthread_once(&es_ts_exit_once, es_ts_exit_register);
    }
    int wait_s = es_cfg.move_timeout_s + 5;
    rc = es_mover_ts_change(&c, wait_s * 1000, &res, msg, sizeof(msg));
    if (rc != 0 || res != 0) {
        if (c.t)
            es_tslice_leave(c.t); /* never entered */
        if (rc == -ETIMEDOUT)
            snprintf(r->reason, sizeof(r->reason), "%s: the EST reached no collective in %d s: "
                     "nothing changed", name, wait_s);
        else if (rc != 0)
            snprintf(r->reason, sizeof(r->reason), "%s: %s", name,
                     rc == -EBUSY ? "another change is pending" : strerror(-rc));
        else
            snprintf(r->reason, sizeof(r->reason), "%s: %s", name, msg);
        rc = rc == -ETIMEDOUT ? -EBUSY : rc ? rc : res;
        return rc == -ENOMEM || rc == -EINVAL || rc == -EBUSY ? rc : -EIO;
    }
    ES_INFO("control: %s: %s", name, msg);
    es_last_epoch = m->epoch;
    snprintf(r->slot, sizeof(r->slot), "%s", m->slot);
    return 0;
}

int es_move_request(const es_move_t *m, es_move_result_t *r)
{
    static const char *const names[] = { "?",       "place",   "migrate",
                                         "swap-out", "swap-in", "time-slice",
                                         "end time-slicing", NULL, NULL };
    _Static_assert(sizeof(names) / sizeof(names[0]) == ES_MOVE_NOPS, "a name per move op");
    uint64_t t0 = es_ns();
    /* the holds (HOLD_OFFER, HOLD_AT) are the control thread's, not moves */
    int op = m && m->op > 0 && m->op < ES_MOVE_NOPS && names[m->op] ? m->op : 0;
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
    if (op == ES_MOVE_TS_JOIN || op == ES_MOVE_TS_LEAVE) {
        rc = es_move_ts(m, r, names[op], dev);
        r->total_ns = es_ns() - t0;
        return rc;
    }
    int ts_slot;
    if (es_mover_tslice(&ts_slot) && es_move_time_sliced()) {
        snprintf(r->reason, sizeof(r->reason), "%s: the EST is time-sliced on device %d (the "
                 "controller ends that first)", names[op], ts_slot);
        return -EBUSY;
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
    return rc == 0 ? 0 : rc == -ENOMEM || rc == -EINVAL || rc == -EBUSY || rc == -EXDEV ? rc : -EIO;
}

uint64_t es_move_footprint(void)
{
    return es_memreg_footprint();
}

void es_move_ts_figures(es_move_ts_figures_t *out)
{
    es_mover_ts_stats_t st;
    es_mover_ts_stats(&st);
    out->yields = st.yields;
    out->swaps_out = st.swaps_out;
    out->swaps_in = st.swaps_in;
    out->bytes_out = st.bytes_out;
    out->bytes_in = st.bytes_in;
    int where = es_mover_where_est(); /* -2: nothing on a GPU yet */
    out->where = where >= 0 ? 1 : where == ES_MOVER_PARK ? 0 : -1;
}
