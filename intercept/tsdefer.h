/* Before a wrapped call of a time-sliced EST that keeps collectives
 * (coll/coll.h, "time-slicing"; docs/MOVING.md section 6): does the call
 * depend on what is kept? The handles of its argument list (streams,
 * events, cuBLAS/cuDNN handles: their stream) are noted, then
 * es_ts_check decides:
 *   - an event recorded on a stream with kept work: the record is kept
 *     too (the call returns success);
 *   - cuEventQuery of a kept event, cuStreamQuery of a stream with kept
 *     work: not ready (true: it has not run);
 *   - cuStreamWaitEvent on a kept event, any other use of a stream with
 *     kept work or of a kept event, work on the legacy stream while a
 *     blocking stream has kept work, a context synchronisation or a
 *     release of memory or of a context: the EST yields first
 *     (es_coll_ts_flush), then the call goes on;
 *   - anything else goes on at once (a wait of a stream with kept work on
 *     an event that is not kept only adds an order).
 * Only the application's own calls are looked at: not the engine's (inside
 * an NCCL call), not a move's, not one made while flushing, not the calls
 * a library makes inside a wrapped call. The check runs only while
 * something is kept (es_coll_ts_kept; every wrapper is then on its slow
 * path, shim/real.h es_slow_force). */
#ifndef ES_INTERCEPT_TSDEFER_H
#define ES_INTERCEPT_TSDEFER_H

#include "coll/coll.h"
#include "intercept/vargs.h"

#include <stdint.h>

enum { ES_TS_STREAM = 1, ES_TS_EVENT, ES_TS_LIBH };

#define ES_TS_NOTES 8
typedef struct es_ts_notes {
    int n;
    int kind[ES_TS_NOTES];
    const void *h[ES_TS_NOTES];
} es_ts_notes_t;

static inline void es_ts_note(es_ts_notes_t *t, int kind, const void *h)
{
    if (t->n < ES_TS_NOTES) {
        t->kind[t->n] = kind;
        t->h[t->n++] = h;
    }
}

/* 0: make the call; 1: return *status instead (its library's type). */
int es_ts_check(int lib, int idx, const es_ts_notes_t *t, int *status);

/* The NCCL wrappers mark their calls: the engine's own driver calls are
 * never looked at. */
extern __thread int es_ts_in_nccl;
static inline int es_ts_nccl_enter(void)
{
    return es_ts_in_nccl++;
}
static inline void es_ts_nccl_leave(int *g)
{
    (void)g;
    es_ts_in_nccl--;
}

/* The argument annotations' notes (intercept/vargs.h, ES_VA_PRE). */
#define es_va_pre_STREAM(x) es_ts_note(&es_ts_n_, ES_TS_STREAM, (const void *)(x))
#define es_va_pre_EVENT(x) es_ts_note(&es_ts_n_, ES_TS_EVENT, (const void *)(x))
#define es_va_pre_BLAS(x) es_ts_note(&es_ts_n_, ES_TS_LIBH, (const void *)(x))
#define es_va_pre_DNN(x) es_ts_note(&es_ts_n_, ES_TS_LIBH, (const void *)(x))

/* In a wrapper (or thunk) of lib's sym with annotated argument list args,
 * before anything is translated. */
#define ES_TS_PRE(lib, sym, ret_t, args)                                                   \
    if (__builtin_expect(__atomic_load_n(&es_coll_ts_kept, __ATOMIC_RELAXED) != 0, 0)) {  \
        es_ts_notes_t es_ts_n_ = { 0 };                                                     \
        int es_ts_st_ = 0;                                                                  \
        ES_VA_PRE args                                                                      \
        if (es_ts_check(ES_LIBID_##lib, ES_IDX_##sym, &es_ts_n_, &es_ts_st_))               \
            return (ret_t)(intptr_t)es_ts_st_;                                              \
    }

#endif
