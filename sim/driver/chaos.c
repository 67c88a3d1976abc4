/* SIMCUDA_CHAOS=SEED: adversarial scheduling of stream work, so that a
 * missing synchronisation between streams shows as a wrong result in nearly
 * every run instead of now and then.
 *
 * Every unit of work (kernel, copy, memset, host function, callback) gets a
 * process-wide ticket and its enqueue time when it is enqueued. Before a
 * stream worker runs it, the work is held:
 * - until a delay drawn from the seeded schedule (SEED and the ticket:
 *   1.5-3 ms) after it was enqueued, so that work the program enqueues on
 *   other streams up to a millisecond later (the host doing something else
 *   in between) is there too. The delay counts from the enqueue, not from
 *   when the worker reaches the unit: a burst of work queued on one stream
 *   waits about one delay in all, not one per unit. The delay ends early
 *   while a host thread is blocked until the stream's work is done (stream,
 *   context or event synchronisation, a synchronous call), directly or
 *   through streams waiting for it (an event it recorded, the legacy
 *   stream's implicit waits): that thread enqueues nothing meanwhile, so
 *   holding on would only cost time;
 * - and, as long as newer work of another stream is held, running, or
 *   queued on a stream that is not waiting for an event or another stream,
 *   until that work is done: independent streams run newest first, the
 *   opposite of the order a program without the synchronisation it needs
 *   silently relies on. Newer work next on its stream is waited for however
 *   late a loaded machine wakes that stream's worker. Ordering the program
 *   asked for (stream order, event waits, the legacy stream's implicit
 *   waits, host synchronisation) is never broken.
 * Bounds, so that chaos never deadlocks a correct program (a kernel that
 * spins until another stream's kernel signals it): newer work queued behind
 * older work of its stream is waited for at most 2 ms, and no work is held
 * longer than 20 ms after its worker reached it.
 * Without SIMCUDA_CHAOS nothing of this runs. */
#include "sim/driver/internal.h"

#include <ctype.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define DELAY_MIN_NS 1500000ULL
#define DELAY_SPAN_NS 1500000ULL
#define QUEUED_MAX_NS 2000000ULL
#define HOLD_MAX_NS 20000000ULL
#define AWAIT_DEPTH 4

int sim_chaos_on;
static uint64_t g_seed;
static _Atomic uint64_t g_tickets;

enum { ENT_QUEUED = 0, ENT_HELD, ENT_RUNNING };
typedef struct {
    uint64_t ticket;
    uint64_t enq_ns; /* when it was enqueued */
    const void *stream;
    int state;
} ent_t;

static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t g_cv;
static ent_t *g_ents;
static size_t g_n, g_cap;
#define MAX_WAITING 256
static struct {
    const void *stream, *target;
} g_waiting[MAX_WAITING]; /* streams inside an event/stream wait, for target's work */
static int g_nwaiting;
#define MAX_AWAITED 256
static const void *g_awaited[MAX_AWAITED]; /* one per host thread blocked on a stream */
static int g_nawaited;

/* "SEED": a decimal number in [0, 2^63). */
int sim_chaos_init(void)
{
    const char *s = getenv("SIMCUDA_CHAOS");
    sim_chaos_on = 0;
    if (!s || !*s)
        return 0;
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (!isdigit((unsigned char)s[0]) || errno || *end || v > (1ULL << 63)) {
        sim_log("SIMCUDA_CHAOS='%s' is not a seed (a decimal number)", s);
        return -EINVAL;
    }
    pthread_condattr_t a;
    pthread_condattr_init(&a);
    pthread_condattr_setclock(&a, CLOCK_MONOTONIC);
    pthread_cond_init(&g_cv, &a);
    pthread_condattr_destroy(&a);
    g_seed = v;
    sim_chaos_on = 1;
    return 0;
}

void sim_chaos_fork_reset(void)
{
    pthread_mutex_init(&g_mu, NULL);
    free(g_ents);
    g_ents = NULL;
    g_n = g_cap = 0;
    g_nwaiting = 0;
    g_nawaited = 0;
    /* sim_chaos_on and the seed stay; cuInit in the child reads them again. */
}

static uint64_t mix(uint64_t x)
{
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ULL;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebULL;
    x ^= x >> 31;
    return x;
}

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

static ent_t *find(uint64_t t)
{
    for (size_t i = 0; i < g_n; i++)
        if (g_ents[i].ticket == t)
            return &g_ents[i];
    return NULL;
}

static int stream_waiting(const void *s)
{
    for (int i = 0; i < g_nwaiting; i++)
        if (g_waiting[i].stream == s)
            return 1;
    return 0;
}

/* Is a host thread blocked until work of s is done: waiting for s itself,
 * or for a stream that waits for s (an event it recorded, the legacy
 * stream's implicit waits), up to depth links away? */
static int stream_awaited(const void *s, int depth)
{
    for (int i = 0; i < g_nawaited; i++)
        if (g_awaited[i] == s)
            return 1;
    if (depth > 0)
        for (int i = 0; i < g_nwaiting; i++)
            if (g_waiting[i].target == s && stream_awaited(g_waiting[i].stream, depth - 1))
                return 1;
    return 0;
}

uint64_t sim_chaos_ticket(void)
{
    return atomic_fetch_add(&g_tickets, 1) + 1;
}

void sim_chaos_enqueued(uint64_t t, const void *stream)
{
    pthread_mutex_lock(&g_mu);
    if (g_n == g_cap) {
        size_t nc = g_cap ? g_cap * 2 : 256;
        ent_t *a = realloc(g_ents, nc * sizeof(*a));
        if (!a) {
            pthread_mutex_unlock(&g_mu);
            return; /* not tracked: it simply is not waited for */
        }
        g_ents = a;
        g_cap = nc;
    }
    g_ents[g_n++] = (ent_t){t, now_ns(), stream, ENT_QUEUED};
    pthread_mutex_unlock(&g_mu);
}

void sim_chaos_waiting(const void *stream, const void *target, int on)
{
    pthread_mutex_lock(&g_mu);
    if (on && g_nwaiting < MAX_WAITING) {
        g_waiting[g_nwaiting].stream = stream;
        g_waiting[g_nwaiting].target = target;
        g_nwaiting++;
    } else if (!on) {
        for (int i = 0; i < g_nwaiting; i++)
            if (g_waiting[i].stream == stream && g_waiting[i].target == target) {
                g_waiting[i] = g_waiting[--g_nwaiting];
                break;
            }
    }
    pthread_cond_broadcast(&g_cv);
    pthread_mutex_unlock(&g_mu);
}

void sim_chaos_awaited(const void *stream, int on)
{
    if (!stream)
        return;
    pthread_mutex_lock(&g_mu);
    if (on && g_nawaited < MAX_AWAITED) {
        g_awaited[g_nawaited++] = stream;
    } else if (!on) {
        for (int i = 0; i < g_nawaited; i++)
            if (g_awaited[i] == stream) {
                g_awaited[i] = g_awaited[--g_nawaited];
                break;
            }
    }
    pthread_cond_broadcast(&g_cv);
    pthread_mutex_unlock(&g_mu);
}

/* The oldest tracked work of each stream (g_mu held): what its worker runs
 * next, or is about to (the operations before it are quick, or waits that
 * sim_chaos_waiting flags). Returns how many; more than max streams: the
 * rest are not known. */
typedef struct {
    const void *stream;
    uint64_t ticket;
} head_t;
#define MAX_HEADS 64

static int find_heads(head_t *h, int max)
{
    int n = 0;
    for (size_t i = 0; i < g_n; i++) {
        const ent_t *e = &g_ents[i];
        int j = 0;
        while (j < n && h[j].stream != e->stream)
            j++;
        if (j < n) {
            if (e->ticket < h[j].ticket)
                h[j].ticket = e->ticket;
        } else if (n < max) {
            h[n++] = (head_t){e->stream, e->ticket};
        }
    }
    return n;
}

static int is_head(const head_t *h, int n, const ent_t *e)
{
    for (int j = 0; j < n; j++)
        if (h[j].stream == e->stream)
            return h[j].ticket == e->ticket;
    return 0;
}

/* The seeded delay of ticket t, counted from its enqueue. */
static uint64_t delay_ns(uint64_t t)
{
    return DELAY_MIN_NS + mix(g_seed ^ (t * 0x9e3779b97f4a7c15ULL)) % DELAY_SPAN_NS;
}

void sim_chaos_hold(uint64_t t)
{
    uint64_t start = now_ns();
    pthread_mutex_lock(&g_mu);
    ent_t *me = find(t);
    const void *mine = me ? me->stream : NULL;
    /* Untracked (out of memory at the enqueue): only the delay, from now. */
    uint64_t ready = (me ? me->enq_ns : start) + delay_ns(t);
    if (me)
        me->state = ENT_HELD;
    pthread_cond_broadcast(&g_cv);
    for (;;) {
        uint64_t now = now_ns();
        if (now >= start + HOLD_MAX_NS)
            break;
        /* Newer work of other streams that may run before this one: held or
         * running, or next on its stream (its worker is about to take it);
         * queued behind older work of its stream. */
        head_t heads[MAX_HEADS];
        int nheads = -1;
        int newer_active = 0, newer_queued = 0;
        for (size_t i = 0; i < g_n && !newer_active; i++) {
            const ent_t *e = &g_ents[i];
            if (e->ticket <= t || e->stream == mine)
                continue;
            if (e->state != ENT_QUEUED) {
                newer_active = 1;
            } else if (!stream_waiting(e->stream)) {
                if (nheads < 0)
                    nheads = find_heads(heads, MAX_HEADS);
                if (is_head(heads, nheads, e))
                    newer_active = 1;
                else
                    newer_queued = 1;
            }
        }
        int awaited = mine && stream_awaited(mine, AWAIT_DEPTH);
        uint64_t until;
        if (newer_active)
            until = start + HOLD_MAX_NS;
        else if (newer_queued && now < start + QUEUED_MAX_NS)
            until = start + QUEUED_MAX_NS;
        else if (now < ready && !awaited)
            until = ready;
        else
            break;
        struct timespec ts = {(time_t)(until / 1000000000ULL), (long)(until % 1000000000ULL)};
        pthread_cond_timedwait(&g_cv, &g_mu, &ts);
        me = find(t);
    }
    if (me)
        me->state = ENT_RUNNING;
    pthread_cond_broadcast(&g_cv);
    pthread_mutex_unlock(&g_mu);
}

void sim_chaos_done(uint64_t t)
{
    pthread_mutex_lock(&g_mu);
    for (size_t i = 0; i < g_n; i++)
        if (g_ents[i].ticket == t) {
            g_ents[i] = g_ents[--g_n];
            break;
        }
    pthread_cond_broadcast(&g_cv);
    pthread_mutex_unlock(&g_mu);
}
