/* Virtual cuDNN backend descriptors (docs/MOVING.md, section 4): while the
 * vendors' handles are virtual (intercept/virtual/libh.h) and determinism is on,
 * every cudnnBackendDescriptor_t the application holds is a shim object
 * whose first member is cuDNN's descriptor now. The shim journals what
 * re-creating it needs (every attribute set, with descriptor elements as
 * references to other objects; whether and in which order it was
 * finalized, and in which context; for a descriptor cuDNN filled through
 * cudnnBackendGetAttribute, where from), so that a move destroys the real
 * descriptors while the old context exists and re-creates them on the new
 * GPU, finalized there (the journal: intercept/virtual/cudnn_journal.c; the
 * backend's wrappers in intercept/cudnn_backend.c tell it what the
 * application does).
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

#include <cudnn.h>

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

/* What the backend's wrappers tell the journal (d: the application's
 * handle; a d that is not a virtual descriptor is ignored):
 * es_dnnd_new: the object standing for cuDNN's new descriptor real of
 * type (NULL: no memory); repicked tells the backend's shadow of a
 * heuristics descriptor the answer re-chosen after a move.
 * es_dnnd_is: whether d is one of the journal's objects.
 * es_dnnd_destroy: the application destroys d (cuDNN's status; BAD_PARAM
 * when destroyed already). es_dnnd_initialized: cudnnBackendInitialize
 * cleared it. es_dnnd_set: an attribute set (as the application gave it).
 * es_dnnd_filled: cuDNN filled n descriptors of arr from attribute name of
 * src (pick: the shim's heuristics answer, -1 none). es_dnnd_finalized: d
 * finalized (real: cuDNN's descriptor). es_dnnd_picked: the shim's
 * heuristics answer of d.
 * es_dnnd_in: a descriptor array translated to the real descriptors
 * (tmp of max elements, else *heap, which the caller frees).
 * es_dnnd_lost: why an execution plan or variant pack has no real
 * descriptor after a move (cuDNN's status from the re-creation). */
void *es_dnnd_new(void *real, int type, void (*repicked)(const void *d, int pick));
int es_dnnd_is(const void *d);
cudnnStatus_t es_dnnd_destroy(void *d);
void es_dnnd_initialized(void *d);
void es_dnnd_set(void *d, int name, int type, int64_t count, const void *arr);
void es_dnnd_filled(const void *src, int name, int64_t n, void *const *arr, int pick);
void es_dnnd_finalized(void *d, void *real);
void es_dnnd_picked(void *d, int pick);
const void *es_dnnd_in(int type, int64_t count, const void *arr, void **tmp, int max,
                       void **heap);
cudnnStatus_t es_dnnd_lost(const void *plan, const void *vp);

#endif
