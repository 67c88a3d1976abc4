/* The door (docs/MOVING.md, section 5): safe points for moving an EST.
 *
 * Every wrapper of the shim passes the door: es_door_enter() when it starts
 * (a thread-local depth counter and one comparison of a thread-local epoch
 * with a global one; no lock, no atomic read-modify-write), es_door_leave()
 * when it returns. A move request (es_door_request: the controller's seam,
 * a signal handler, the control hook) bumps the global epoch, so every
 * thread's next entry takes the slow path (es_door_slow):
 *
 * - the first outermost call (depth 1) of any thread becomes the mover: it
 *   makes every thread's depth visible (membarrier), waits until every
 *   other thread is outside a call, held at the door, or inside a declared
 *   safe section, runs the request's function, and opens the door again;
 * - other outermost calls wait at the door until the move is over; nested
 *   calls (a wrapper called from inside another wrapped call) never wait;
 * - a thread's first pass after a move runs the rebind hook (its current
 *   contexts: move/vhandle.h) before its call goes on.
 *
 * A request made while a stream capture is in progress (es_door_capture_*),
 * or while something else holds moves off (es_door_hold_*: CUDA graphs
 * alive), waits until the last one has ended. A thread blocked inside a call
 * for a long time (waiting in a virtual collective) brackets the wait with
 * es_door_safe_begin/end and calls es_door_safe_point() while it waits: it
 * then counts as outside any call and performs a pending move itself.
 * A mover that cannot get the other threads out of their calls within the
 * timeout gives up: nothing is done, the request fails with -ETIMEDOUT.
 *
 * The request's function reports whether the EST ends parked (in host
 * memory only): the door then stays closed, every outermost call waits,
 * until a later request makes it resident again (the waiting threads
 * perform that request).
 *
 * Thread-safety: es_door_request is async-signal-safe (atomic stores only)
 * when its function and argument are the ones given to es_door_set_signal.
 * Everything else may be called from any thread, never from a signal
 * handler. Processes that need membarrier (Linux 4.14) and lack it get
 * -ENOSYS from es_door_request.
 */
#ifndef ES_MOVE_DOOR_H
#define ES_MOVE_DOOR_H

#include <stddef.h>

typedef struct es_door_tls {
    unsigned epoch;            /* the global epoch at this thread's last pass */
    unsigned depth;            /* wrapped calls in progress on this thread */
    int waiting;               /* held at the door */
    int safe;                  /* inside es_door_safe_begin/end */
    int moving;                /* performing a request (its calls are the move's) */
    int registered;
    unsigned moves_seen;
    struct es_door_tls *next, *prev;
    int tid;
} es_door_tls_t;

extern unsigned es_door_epoch;
extern __thread es_door_tls_t es_door_tls __attribute__((tls_model("initial-exec")));

/* 1 when the caller must call es_door_slow() (before its real call). */
static inline int es_door_enter(void)
{
    es_door_tls.depth++;
    __asm__ __volatile__("" ::: "memory");
    return __builtin_expect(es_door_tls.epoch != __atomic_load_n(&es_door_epoch,
                                                                 __ATOMIC_RELAXED), 0);
}

static inline void es_door_leave(void)
{
    __asm__ __volatile__("" ::: "memory");
    es_door_tls.depth--;
}

void es_door_slow(void);

/* The function a move runs at the safe point: returns 0 or a negative
 * errno (message in msg); sets *parked to 1 when the EST ends in host
 * memory only, 0 when resident. */
typedef int (*es_door_fn)(void *arg, int *parked, char *msg, size_t msglen);

/* Asks for fn(arg) at the next safe point; returns a ticket (> 0), or
 * -EBUSY (a request is pending already), -ENOSYS (no membarrier). */
long es_door_request(es_door_fn fn, void *arg);
/* Waits up to timeout_ms (-1: forever) for ticket's outcome: 0 and *rc /
 * msg filled, or -ETIMEDOUT, or -ENOENT for a ticket that is not the last
 * one requested. */
int es_door_result(long ticket, int timeout_ms, int *rc, char *msg, size_t msglen);

/* Withdraws a request no safe point has taken up yet: 0, or -EALREADY when
 * its move has started (or ended), -ENOENT for another ticket. */
int es_door_cancel(long ticket);

/* What a signal handler requests: es_door_request(fn, arg) from the
 * handler (stored here beforehand, so the handler stores nothing else). */
void es_door_set_signal(es_door_fn fn, void *arg);
long es_door_request_from_signal(void);

/* The hook a thread runs on its first pass after a move. */
void es_door_set_rebind(int (*hook)(void));
/* How long a mover waits for the other threads (default 60 s). */
void es_door_set_timeout_ms(int ms);

/* Stream captures in progress (the capture wrappers count them). */
void es_door_capture_begin(void);
void es_door_capture_end(void);
/* Captures in progress in the process (one relaxed load). */
int es_door_captures(void);
/* Other things that put moves off while they last (CUDA graphs alive: they
 * hold the device's real handles); counted like captures. */
void es_door_hold_begin(void);
void es_door_hold_end(void);

/* Long waits inside a call (see above). es_door_safe_point returns 1 when
 * it performed a move, 0 otherwise. */
void es_door_safe_begin(void);
int es_door_safe_point(void);
void es_door_safe_end(void);

/* Whether the door is closed (the EST parked), and how many moves ran. */
int es_door_parked(void);
unsigned es_door_moves(void);

#endif
