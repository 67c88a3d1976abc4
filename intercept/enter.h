/* The entry of every wrapper: ES_ENTER(lib, sym) loads the library on
 * first use, counts the call when statistics are on, and passes the door of
 * safe points (move/door.h). Use it once, at the top of a wrapper's body,
 * then call ES_REAL(lib, sym) (shim/real.h). */
#ifndef ES_INTERCEPT_ENTER_H
#define ES_INTERCEPT_ENTER_H

#include "shim/real.h"
#include "move/door.h"

/* ES_ENTER declares a guard whose cleanup leaves the door when the wrapper
 * returns. */
static inline void es_door_guard_leave(int *g)
{
    (void)g;
    es_door_leave();
}
/* The slow path of an entry: load the library / count the call (slow),
 * then the door's (door: a move is pending or the thread is new). */
void es_enter_slow(int lib, int idx, int door);

#define ES_ENTER(lib, sym)                                                     \
    __attribute__((cleanup(es_door_guard_leave))) int es_door_g_ = es_door_enter(); \
    if (__builtin_expect(es_door_g_ |                                          \
                         __atomic_load_n(&es_slow[ES_LIBID_##lib], __ATOMIC_ACQUIRE), 0)) \
        es_enter_slow(ES_LIBID_##lib, ES_IDX_##sym, es_door_g_)

#endif
