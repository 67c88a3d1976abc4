/* Tests of the argument annotations of intercept/funcs.h
 * (intercept/vargs.h): a generated call passes real handles for annotated
 * inputs, leaves plain arguments alone, post-processes annotated outputs
 * only on success, and counts annotations at compile time. */
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

/* a generated wrapper, as intercept/thunks.c makes them */
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

/* passing the parameters on as they came */
static int pass_on(obj_t *hStream, obj_t **pctx, int fail)
{
    return real_getctx ES_VA_NAMES(V_STREAM((long)hStream), pctx, fail);
}

_Static_assert(ES_VA_COUNT(V_STREAM(a), V_EVENT(b), c) == 2, "count");
_Static_assert(ES_VA_COUNT(a, b, c, d, e, f, g, h, i, j, k, l, m, n, o, O_MOD(p)) == 1, "16");
_Static_assert(ES_VA_COUNT() == 0, "empty");
_Static_assert(ES_VA_COUNT(x) == 0, "plain");

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

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_inputs_translated),
        cmocka_unit_test(test_outputs_on_success_only),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
