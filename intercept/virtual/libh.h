/* Virtual handles of the vendor libraries (docs/MOVING.md, section 4):
 * while ESTs can move, the cuBLAS, cuBLASLt and cuDNN handles the
 * application holds are the shim's objects whose first member is the
 * library's real handle. Each records the (virtual) context it was made in
 * and every setting given to it (cuBLAS: stream, workspace, math, pointer
 * and atomics modes; cuDNN: stream), so that a move can destroy the real
 * handle while its old context still exists and make a new one on the new
 * GPU, given the same settings. The streams recorded are the application's
 * virtual streams: the libraries receive those and launch on them through
 * the shim, which translates them.
 *
 * Translation (the hot path): es_libh_real(h) checks that h lies in the
 * handle arena (lib/harena.h: the objects live there), reads the
 * object's head (its real handle and its magic, one cache line) and
 * branches, no lock, no allocation. A value outside the arena is never
 * read. A handle without the shim's magic passes unchanged: the
 * libraries' own handles, which they pass to each other's exported
 * functions (cuBLAS to cuBLASLt) and which must reach them as they are.
 * Every parameter of type cublasHandle_t,
 * cublasLtHandle_t or cudnnHandle_t in shim/funcs.h is annotated
 * V_BLAS / V_LT / V_DNN (checked at compile time in intercept/virtual/libh.c), so
 * the generated wrappers and the translating real table translate it.
 *
 * A destroyed handle keeps its (small) object, with no real handle behind
 * it: a call on it reaches the library with a NULL handle and gets the
 * library's own status for that (cuBLAS and cuBLASLt:
 * CUBLAS_STATUS_NOT_INITIALIZED; cuDNN: its bad-parameter status), never
 * a read of freed memory.
 *
 * Off (every translation the identity) when handles are not virtual
 * (EASYSCALE_MOVE=off) and with EASYSCALE_MOVE=nolib (negative controls:
 * moves leave the vendors' handles on the old GPU).
 */
#ifndef ES_INTERCEPT_VIRTUAL_LIBH_H
#define ES_INTERCEPT_VIRTUAL_LIBH_H

#include "lib/harena.h"

#include <stddef.h>
#include <stdint.h>

#define ES_LIBH_MAGIC 0x45534c48u /* "ESLH" */

/* The head of every virtual vendor handle. */
typedef struct es_libh_head {
    void *real; /* the library's handle now (NULL: destroyed, or not re-made) */
    uint32_t magic;
} es_libh_head_t;

/* Whether the vendor handles are virtual (set once, when the first of the
 * three libraries is loaded, before any handle of theirs exists). */
extern int es_libh_on;

static inline void *es_libh_real(const void *h)
{
    const es_libh_head_t *o = (const es_libh_head_t *)h;
    __asm__("" : "+r"(o)); /* see es_harena_word */
    if (__builtin_expect(es_libh_on, 1) && __builtin_expect(es_harena_has(o), 1) &&
        __builtin_expect(o->magic == ES_LIBH_MAGIC, 1))
        return o->real;
    return (void *)h;
}

/* Called when library lib (ES_LIB_CUBLAS, ES_LIB_CUBLASLT, ES_LIB_CUDNN)
 * is loaded and its translating table installed: puts the recording
 * thunks over the creators, destroyers and setters, and registers the
 * move hooks (move/mover.h). */
void es_libh_install(int lib);

/* The virtual handle of a real one the shim handed out (NULL if none). */
void *es_libh_from_real(const void *real);

/* The stream a cuBLAS or cuDNN handle of the shim's launches on (the
 * application's virtual stream; NULL: the legacy one): 1 and *stream, or
 * 0 (not one of the shim's live handles, or a cuBLASLt one: its calls
 * name their stream). */
int es_libh_stream(const void *h, void **stream);

/* Move hooks (move/mover.h): destroy the real handles of vdev's
 * contexts / re-create them where vdev is now. 0 or a negative errno with
 * a reason in msg. */
int es_libh_down(int vdev, char *msg, size_t msglen);
int es_libh_up(int vdev, char *msg, size_t msglen);

#endif
