/* Tests of the argument annotations of shim/funcs.h
 * (intercept/vargs.h): a generated call passes real handles for annotated
 * inputs, leaves plain arguments alone, post-processes annotated outputs
 * only on success, counts handle annotations at compile time, and refuses
 * a call whose R_DEV range is refused. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "intercept/vargs.h"

#include <stdint.h>

/* "virtual" handles of the test: a pointer to the real value */
typedef struct obj { long real; } obj_t;
static obj_t made = { 777 };
static long es_va_in_STREAM(obj_t *o) { return o ? o->real : 0; }
static long es_va_in_EVENT(obj_t *o) { return o->real; }
static void es_va_out_CTX(obj_t **p) { if (p && *p == (obj_t *)(intptr_t)777) *p = &made; }
/* the test's one "allocation": [1000, 1064) */
static int ranges_asked;
static int es_va_range(long p, unsigned long n)
{
    ranges_asked++;
    return p >= 1000 && p < 1064 && n > (unsigned long)(1064 - p);
}

/* the "real" functions record what they got */
static long got[4];
static int real_wait(long s, long e, unsigned flags)
{
    got[0] = s, got[1] = e, got[2] = flags;
    return 0;
}
static int real_getctx(long s, obj_t **pctx, int fail)
{
    got[0] = s;
    *pctx = (obj_t *)(intptr_t)777;
    return fail;
}
static int real_none(void) { return 5; }

/* a generated wrapper, as intercept/virtual/thunks.c makes them */
#define GEN(name, real, params, args)                                                          \
    static int name params                                                                     \
    {                                                                                          \
        int r = real ES_VA_CALL args;                                                          \
        ES_VA_POST(r, args);                                                                   \
        return r;                                                                              \
    }
GEN(wrap_wait, real_wait, (obj_t *hStream, obj_t *hEvent, unsigned Flags),
    (V_STREAM(hStream), V_EVENT(hEvent), Flags))
GEN(wrap_getctx, real_getctx, (obj_t *hStream, obj_t **pctx, int fail),
    (V_STREAM(hStream), O_CTX(pctx), fail))
GEN(wrap_none, real_none, (void), ())

/* a generated wrapper with range checks, as intercept/gen.c makes them */
static int real_copy(long dst, long src, unsigned long n, long s)
{
    got[0] = dst, got[1] = src, got[2] = (long)n, got[3] = s;
    return 0;
}
#define GEN_CHECKED(name, real, params, args)                                                  \
    static int name params                                                                     \
    {                                                                                          \
        if (ES_VA_BAD args)                                                                    \
            return -1;                                                                         \
        int r = real ES_VA_CALL args;                                                          \
        ES_VA_POST(r, args);                                                                   \
        return r;                                                                              \
    }
GEN_CHECKED(wrap_copy, real_copy, (long dst, long src, unsigned long n, obj_t *hStream),
            (R_DEV(dst, n), R_DEV(src, n), n, V_STREAM(hStream)))

/* passing the parameters on as they came */
static int pass_on(obj_t *hStream, obj_t **pctx, int fail)
{
    return real_getctx ES_VA_NAMES(V_STREAM((long)hStream), pctx, fail);
}

_Static_assert(ES_VA_COUNT(V_STREAM(a), V_EVENT(b), c) == 2, "count");
_Static_assert(ES_VA_COUNT(a, b, c, d, e, f, g, h, i, j, k, l, m, n, o, O_MOD(p)) == 1, "16");
_Static_assert(ES_VA_COUNT() == 0, "empty");
_Static_assert(ES_VA_COUNT(x) == 0, "plain");
_Static_assert(ES_VA_COUNT(R_DEV(a, n), R_DEV(b, n), n, V_STREAM(s)) == 1, "ranges are no handles");

static void test_inputs_translated(void **state)
{
    (void)state;
    obj_t s = { 11 }, e = { 22 };
    assert_int_equal(wrap_wait(&s, &e, 3), 0);
    assert_int_equal(got[0], 11);
    assert_int_equal(got[1], 22);
    assert_int_equal(got[2], 3);
}

static void test_outputs_on_success_only(void **state)
{
    (void)state;
    obj_t s = { 9 }, *ctx = NULL;
    assert_int_equal(wrap_getctx(&s, &ctx, 0), 0);
    assert_int_equal(got[0], 9);
    assert_ptr_equal(ctx, &made);
    ctx = NULL;
    assert_int_equal(wrap_getctx(&s, &ctx, 1), 1);
    assert_ptr_equal(ctx, (obj_t *)(intptr_t)777); /* the real value, untouched */
    assert_int_equal(wrap_none(), 5);
    /* names only: the handle value itself goes on */
    assert_int_equal(pass_on((obj_t *)(intptr_t)55, &ctx, 0), 0);
    assert_int_equal(got[0], 55);
    assert_ptr_equal(ctx, (obj_t *)(intptr_t)777);
}

static void test_ranges_checked(void **state)
{
    (void)state;
    obj_t s = { 31 };
    ranges_asked = 0;
    got[0] = got[1] = got[2] = got[3] = 0;
    assert_int_equal(wrap_copy(1000, 5000, 64, &s), 0); /* exactly the allocation */
    assert_int_equal(ranges_asked, 2);
    assert_int_equal(got[0], 1000);
    assert_int_equal(got[1], 5000);
    assert_int_equal(got[2], 64);
    assert_int_equal(got[3], 31);
    got[0] = 0;
    assert_int_equal(wrap_copy(1000, 5000, 65, &s), -1); /* dst past the end */
    assert_int_equal(got[0], 0);                         /* never called */
    assert_int_equal(wrap_copy(5000, 1032, 33, &s), -1); /* src past the end */
    assert_int_equal(wrap_copy(5000, 1032, 32, &s), 0);
    assert_int_equal(wrap_copy(900, 6000, 1000, &s), 0); /* outside: the driver decides */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_inputs_translated),
        cmocka_unit_test(test_outputs_on_success_only),
        cmocka_unit_test(test_ranges_checked),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
