/* The handle arena: the memory every virtual handle object of the shim
 * lives in (move/vhandle.c's objects, intercept/virtual/libh.c's vendor
 * handles), one reserved range of the address space.
 *
 * Why: translating a handle is one load from the object it points to (the
 * hot path takes no lock). An application that passes a value the shim
 * never handed out (a garbage pointer, the address of a 4-byte variable, a
 * handle of another library) must not make the shim read memory that is
 * not an object. es_harena_has() is two compares: a value outside the range
 * is not the shim's and is passed to the library unchanged, which rejects
 * it with its own status. Memory given back is never unmapped (a stale
 * handle still reads the arena, never freed memory); its slot is reused by
 * a later allocation of the same size class.
 *
 * Contract: es_harena_alloc/es_harena_free are thread-safe (one lock, never
 * on a translation); allocations are zeroed and 64-byte aligned;
 * es_harena_alloc returns NULL when the arena is full (ES_HARENA_SIZE) or
 * cannot be reserved. es_harena_has() may be called before the first
 * allocation (it is then false for every value).
 */
#ifndef ES_LIB_HARENA_H
#define ES_LIB_HARENA_H

#include <stddef.h>
#include <stdint.h>

#define ES_HARENA_SIZE ((size_t)256 << 20) /* address space only: pages appear when used */
#define ES_HARENA_MAX_OBJ 4096            /* the largest object */

extern uintptr_t es_harena_lo; /* 0 until reserved */
extern size_t es_harena_len;

/* Whether p points into the arena (an object of the shim's, live or not). */
static inline int es_harena_has(const void *p)
{
    /* Set once, before the first object exists: the base, then the length
     * (release). The length first (acquire): a length seen set comes with
     * its base; a length of 0 holds no value. (Plain loads on x86-64.) */
    size_t len = __atomic_load_n(&es_harena_len, __ATOMIC_ACQUIRE);
    return (uintptr_t)p - __atomic_load_n(&es_harena_lo, __ATOMIC_RELAXED) < len;
}

/* The first pointer-sized word of the object at p (es_harena_has(p) true).
 * The empty asm hides p's origin from the compiler, which cannot know that
 * only arena addresses get here (no bounds warning on callers that pass the
 * address of a small variable, which never reaches this load). */
static inline void *es_harena_word(const void *p)
{
    __asm__("" : "+r"(p));
    return *(void *const *)p;
}

/* size bytes (at most ES_HARENA_MAX_OBJ), zeroed; NULL when out of room. */
void *es_harena_alloc(size_t size);
/* Gives back an allocation of size bytes: its first pointer-sized word
 * stays as the caller left it (a stale handle's translation reads it) and
 * the rest until the slot is reused, except the second word. p NULL or not
 * in the arena: nothing. */
void es_harena_free(void *p, size_t size);
/* Bytes handed out and not given back (tests). */
size_t es_harena_in_use(void);

#endif
