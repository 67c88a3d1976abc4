/* The step source and the scheduled holds of shim/step.h. Without holds
 * the count is one relaxed atomic increment and the issue index another,
 * all the control channel adds to a training call. The callers are
 * intercept/nccl.c (NCCL's own collectives) and the virtual collectives'
 * engine (tests/controller checks that the step advances, so a forgotten
 * call shows). */
#include "shim/config.h"
#include "shim/log.h"
#include "shim/step.h"

#include <errno.h>
#include <pthread.h>
#include <time.h>

static uint64_t es_steps, es_issued;

/* Holds: the next hold not yet over (index into es_cfg.hold), the release
 * (the controller's step + 1; 0 none) and the step + 1 waited at. */
static pthread_mutex_t es_hold_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t es_hold_cv = PTHREAD_COND_INITIALIZER;
static int es_hold_next;
static uint64_t es_released, es_holding;
/* The hold set at run time: the offer (the collective this EST stops
 * before, + 1; 0 none) and the hold (+ 1; 0 none); es_dyn_any says either
 * is set (the fast path's one load). */
static uint64_t es_offer, es_dyn;
static int es_dyn_any;

void es_step_tick(void)
{
    __atomic_fetch_add(&es_steps, 1, __ATOMIC_RELAXED);
}

uint64_t es_step_now(void)
{
    return __atomic_load_n(&es_steps, __ATOMIC_RELAXED);
}

uint64_t es_step_issue(void)
{
    return __atomic_fetch_add(&es_issued, 1, __ATOMIC_RELAXED);
}

/* Under es_hold_mu: skips the holds the controller released already. */
static void es_hold_skip_released(void)
{
    while (es_hold_next < es_cfg.nhold && es_cfg.hold[es_hold_next] < es_released)
        es_hold_next++;
}

static uint64_t es_mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* Under es_hold_mu: waits for a change of the holds, at most 10 ms. */
static void es_hold_nap(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_nsec += 10000000L;
    if (ts.tv_nsec >= 1000000000L) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000L;
    }
    pthread_cond_timedwait(&es_hold_cv, &es_hold_mu, &ts);
}

/* Under es_hold_mu: waits while an offer stops the collective idx (until
 * the controller says where the hold is, or the hold's timeout passes:
 * then the offer is dropped with a warning). */
static void es_offer_wait(uint64_t idx)
{
    uint64_t t0 = es_mono_ns(), limit = (uint64_t)es_cfg.hold_timeout_s * 1000000000ull;
    while (es_offer && idx + 1 >= es_offer) {
        if (es_mono_ns() - t0 >= limit) {
            ES_WARN("schedule: rank %d stopped %d s before collective %llu for the "
                    "controller's hold, which never said where (EASYSCALE_HOLD_TIMEOUT): goes "
                    "on", es_cfg.rank, es_cfg.hold_timeout_s, (unsigned long long)idx);
            es_offer = 0;
            __atomic_store_n(&es_dyn_any, es_dyn != 0, __ATOMIC_RELEASE);
            break;
        }
        es_hold_nap();
    }
}

int es_step_hold_due(uint64_t idx, uint64_t *step)
{
    int due = 0;
    if (__builtin_expect(es_cfg.nhold == 0 && !__atomic_load_n(&es_dyn_any, __ATOMIC_ACQUIRE),
                         1))
        return 0;
    pthread_mutex_lock(&es_hold_mu);
    es_offer_wait(idx);
    es_hold_skip_released();
    if (es_hold_next < es_cfg.nhold && idx >= es_cfg.hold[es_hold_next]) {
        *step = es_cfg.hold[es_hold_next];
        due = 1;
    }
    if (es_dyn && idx + 1 >= es_dyn && es_released < es_dyn && (!due || es_dyn - 1 < *step)) {
        *step = es_dyn - 1;
        due = 1;
    }
    pthread_mutex_unlock(&es_hold_mu);
    return due;
}

int es_step_offer(uint64_t *idx)
{
    int rc = 0;
    pthread_mutex_lock(&es_hold_mu);
    if (es_dyn) {
        rc = -EBUSY; /* a hold is set already */
    } else {
        if (!es_offer)
            es_offer = __atomic_load_n(&es_issued, __ATOMIC_RELAXED) + 1;
        *idx = es_offer - 1;
        __atomic_store_n(&es_dyn_any, 1, __ATOMIC_RELEASE);
    }
    pthread_mutex_unlock(&es_hold_mu);
    return rc;
}

void es_step_hold_drop(void)
{
    pthread_mutex_lock(&es_hold_mu);
    if (es_dyn && es_dyn > es_released)
        es_released = es_dyn; /* a waiter there goes on */
    es_offer = es_dyn = 0;
    __atomic_store_n(&es_dyn_any, 0, __ATOMIC_RELEASE);
    pthread_cond_broadcast(&es_hold_cv);
    pthread_mutex_unlock(&es_hold_mu);
}

int es_step_hold_at(uint64_t idx)
{
    int rc = 0;
    pthread_mutex_lock(&es_hold_mu);
    if (idx == UINT64_MAX) {
        es_offer = 0;
        es_dyn = 0;
    } else if (es_offer ? idx + 1 < es_offer
                        : idx < __atomic_load_n(&es_issued, __ATOMIC_RELAXED)) {
        rc = -ERANGE; /* that collective has started already */
    } else {
        es_offer = 0;
        es_dyn = idx + 1;
    }
    __atomic_store_n(&es_dyn_any, es_offer || es_dyn, __ATOMIC_RELEASE);
    pthread_cond_broadcast(&es_hold_cv);
    pthread_mutex_unlock(&es_hold_mu);
    return rc;
}

int es_step_hold_wait(uint64_t step, int (*poll)(void *), void *arg)
{
    uint64_t t0 = es_mono_ns(), limit = (uint64_t)es_cfg.hold_timeout_s * 1000000000ull;
    int rc = -ETIMEDOUT;
    ES_INFO("schedule: waiting at step %llu for the controller's scheduled event",
            (unsigned long long)step);
    __atomic_store_n(&es_holding, step + 1, __ATOMIC_RELEASE);
    es_control_kick();
    pthread_mutex_lock(&es_hold_mu);
    for (;;) {
        if (es_released > step) {
            rc = 0;
            break;
        }
        if (es_mono_ns() - t0 >= limit)
            break;
        es_hold_nap();
        if (!poll || es_released > step)
            continue;
        pthread_mutex_unlock(&es_hold_mu);
        int stop = poll(arg);
        pthread_mutex_lock(&es_hold_mu);
        if (stop && es_released <= step) {
            rc = 1;
            break;
        }
    }
    /* over: this hold and any other at or before it */
    while (es_hold_next < es_cfg.nhold && es_cfg.hold[es_hold_next] <= step)
        es_hold_next++;
    if (es_dyn && es_dyn - 1 <= step) {
        es_dyn = 0;
        __atomic_store_n(&es_dyn_any, es_offer != 0, __ATOMIC_RELEASE);
    }
    __atomic_store_n(&es_holding, 0, __ATOMIC_RELEASE);
    pthread_mutex_unlock(&es_hold_mu);
    es_control_kick();
    if (rc == -ETIMEDOUT)
        ES_WARN("schedule: rank %d waited %d s at step %llu for the controller's scheduled "
                "event (EASYSCALE_HOLD_TIMEOUT) and goes on without it: the event will not "
                "happen at its step", es_cfg.rank, es_cfg.hold_timeout_s,
                (unsigned long long)step);
    return rc;
}

void es_step_release(uint64_t step)
{
    pthread_mutex_lock(&es_hold_mu);
    if (step + 1 > es_released)
        es_released = step + 1;
    pthread_cond_broadcast(&es_hold_cv);
    pthread_mutex_unlock(&es_hold_mu);
}

uint64_t es_step_held(void)
{
    return __atomic_load_n(&es_holding, __ATOMIC_ACQUIRE);
}
