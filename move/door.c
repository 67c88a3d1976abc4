/* The door (see door.h): the request slot, the registry of application
 * threads, the mover's wait for quiescence, held threads, captures and
 * safe sections. */
#include "move/door.h"

#include <errno.h>
#include <linux/membarrier.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

unsigned es_door_epoch = 1; /* threads start at 0: their first call registers them */
__thread es_door_tls_t es_door_tls __attribute__((tls_model("initial-exec")));

enum { ES_OPEN = 0, ES_MOVING, ES_CLOSED };

static pthread_mutex_t es_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t es_cv = PTHREAD_COND_INITIALIZER;
static int es_state = ES_OPEN;            /* under es_mu */
static es_door_tls_t *es_threads;         /* registered threads, under es_mu */
static pthread_key_t es_key;
static pthread_once_t es_key_once = PTHREAD_ONCE_INIT;
static int es_captures;                   /* under es_mu */
static int es_holds;                      /* under es_mu */
static unsigned es_moves;                 /* under es_mu */
static int es_timeout_ms = 60000;
static int (*es_rebind_hook)(void);

/* The request slot: written with atomic stores only (signal handlers). */
static int es_req_busy;                   /* slot taken, not yet picked up */
static int es_req_flag;                   /* a request waits for a mover */
static es_door_fn es_req_fn;
static void *es_req_arg;
static long es_req_ticket;
static long es_tickets;
static es_door_fn es_sig_fn;
static void *es_sig_arg;

/* The last outcome, under es_mu. */
static long es_res_ticket;
static int es_res_rc;
static char es_res_msg[256];

static int es_mb_state; /* 0 unknown, 1 registered, -1 unavailable */

static double es_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static int es_membarrier(void)
{
    if (es_mb_state == 0) {
        long q = syscall(__NR_membarrier, MEMBARRIER_CMD_QUERY, 0, 0);
        es_mb_state = (q >= 0 && (q & MEMBARRIER_CMD_PRIVATE_EXPEDITED) &&
                       syscall(__NR_membarrier, MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED,
                               0, 0) == 0) ? 1 : -1;
    }
    if (es_mb_state < 0)
        return -ENOSYS;
    return syscall(__NR_membarrier, MEMBARRIER_CMD_PRIVATE_EXPEDITED, 0, 0) == 0 ? 0 : -ENOSYS;
}

/* ---- threads ------------------------------------------------------------------ */

static void es_unregister(void *p)
{
    es_door_tls_t *t = p;
    pthread_mutex_lock(&es_mu);
    if (t->prev)
        t->prev->next = t->next;
    else if (es_threads == t)
        es_threads = t->next;
    if (t->next)
        t->next->prev = t->prev;
    t->registered = 0;
    pthread_cond_broadcast(&es_cv);
    pthread_mutex_unlock(&es_mu);
}

static void es_make_key(void)
{
    pthread_key_create(&es_key, es_unregister);
}

static void es_register(es_door_tls_t *t) /* es_mu held */
{
    pthread_once(&es_key_once, es_make_key);
    t->tid = (int)syscall(SYS_gettid);
    t->prev = NULL;
    t->next = es_threads;
    if (es_threads)
        es_threads->prev = t;
    es_threads = t;
    t->registered = 1;
    t->moves_seen = es_moves;
    pthread_setspecific(es_key, t);
}

/* The first other thread inside a call (not held, not in a safe section). */
static es_door_tls_t *es_busy_thread(const es_door_tls_t *self) /* es_mu held */
{
    for (es_door_tls_t *t = es_threads; t; t = t->next)
        if (t != self && __atomic_load_n(&t->depth, __ATOMIC_RELAXED) != 0 && !t->waiting &&
            !t->safe)
            return t;
    return NULL;
}

/* Waits for the door to change (a timed wait: a request posted by a signal
 * handler cannot wake anyone). */
static void es_hold(es_door_tls_t *t) /* es_mu held */
{
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_nsec += 20 * 1000000L;
    if (until.tv_nsec >= 1000000000L) {
        until.tv_sec++;
        until.tv_nsec -= 1000000000L;
    }
    t->waiting = 1;
    pthread_cond_timedwait(&es_cv, &es_mu, &until);
    t->waiting = 0;
}

/* ---- the move -------------------------------------------------------------------- */

/* Performs the pending request (es_mu held, es_req_flag set, no capture):
 * the caller is the mover. Waits for the other threads and runs the
 * request with es_mu released; returns with es_mu held and the door open
 * or closed again. A capture that began meanwhile puts the move off: the
 * request stays pending until the capture ends. */
static void es_perform(es_door_tls_t *self)
{
    int was_closed = es_state == ES_CLOSED;
    es_state = ES_MOVING;
    pthread_mutex_unlock(&es_mu);

    char msg[256] = "";
    int rc = 0, parked = was_closed;
    if (es_membarrier() != 0) {
        rc = -ENOSYS;
        snprintf(msg, sizeof(msg), "membarrier is not available: moves are not possible");
    }
    double deadline = es_now_ms() + es_timeout_ms;
    while (rc == 0) {
        pthread_mutex_lock(&es_mu);
        es_door_tls_t *busy = es_busy_thread(self);
        int tid = busy ? busy->tid : 0;
        pthread_mutex_unlock(&es_mu);
        if (!busy)
            break;
        if (es_now_ms() > deadline) {
            rc = -ETIMEDOUT;
            snprintf(msg, sizeof(msg), "thread %d stayed inside a call for %d ms: move not done",
                     tid, es_timeout_ms);
            break;
        }
        usleep(200);
    }
    pthread_mutex_lock(&es_mu);
    if (rc == 0 && es_captures + es_holds > 0) {
        /* put off: the request stays, the door opens for the capture */
        es_state = was_closed ? ES_CLOSED : ES_OPEN;
        pthread_cond_broadcast(&es_cv);
        return;
    }
    es_door_fn fn = es_req_fn;
    void *arg = es_req_arg;
    long ticket = es_req_ticket;
    __atomic_store_n(&es_req_flag, 0, __ATOMIC_RELEASE);
    __atomic_store_n(&es_req_busy, 0, __ATOMIC_RELEASE);
    pthread_mutex_unlock(&es_mu);
    if (rc == 0) {
        self->moving = 1;
        rc = fn(arg, &parked, msg, sizeof(msg));
        self->moving = 0;
    }
    pthread_mutex_lock(&es_mu);
    es_state = parked ? ES_CLOSED : ES_OPEN;
    es_moves++;
    es_res_ticket = ticket;
    es_res_rc = rc;
    snprintf(es_res_msg, sizeof(es_res_msg), "%s", msg);
    /* every thread passes the slow path once more: it re-binds */
    __atomic_add_fetch(&es_door_epoch, 1, __ATOMIC_RELEASE);
    pthread_cond_broadcast(&es_cv);
}

static void es_after_move(es_door_tls_t *t, unsigned moves)
{
    if (t->moves_seen != moves) {
        t->moves_seen = moves;
        if (es_rebind_hook)
            es_rebind_hook();
    }
}

void es_door_slow(void)
{
    es_door_tls_t *t = &es_door_tls;
    pthread_mutex_lock(&es_mu);
    if (!t->registered)
        es_register(t);
    for (;;) {
        unsigned e = __atomic_load_n(&es_door_epoch, __ATOMIC_ACQUIRE);
        if (t->depth > 1)
            break; /* nested: part of a call admitted already */
        if (es_state == ES_MOVING) {
            es_hold(t);
            continue;
        }
        if (__atomic_load_n(&es_req_flag, __ATOMIC_ACQUIRE) && es_captures + es_holds == 0) {
            es_perform(t);
            continue;
        }
        if (es_state == ES_CLOSED) {
            es_hold(t);
            continue;
        }
        t->epoch = e;
        break;
    }
    unsigned moves = es_moves;
    int outer = t->depth <= 1;
    pthread_mutex_unlock(&es_mu);
    if (outer)
        es_after_move(t, moves);
}

/* ---- requests ------------------------------------------------------------------------ */

static long es_post(es_door_fn fn, void *arg)
{
    int expect = 0;
    if (!fn)
        return -EINVAL;
    if (!__atomic_compare_exchange_n(&es_req_busy, &expect, 1, 0, __ATOMIC_ACQ_REL,
                                     __ATOMIC_ACQUIRE))
        return -EBUSY;
    long tk = __atomic_add_fetch(&es_tickets, 1, __ATOMIC_ACQ_REL);
    es_req_fn = fn;
    es_req_arg = arg;
    es_req_ticket = tk;
    __atomic_store_n(&es_req_flag, 1, __ATOMIC_RELEASE);
    __atomic_add_fetch(&es_door_epoch, 1, __ATOMIC_RELEASE);
    return tk;
}

long es_door_request(es_door_fn fn, void *arg)
{
    if (es_mb_state == 0)
        es_membarrier(); /* registers; a no-op barrier otherwise */
    if (es_mb_state < 0)
        return -ENOSYS;
    long tk = es_post(fn, arg);
    if (tk > 0) {
        /* a thread waiting at a closed door performs it */
        pthread_mutex_lock(&es_mu);
        pthread_cond_broadcast(&es_cv);
        pthread_mutex_unlock(&es_mu);
    }
    return tk;
}

int es_door_cancel(long ticket)
{
    int rc;
    pthread_mutex_lock(&es_mu);
    if (__atomic_load_n(&es_req_busy, __ATOMIC_ACQUIRE) && es_req_ticket == ticket &&
        es_state != ES_MOVING) {
        __atomic_store_n(&es_req_flag, 0, __ATOMIC_RELEASE);
        __atomic_store_n(&es_req_busy, 0, __ATOMIC_RELEASE);
        rc = 0;
    } else {
        rc = es_res_ticket >= ticket || (es_req_ticket == ticket && es_state == ES_MOVING)
                 ? -EALREADY : -ENOENT;
    }
    pthread_mutex_unlock(&es_mu);
    return rc;
}

void es_door_set_signal(es_door_fn fn, void *arg)
{
    es_sig_fn = fn;
    es_sig_arg = arg;
    if (es_mb_state == 0)
        es_membarrier();
}

long es_door_request_from_signal(void)
{
    return es_post(es_sig_fn, es_sig_arg);
}

int es_door_result(long ticket, int timeout_ms, int *rc, char *msg, size_t msglen)
{
    int res = 0;
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    if (timeout_ms >= 0) {
        until.tv_sec += timeout_ms / 1000;
        until.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
        if (until.tv_nsec >= 1000000000L) {
            until.tv_sec++;
            until.tv_nsec -= 1000000000L;
        }
    }
    pthread_mutex_lock(&es_mu);
    while (es_res_ticket < ticket && res == 0) {
        if (timeout_ms < 0)
            pthread_cond_wait(&es_cv, &es_mu);
        else if (pthread_cond_timedwait(&es_cv, &es_mu, &until) == ETIMEDOUT)
            res = -ETIMEDOUT;
    }
    if (res == 0 && es_res_ticket != ticket)
        res = -ENOENT;
    if (res == 0) {
        if (rc)
            *rc = es_res_rc;
        if (msg && msglen)
            snprintf(msg, msglen, "%s", es_res_msg);
    }
    pthread_mutex_unlock(&es_mu);
    return res;
}

void es_door_set_rebind(int (*hook)(void))
{
    es_rebind_hook = hook;
}

void es_door_set_timeout_ms(int ms)
{
    es_timeout_ms = ms > 0 ? ms : 1;
}

/* ---- captures and safe sections ---------------------------------------------------------- */

void es_door_capture_begin(void)
{
    pthread_mutex_lock(&es_mu);
    es_captures++;
    pthread_mutex_unlock(&es_mu);
}

void es_door_capture_end(void)
{
    pthread_mutex_lock(&es_mu);
    if (es_captures > 0 && --es_captures == 0 && es_holds == 0 &&
        __atomic_load_n(&es_req_flag, __ATOMIC_ACQUIRE))
        __atomic_add_fetch(&es_door_epoch, 1, __ATOMIC_RELEASE); /* the deferred request */
    pthread_mutex_unlock(&es_mu);
}

void es_door_hold_begin(void)
{
    pthread_mutex_lock(&es_mu);
    es_holds++;
    pthread_mutex_unlock(&es_mu);
}

void es_door_hold_end(void)
{
    pthread_mutex_lock(&es_mu);
    if (es_holds > 0 && --es_holds == 0 && es_captures == 0 &&
        __atomic_load_n(&es_req_flag, __ATOMIC_ACQUIRE))
        __atomic_add_fetch(&es_door_epoch, 1, __ATOMIC_RELEASE);
    pthread_mutex_unlock(&es_mu);
}

int es_door_captures(void)
{
    return __atomic_load_n(&es_captures, __ATOMIC_RELAXED);
}

void es_door_safe_begin(void)
{
    es_door_tls_t *t = &es_door_tls;
    pthread_mutex_lock(&es_mu);
    if (!t->registered)
        es_register(t);
    t->safe = 1;
    pthread_mutex_unlock(&es_mu);
}

int es_door_safe_point(void)
{
    es_door_tls_t *t = &es_door_tls;
    int did = 0;
    if (!__atomic_load_n(&es_req_flag, __ATOMIC_ACQUIRE))
        return 0;
    pthread_mutex_lock(&es_mu);
    if (!t->registered)
        es_register(t);
    if (__atomic_load_n(&es_req_flag, __ATOMIC_ACQUIRE) && es_captures + es_holds == 0 &&
        es_state != ES_MOVING) {
        es_perform(t);
        did = 1;
    }
    unsigned moves = es_moves;
    pthread_mutex_unlock(&es_mu);
    if (did)
        es_after_move(t, moves);
    return did;
}

void es_door_safe_end(void)
{
    es_door_tls_t *t = &es_door_tls;
    pthread_mutex_lock(&es_mu);
    for (;;) {
        if (__atomic_load_n(&es_req_flag, __ATOMIC_ACQUIRE) && es_captures + es_holds == 0 &&
            es_state != ES_MOVING) {
            es_perform(t);
            continue;
        }
        if (es_state == ES_MOVING || es_state == ES_CLOSED) {
            es_hold(t);
            continue;
        }
        break;
    }
    t->safe = 0;
    unsigned moves = es_moves;
    pthread_mutex_unlock(&es_mu);
    es_after_move(t, moves);
}

int es_door_parked(void)
{
    pthread_mutex_lock(&es_mu);
    int p = es_state == ES_CLOSED;
    pthread_mutex_unlock(&es_mu);
    return p;
}

unsigned es_door_moves(void)
{
    pthread_mutex_lock(&es_mu);
    unsigned m = es_moves;
    pthread_mutex_unlock(&es_mu);
    return m;
}
