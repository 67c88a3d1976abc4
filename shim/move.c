/* The moves seam (shim/move.h) in a build that cannot move ESTs yet: every
 * request is answered -ENOTSUP with a reason the controller shows to the
 * user (`easyscale-ctl migrate` exits 1 with it), and nothing is touched.
 * The implementation of moves replaces this file. */
#include "shim/move.h"

#include "controller/proto.h"

#include <errno.h>
#include <stdio.h>

int es_move_request(const es_move_t *m, es_move_result_t *r)
{
    static const char *const names[] = { "?", "place", "migrate", "swap-out", "swap-in" };
    int op = m && m->op > 0 && m->op < ES_MOVE_NOPS ? m->op : 0;
    if (r)
        snprintf(r->reason, sizeof(r->reason),
                 "%s: moving an EST is not supported by this libeasyscale.so yet", names[op]);
    return -ENOTSUP;
}

uint64_t es_move_footprint(void)
{
    return 0;
}
