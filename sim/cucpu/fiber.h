/* cucpu fibers: user-level contexts on stacks of their own, switched
 * cooperatively (a few instructions on x86-64, ucontext elsewhere), and the
 * stacks themselves (mmap'ed, a PROT_NONE guard page below each, a canary
 * word above the guard page checked when the stack is given back).
 *
 * Contract: a context made by cucpu_fiber_make() runs fn(arg) the first
 * time it is switched to; fn must never return (it switches away for the
 * last time instead). cucpu_fiber_switch(from, to) saves the caller's
 * callee-saved registers in *from and resumes *to; it returns when
 * something switches back to *from. Floating-point control words are not
 * switched: all fibers of an OS thread share that thread's.
 */
#ifndef CUCPU_FIBER_H
#define CUCPU_FIBER_H

#include <stddef.h>
#include <stdint.h>

#if !defined(__x86_64__)
#include <ucontext.h>
#endif

typedef struct cucpu_ctx {
#if defined(__x86_64__)
    void *sp;
#else
    ucontext_t uc;
#endif
} cucpu_ctx;

typedef struct cucpu_stack {
    void *map;          /* whole mapping, guard page first */
    size_t map_size;
    char *lo, *hi;      /* usable range [lo, hi) */
    size_t color;       /* bytes left unused at the top (see cucpu_stack_alloc) */
} cucpu_stack;

/* Bytes of a fiber stack (more under AddressSanitizer, whose frames are
 * larger). */
#if defined(__SANITIZE_ADDRESS__)
#define CUCPU_STACK_BYTES (256u * 1024u)
#else
#define CUCPU_STACK_BYTES (64u * 1024u)
#endif

/* Maps a stack with its guard page and canary. index: which stack of an OS
 * thread this is; stacks start at different offsets in their top page
 * (by index), or the busy top frames of hundreds of fibers would all fall
 * in the same cache sets. Returns 0 or -errno. */
int cucpu_stack_alloc(cucpu_stack *s, int index);
void cucpu_stack_free(cucpu_stack *s);
/* 1 while the canary above the guard page is intact. */
int cucpu_stack_intact(const cucpu_stack *s);

void cucpu_fiber_make(cucpu_ctx *c, const cucpu_stack *s, void (*fn)(void *), void *arg);

#if defined(__x86_64__)
void cucpu_fiber_switch_(void **save_sp, void *to_sp);
/* Inline: every call level around a switch costs a mispredicted return. */
static inline __attribute__((always_inline)) void cucpu_fiber_switch(cucpu_ctx *from,
                                                                     cucpu_ctx *to)
{
    cucpu_fiber_switch_(&from->sp, to->sp);
}
#else
void cucpu_fiber_switch(cucpu_ctx *from, cucpu_ctx *to);
#endif

#endif
