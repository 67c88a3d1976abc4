/* Virtual cuDNN backend descriptors (docs/MOVING.md, section 4): while the
 * vendors' handles are virtual (intercept/virtual/libh.h) and determinism is on,
 * every cudnnBackendDescriptor_t the application holds is a shim object
 * whose first member is cuDNN's descriptor now. The shim journals what
 * re-creating it needs (every attribute set, with descriptor elements as
 * references to other objects; whether and in which order it was
 * finalized, and in which context; for a descriptor cuDNN filled through
 * cudnnBackendGetAttribute, where from), so that a move destroys the real
 * descriptors while the old context exists and re-creates them on the new
 * GPU, finalized there (implemented in intercept/cudnn_backend.c).
 *
 * Translation (every backend entry point, cudnnBackendExecute included):
 * es_dnnd_real(d) reads the object's head, no lock, no allocation. The
 * objects live in the handle arena (lib/harena.h): a value outside it
 * passes unchanged and unread (cuDNN judges it); an arena address without
 * the descriptor magic (a destroyed descriptor, whose slot is given back,
 * or another kind of shim object) becomes NULL, which cuDNN refuses with
 * its null-pointer status. */
#ifndef ES_INTERCEPT_VIRTUAL_CUDNN_VDESC_H
#define ES_INTERCEPT_VIRTUAL_CUDNN_VDESC_H

#include "lib/harena.h"

#include <stddef.h>
#include <stdint.h>

#define ES_DNND_MAGIC 0x45534244u /* "ESBD" */

/* The head of every virtual backend descriptor. */
typedef struct es_dnnd_head {
    void *real; /* cuDNN's descriptor now (NULL: destroyed, or not re-made) */
    uint32_t magic;
} es_dnnd_head_t;

/* Whether backend descriptors are virtual (set when cuDNN is loaded, before
 * any descriptor exists). */
extern int es_dnnd_on;

static inline void *es_dnnd_real(const void *d)
{
    const es_dnnd_head_t *o = (const es_dnnd_head_t *)d;
    __asm__("" : "+r"(o)); /* see es_harena_word */
    if (__builtin_expect(es_dnnd_on, 1) && __builtin_expect(es_harena_has(o), 1))
        return __builtin_expect(o->magic == ES_DNND_MAGIC, 1) ? o->real : NULL;
    return (void *)d;
}

/* Decides es_dnnd_on (called by es_libh_install once). */
void es_dnnd_setup(int libh_on);

/* Move hooks, called by intercept/virtual/libh.c's: down before the vendor handles
 * are destroyed (every real descriptor of vdev's group destroyed, newest
 * first), up after they are re-made (every live descriptor re-created in
 * finalize order, given its attributes with the new real handles and
 * descriptors, finalized in its context). A descriptor that cannot be
 * re-made is left without a real one: its next use returns the status
 * cuDNN gave (logged at the move); never a failure of the move. 0. */
int es_dnnd_down(int vdev, char *msg, size_t msglen);
int es_dnnd_up(int vdev, char *msg, size_t msglen);

#endif
