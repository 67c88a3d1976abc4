/* cucpu fibers: context switch (x86-64 assembly, ucontext elsewhere) and
 * guarded stacks. See fiber.h. */
#include "sim/cucpu/fiber.h"

#include <errno.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define CANARY 0x6375637075535441ULL /* "ATSupcuc" */
#define CANARY_WORDS 8

int cucpu_stack_alloc(cucpu_stack *s, int index)
{
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    size_t size = CUCPU_STACK_BYTES + page;
    memset(s, 0, sizeof(*s));
    void *m = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                   -1, 0);
    if (m == MAP_FAILED)
        return -errno;
    if (mprotect(m, page, PROT_NONE) != 0) {
        int e = errno;
        munmap(m, size);
        return -e;
    }
    s->map = m;
    s->map_size = size;
    s->lo = (char *)m + page;
    s->hi = (char *)m + size;
    s->color = ((size_t)index * 17 % 61) * 64;
    uint64_t *c = (uint64_t *)(void *)s->lo;
    for (int i = 0; i < CANARY_WORDS; i++)
        c[i] = CANARY;
    return 0;
}

void cucpu_stack_free(cucpu_stack *s)
{
    if (s->map)
        munmap(s->map, s->map_size);
    memset(s, 0, sizeof(*s));
}

int cucpu_stack_intact(const cucpu_stack *s)
{
    const volatile uint64_t *c = (const volatile uint64_t *)(const void *)s->lo;
    for (int i = 0; i < CANARY_WORDS; i++)
        if (c[i] != CANARY)
            return 0;
    return 1;
}

#if defined(__x86_64__)

/* cucpu_fiber_switch_(void **save_sp, void *to_sp): pushes the callee-saved
 * registers, stores rsp in *save_sp, loads to_sp and pops the same frame. A
 * new context's frame returns into cucpu_fiber_entry_, which calls fn(arg)
 * from r13 / r12. The MXCSR and x87 control words are not switched: every
 * fiber of an OS thread runs with that thread's (kernels never change
 * them), and loading them costs more than the rest of the switch. */
__asm__(".text\n"
        ".p2align 4\n"
        ".globl cucpu_fiber_switch_\n"
        ".hidden cucpu_fiber_switch_\n"
        ".type cucpu_fiber_switch_, @function\n"
        "cucpu_fiber_switch_:\n"
        "    pushq %rbp\n"
        "    pushq %rbx\n"
        "    pushq %r12\n"
        "    pushq %r13\n"
        "    pushq %r14\n"
        "    pushq %r15\n"
        "    movq %rsp, (%rdi)\n"
        "    movq %rsi, %rsp\n"
        "    popq %r15\n"
        "    popq %r14\n"
        "    popq %r13\n"
        "    popq %r12\n"
        "    popq %rbx\n"
        "    popq %rbp\n"
        "    ret\n"
        ".size cucpu_fiber_switch_, .-cucpu_fiber_switch_\n"
        ".p2align 4\n"
        ".globl cucpu_fiber_entry_\n"
        ".hidden cucpu_fiber_entry_\n"
        ".type cucpu_fiber_entry_, @function\n"
        "cucpu_fiber_entry_:\n"
        "    movq %r12, %rdi\n"
        "    callq *%r13\n"
        "    ud2\n"
        ".size cucpu_fiber_entry_, .-cucpu_fiber_entry_\n"
        ".previous\n");

void cucpu_fiber_entry_(void);

void cucpu_fiber_make(cucpu_ctx *c, const cucpu_stack *s, void (*fn)(void *), void *arg)
{
    /* Frame popped by the switch: r15, r14, r13, r12, rbx, rbp, return
     * address; after the return rsp is top, 16-byte aligned, as the call in
     * the entry stub needs. */
    uintptr_t top = (uintptr_t)(s->hi - s->color) & ~(uintptr_t)15;
    uint64_t *f = (uint64_t *)top - 7;
    f[0] = 0;                        /* r15 */
    f[1] = 0;                        /* r14 */
    f[2] = (uint64_t)(uintptr_t)fn;  /* r13 */
    f[3] = (uint64_t)(uintptr_t)arg; /* r12 */
    f[4] = 0;                        /* rbx */
    f[5] = 0;                        /* rbp */
    f[6] = (uint64_t)(uintptr_t)cucpu_fiber_entry_;
    c->sp = f;
}

#else /* ucontext */

static void trampoline(unsigned int fhi, unsigned int flo, unsigned int ahi, unsigned int alo)
{
    uintptr_t f = ((uintptr_t)fhi << 32) | flo, a = ((uintptr_t)ahi << 32) | alo;
    void (*fn)(void *);
    memcpy(&fn, &f, sizeof(fn));
    fn((void *)a);
}

void cucpu_fiber_make(cucpu_ctx *c, const cucpu_stack *s, void (*fn)(void *), void *arg)
{
    uintptr_t f, a = (uintptr_t)arg;
    memcpy(&f, &fn, sizeof(f));
    getcontext(&c->uc);
    c->uc.uc_stack.ss_sp = s->lo;
    c->uc.uc_stack.ss_size = (size_t)(s->hi - s->lo);
    c->uc.uc_link = NULL;
    makecontext(&c->uc, (void (*)(void))trampoline, 4, (unsigned int)(f >> 32),
                (unsigned int)f, (unsigned int)(a >> 32), (unsigned int)a);
}

void cucpu_fiber_switch(cucpu_ctx *from, cucpu_ctx *to)
{
    swapcontext(&from->uc, &to->uc);
}

#endif
