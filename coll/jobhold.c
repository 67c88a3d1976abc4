/* A hold of the whole job that a process asks for itself (its move signal,
 * easyscale_move) while the collectives' staging is device memory the other
 * ranks map: agreed in a communicator's segment, without a controller
 * (docs/COLLECTIVES.md, section 4).
 *
 * The board is the largest live communicator with device staging (DDP's
 * world: every EST of the job is in it). Before each counting collective
 * (shim/step.h) a rank stores how many it has reached (jh_issued), then
 * reads jh_at. The requester stores jh_at = H + 1 with H the most any rank
 * has reached, reads every count again, and raises H while a rank has
 * reached it meanwhile: with sequentially consistent accesses a rank
 * either is seen at H or sees jh_at before it starts H. Every rank then
 * waits at the first counting collective >= H that is not inside a group
 * (jh_held); once all are there the requester commits (jh_go), every rank
 * takes its staging down as at a scheduled hold (jh_down), the requester
 * makes its move through the door once all have, and sets jh_done; each
 * sets its staging up again where it is and goes on. Only the requester
 * gives up, before it commits (EASYSCALE_HOLD_TIMEOUT: jh_at = 0, its move
 * fails with the reason); the others follow it, or leave when the
 * communicator fails (a dead peer). Calls init.c. */
#include "coll/coll_int.h"
#include "move/door.h"
#include "move/mover.h"
#include "move/vhandle.h"
#include "shim/config.h"
#include "shim/log.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

/* The requester's side (this process asked): the move to make at the
 * hold. */
static pthread_mutex_t es_jh_mu = PTHREAD_MUTEX_INITIALIZER;
static int es_jh_dev = INT_MIN;

static uint64_t es_jh_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

static void es_jh_nap(void)
{
    struct timespec ts = { 0, 1000000L };
    nanosleep(&ts, NULL);
}

/* The most counting collectives any rank of c has reached. */
static uint64_t es_jh_max_issued(es_comm_t *c)
{
    uint64_t m = 0;
    for (int r = 0; r < c->nranks; r++) {
        uint64_t v = atomic_load(&es_seg_rank(&c->seg, r)->jh_issued);
        m = v > m ? v : m;
    }
    return m;
}

int es_jobhold_request(int dev, char *msg, size_t msglen)
{
    es_comm_t *c = es_comm_board();
    if (!c)
        return -EXDEV; /* the gate's reason stays in msg */
    es_seg_hdr_t *h = c->seg.h;
    uint32_t none = 0;
    if (!atomic_compare_exchange_strong(&h->jh_req, &none, (uint32_t)c->rank + 1)) {
        snprintf(msg, msglen, "rank %u's move waits for a hold of the job already: try again "
                 "after it", none - 1);
        return -EBUSY;
    }
    /* the move first: another thread of this process may reach the hold
     * as soon as it is published */
    pthread_mutex_lock(&es_jh_mu);
    es_jh_dev = dev;
    pthread_mutex_unlock(&es_jh_mu);
    uint64_t at = es_jh_max_issued(c);
    for (;;) {
        atomic_store(&h->jh_at, at + 1);
        uint64_t m = es_jh_max_issued(c);
        if (m <= at)
            break;
        at = m;
    }
    snprintf(msg, msglen, "deferred to a hold of all %d ranks at collective %llu (the "
             "collectives' staging is device memory; no controller)", c->nranks,
             (unsigned long long)at);
    return -EINPROGRESS;
}

/* The requester, every rank held at `at`: its move, here (a safe point),
 * then the others go on. */
static void es_jh_move(es_comm_t *c, uint64_t at)
{
    pthread_mutex_lock(&es_jh_mu);
    int dev = es_jh_dev;
    es_jh_dev = INT_MIN;
    pthread_mutex_unlock(&es_jh_mu);
    int rc = -ENOENT;
    char why[256] = "no move was waiting";
    long tk = dev == INT_MIN ? -ENOENT : es_mover_post_est(dev);
    if (tk > 0) {
        es_door_safe_point();
        int got = es_door_result(tk, -1, &rc, why, sizeof(why));
        if (got == -ENOENT) { /* a park, and a later request brought the EST back */
            rc = 0;
            snprintf(why, sizeof(why), "made, and followed by a later request");
        } else if (got != 0) {
            rc = -EIO;
        }
    } else if (tk < 0 && dev != INT_MIN) {
        rc = (int)tk;
        snprintf(why, sizeof(why), "the door refused the request (%s)", strerror((int)-tk));
    }
    if (rc == 0)
        ES_INFO("collectives: moved at a hold of all %d ranks at collective %llu", c->nranks,
                (unsigned long long)(at - 1));
    else
        ES_WARN("collectives: the move at the hold of collective %llu failed: %s",
                (unsigned long long)(at - 1), why);
    es_seg_hdr_t *h = c->seg.h;
    atomic_store(&h->jh_done, at);
    atomic_store(&h->jh_at, 0);
    atomic_store(&h->jh_req, 0);
}

/* The requester gives its hold up before it was committed (jh_go): the
 * ranks waiting at it go on, none has taken its staging down. */
static void es_jh_withdraw(es_comm_t *c, uint64_t at, const char *why)
{
    pthread_mutex_lock(&es_jh_mu);
    es_jh_dev = INT_MIN;
    pthread_mutex_unlock(&es_jh_mu);
    ES_WARN("collectives: the move waiting for a hold of all %d ranks at collective %llu is "
            "given up: %s", c->nranks, (unsigned long long)(at - 1), why);
    es_seg_hdr_t *h = c->seg.h;
    atomic_store(&h->jh_at, 0);
    atomic_store(&h->jh_req, 0);
}

/* Every rank's field (jh_held or jh_down) is at. */
static int es_jh_all(es_comm_t *c, uint64_t at, int down)
{
    for (int r = 0; r < c->nranks; r++) {
        es_seg_rank_t *x = es_seg_rank(&c->seg, r);
        if (atomic_load(down ? &x->jh_down : &x->jh_held) != at)
            return 0;
    }
    return 1;
}

/* At the hold: wait until every rank is there (the requester then commits,
 * jh_go), take the staging down (a collective step of every communicator
 * with device staging), wait until every rank has (the requester then
 * moves, jh_done), set the staging up again. Only the requester gives up
 * (before it commits: EASYSCALE_HOLD_TIMEOUT); the others follow it, or
 * leave when the communicator fails (a dead peer). */
static void es_jh_hold(es_comm_t *c, uint64_t at)
{
    es_seg_hdr_t *h = c->seg.h;
    es_seg_rank_t *me = es_seg_rank(&c->seg, c->rank);
    uint32_t req = atomic_load(&h->jh_req);
    int mine = req == (uint32_t)c->rank + 1, down = 0, warned = 0;
    ES_INFO("collectives: rank %d waits at collective %llu for rank %d's move", c->rank,
            (unsigned long long)(at - 1), (int)req - 1);
    atomic_store(&me->jh_held, at);
    es_door_safe_begin();
    uint64_t t0 = es_jh_now_ms(), limit = (uint64_t)es_cfg.hold_timeout_s * 1000u;
    for (;;) {
        if (atomic_load(&h->jh_done) >= at || (!down && atomic_load(&h->jh_at) != at))
            break; /* moved, or withdrawn before the staging went down */
        if (atomic_load(&c->failed)) {
            ES_WARN("collectives: rank %d stops waiting at collective %llu: the communicator "
                    "failed", c->rank, (unsigned long long)(at - 1));
            break;
        }
        if (mine && !down && atomic_load(&h->jh_go) != at && es_jh_all(c, at, 0))
            atomic_store(&h->jh_go, at);
        if (!down && atomic_load(&h->jh_go) == at) {
            es_comm_hold_begin();
            down = 1;
            atomic_store(&me->jh_down, at);
            continue;
        }
        if (mine && down && es_jh_all(c, at, 1)) {
            es_jh_move(c, at);
            break;
        }
        if (es_jh_now_ms() - t0 > limit && !down) {
            if (mine) {
                es_jh_withdraw(c, at, "not every rank reached it within EASYSCALE_HOLD_TIMEOUT");
                break;
            }
            if (!warned++)
                ES_WARN("collectives: rank %d has waited %d s at collective %llu for rank %d's "
                        "move (EASYSCALE_HOLD_TIMEOUT): still waiting for it", c->rank,
                        es_cfg.hold_timeout_s, (unsigned long long)(at - 1), (int)req - 1);
        }
        es_door_safe_point();
        es_jh_nap();
    }
    atomic_store(&me->jh_held, 0);
    atomic_store(&me->jh_down, 0);
    es_door_safe_end();
    if (down)
        es_comm_hold_end();
}

void es_jobhold_issue(uint64_t idx, int in_group)
{
    if (!es_comm_devmem_live())
        return;
    es_comm_t *c = es_comm_board();
    if (!c)
        return;
    es_seg_hdr_t *h = c->seg.h;
    atomic_store(&es_seg_rank(&c->seg, c->rank)->jh_issued, idx + 1);
    uint64_t at = atomic_load(&h->jh_at);
    if (!at || idx + 1 < at || in_group || atomic_load(&h->jh_done) >= at)
        return;
    es_jh_hold(c, at);
}

void es_jobhold_global_init(void)
{
    if (es_vh_on)
        es_mover_set_defer(es_jobhold_request);
}
