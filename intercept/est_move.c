/* Moving this process's EST from the shim's side (docs/MOVING.md): the
 * configuration (EASYSCALE_MOVE and friends) applied at start-up, the
 * signal that requests a move (EASYSCALE_MOVE_SIGNAL: sigqueue's value is
 * the target device, -1 to park; a plain signal toggles parked / back),
 * and the control hook easyscale_move (shim/easyscale.h). */
#include "shim/shim.h"
#include "shim/easyscale.h"
#include "context/door.h"
#include "context/mover.h"
#include "context/swap.h"
#include "context/vhandle.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>

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
    char where[32];
    if (dev == ES_MOVER_PARK)
        snprintf(where, sizeof(where), "host memory");
    else
        snprintf(where, sizeof(where), "device %d", dev);
    if (rc == 0)
        ES_INFO("moved to %s in %.1f ms (%.1f MiB copied, %.1f MiB unchanged)", where, st->ms,
                (st->bytes_d2h + st->bytes_h2d + st->bytes_d2d) / 1048576.0,
                st->bytes_skipped / 1048576.0);
    else
        ES_WARN("move to %s failed: %s", where, msg);
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
    es_swap_set_opts(&o);
    es_door_set_timeout_ms(es_cfg.move_timeout_s * 1000);
    es_mover_init();
    es_mover_set_report(es_move_report);
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

ES_EXPORT int easyscale_move(int slot)
{
    if (!es_vh_on)
        return -ENOTSUP;
    if (slot < ES_MOVER_TOGGLE || slot == -2)
        return -EINVAL;
    long tk = es_mover_post_est(slot);
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
