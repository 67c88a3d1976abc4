/* Tests of the door (move/door.h): a move runs at the next outermost
 * call of any thread, only once every other thread is out of its calls;
 * threads arriving meanwhile wait; nested calls never wait; requests made
 * during a stream capture wait for its end; safe sections let a thread
 * blocked inside a call perform the move; a parked EST keeps the door shut;
 * a stuck thread makes the move time out cleanly; signals can request. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "move/door.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

/* A wrapped call that lasts ms milliseconds. */
static void call(int ms)
{
    if (es_door_enter())
        es_door_slow();
    if (ms)
        usleep((useconds_t)ms * 1000);
    es_door_leave();
}

/* What the move saw. */
static volatile int threads_in_call;  /* maintained by the test threads */
static int seen_in_call = -1;
static double move_start, move_end;
static int move_count, park_next, fail_next;
static volatile int *hold_until; /* the move waits until *hold_until is set */

static int move_fn(void *arg, int *parked, char *msg, size_t len)
{
    (void)arg;
    move_start = now_ms();
    seen_in_call = __atomic_load_n(&threads_in_call, __ATOMIC_ACQUIRE);
    usleep(50000);
    while (hold_until && !*hold_until)
        usleep(1000);
    move_count++;
    *parked = park_next;
    move_end = now_ms();
    if (fail_next) {
        snprintf(msg, len, "refused");
        return -EIO;
    }
    snprintf(msg, len, "moved %d", move_count);
    return 0;
}

static int rebinds;
static __thread int my_rebinds;
static int rebind_hook(void)
{
    __atomic_add_fetch(&rebinds, 1, __ATOMIC_RELAXED);
    my_rebinds++;
    return 0;
}

static int reset(void **state)
{
    (void)state;
    seen_in_call = -1;
    move_count = park_next = fail_next = 0;
    threads_in_call = 0;
    move_start = move_end = 0;
    es_door_set_timeout_ms(5000);
    return 0;
}

static void test_next_call_performs(void **state)
{
    (void)state;
    call(0); /* registered */
    long tk = es_door_request(move_fn, NULL);
    assert_true(tk > 0);
    assert_int_equal(es_door_request(move_fn, NULL), -EBUSY); /* one at a time */
    assert_int_equal(move_count, 0); /* nothing happens until a call */
    unsigned m = es_door_moves();
    call(0);
    assert_int_equal(move_count, 1);
    assert_int_equal(es_door_moves(), m + 1);
    int rc = 1;
    char msg[64];
    assert_int_equal(es_door_result(tk, 1000, &rc, msg, sizeof(msg)), 0);
    assert_int_equal(rc, 0);
    assert_string_equal(msg, "moved 1");
    assert_int_equal(es_door_result(tk + 1, 10, &rc, NULL, 0), -ETIMEDOUT);
    call(0);
    assert_int_equal(move_count, 1);
}

/* A thread in a long call while the move is requested. */
static void *long_caller(void *arg)
{
    int ms = (int)(intptr_t)arg;
    if (es_door_enter())
        es_door_slow();
    __atomic_add_fetch(&threads_in_call, 1, __ATOMIC_ACQ_REL);
    usleep((useconds_t)ms * 1000);
    __atomic_sub_fetch(&threads_in_call, 1, __ATOMIC_ACQ_REL);
    es_door_leave();
    return NULL;
}

static void test_waits_for_calls_in_progress(void **state)
{
    (void)state;
    pthread_t t;
    pthread_create(&t, NULL, long_caller, (void *)200);
    while (!__atomic_load_n(&threads_in_call, __ATOMIC_ACQUIRE))
        usleep(1000);
    double t0 = now_ms();
    long tk = es_door_request(move_fn, NULL);
    assert_true(tk > 0);
    call(0); /* the mover: waits for the other thread to leave its call */
    pthread_join(t, NULL);
    assert_int_equal(move_count, 1);
    assert_int_equal(seen_in_call, 0);
    (void)t0;
}

static double arrived_at, admitted_at;
static volatile int arrived;
static void *late_caller(void *arg)
{
    (void)arg;
    arrived_at = now_ms();
    arrived = 1; /* the move waits for this: it is running now */
    call(0);
    admitted_at = now_ms();
    return NULL;
}

static void *mover_thread(void *arg)
{
    (void)arg;
    call(0);
    return NULL;
}

static void test_others_held_while_moving(void **state)
{
    (void)state;
    call(0);
    arrived = 0;
    hold_until = &arrived;
    long tk = es_door_request(move_fn, NULL);
    assert_true(tk > 0);
    pthread_t m, l;
    pthread_create(&m, NULL, mover_thread, NULL);
    while (move_start == 0)
        usleep(500);
    pthread_create(&l, NULL, late_caller, NULL);
    pthread_join(m, NULL);
    pthread_join(l, NULL);
    hold_until = NULL;
    /* the late caller was admitted only after the move */
    assert_true(arrived_at < move_end);
    assert_true(admitted_at >= move_end);
}

static void test_nested_calls_never_wait(void **state)
{
    (void)state;
    call(0);
    /* inside an outer call the request comes; nested calls go on */
    if (es_door_enter())
        es_door_slow();
    long tk = es_door_request(move_fn, NULL);
    assert_true(tk > 0);
    for (int i = 0; i < 3; i++)
        call(0);
    assert_int_equal(move_count, 0);
    es_door_leave();
    call(0); /* the next outermost call */
    assert_int_equal(move_count, 1);
}

static void test_capture_puts_the_move_off(void **state)
{
    (void)state;
    call(0);
    es_door_capture_begin();
    long tk = es_door_request(move_fn, NULL);
    assert_true(tk > 0);
    for (int i = 0; i < 5; i++)
        call(0);
    assert_int_equal(move_count, 0);
    es_door_capture_end();
    call(0);
    assert_int_equal(move_count, 1);
    /* a capture that begins while the mover waits for another thread */
    pthread_t t;
    pthread_create(&t, NULL, long_caller, (void *)100);
    while (!__atomic_load_n(&threads_in_call, __ATOMIC_ACQUIRE))
        usleep(1000);
    es_door_capture_begin(); /* as if that call began a capture */
    tk = es_door_request(move_fn, NULL);
    call(0);
    pthread_join(t, NULL);
    assert_int_equal(move_count, 1);
    es_door_capture_end();
    call(0);
    assert_int_equal(move_count, 2);
    int rc = 1;
    assert_int_equal(es_door_result(tk, 1000, &rc, NULL, 0), 0);
    assert_int_equal(rc, 0);
}

/* A thread blocked in a "collective" with a safe section. */
static volatile int coll_done;
static int coll_moved;
static void *collective_waiter(void *arg)
{
    (void)arg;
    if (es_door_enter())
        es_door_slow();
    es_door_safe_begin();
    while (!coll_done)
        if (es_door_safe_point())
            coll_moved++;
        else
            usleep(1000);
    es_door_safe_end();
    es_door_leave();
    return NULL;
}

static void test_safe_section(void **state)
{
    (void)state;
    coll_done = 0;
    coll_moved = 0;
    pthread_t w;
    pthread_create(&w, NULL, collective_waiter, NULL);
    usleep(20000);
    /* no other thread calls: the waiting thread moves */
    long tk = es_door_request(move_fn, NULL);
    while (move_count == 0)
        usleep(1000);
    int rc = 1;
    assert_int_equal(es_door_result(tk, 2000, &rc, NULL, 0), 0);
    assert_int_equal(rc, 0);
    /* another thread's call may move too: the waiter does not hold it up */
    tk = es_door_request(move_fn, NULL);
    call(0);
    assert_int_equal(move_count, 2);
    coll_done = 1;
    pthread_join(w, NULL);
    assert_true(coll_moved >= 1);
}

static void *parked_caller(void *arg)
{
    (void)arg;
    call(0);
    admitted_at = now_ms();
    return NULL;
}

static void test_parked_keeps_door_shut(void **state)
{
    (void)state;
    call(0);
    park_next = 1;
    es_door_request(move_fn, NULL);
    /* the call that parks the EST waits too: it has no device to run on */
    admitted_at = 0;
    pthread_t t;
    pthread_create(&t, NULL, parked_caller, NULL);
    while (!es_door_parked())
        usleep(1000);
    usleep(100000);
    assert_true(admitted_at == 0);
    assert_int_equal(move_count, 1);
    /* the swap-in request: performed by the held thread */
    park_next = 0;
    long tk = es_door_request(move_fn, NULL);
    pthread_join(t, NULL);
    assert_true(admitted_at > 0);
    assert_false(es_door_parked());
    assert_int_equal(move_count, 2);
    int rc = 1;
    assert_int_equal(es_door_result(tk, 1000, &rc, NULL, 0), 0);
    assert_int_equal(rc, 0);
}

static void test_stuck_thread_times_out(void **state)
{
    (void)state;
    es_door_set_timeout_ms(100);
    pthread_t t;
    pthread_create(&t, NULL, long_caller, (void *)600);
    while (!__atomic_load_n(&threads_in_call, __ATOMIC_ACQUIRE))
        usleep(1000);
    long tk = es_door_request(move_fn, NULL);
    call(0);
    assert_int_equal(move_count, 0);
    int rc = 0;
    char msg[128];
    assert_int_equal(es_door_result(tk, 1000, &rc, msg, sizeof(msg)), 0);
    assert_int_equal(rc, -ETIMEDOUT);
    assert_non_null(strstr(msg, "inside a call"));
    pthread_join(t, NULL);
    /* the door is open, a new request works */
    es_door_set_timeout_ms(5000);
    es_door_request(move_fn, NULL);
    call(0);
    assert_int_equal(move_count, 1);
}

static void test_failed_move_reported(void **state)
{
    (void)state;
    fail_next = 1;
    long tk = es_door_request(move_fn, NULL);
    call(0);
    int rc = 0;
    char msg[64];
    assert_int_equal(es_door_result(tk, 1000, &rc, msg, sizeof(msg)), 0);
    assert_int_equal(rc, -EIO);
    assert_string_equal(msg, "refused");
    assert_false(es_door_parked());
}

static void on_signal(int sig)
{
    (void)sig;
    es_door_request_from_signal();
}

static void *rebind_thread(void *arg)
{
    (void)arg;
    call(0);
    usleep(150000); /* the move happens meanwhile */
    int before = my_rebinds;
    call(0);
    call(0);
    return (void *)(intptr_t)(my_rebinds - before);
}

static void test_signal_and_rebind(void **state)
{
    (void)state;
    es_door_set_rebind(rebind_hook);
    es_door_set_signal(move_fn, NULL);
    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = on_signal;
    sigaction(SIGUSR2, &sa, NULL);
    pthread_t t;
    pthread_create(&t, NULL, rebind_thread, NULL);
    usleep(30000);
    raise(SIGUSR2);
    call(0);
    assert_int_equal(move_count, 1);
    void *n;
    pthread_join(t, &n);
    /* the other thread re-bound once, on its first call after the move */
    assert_int_equal((int)(intptr_t)n, 1);
    es_door_set_rebind(NULL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup(test_next_call_performs, reset),
        cmocka_unit_test_setup(test_waits_for_calls_in_progress, reset),
        cmocka_unit_test_setup(test_others_held_while_moving, reset),
        cmocka_unit_test_setup(test_nested_calls_never_wait, reset),
        cmocka_unit_test_setup(test_capture_puts_the_move_off, reset),
        cmocka_unit_test_setup(test_safe_section, reset),
        cmocka_unit_test_setup(test_parked_keeps_door_shut, reset),
        cmocka_unit_test_setup(test_stuck_thread_times_out, reset),
        cmocka_unit_test_setup(test_failed_move_reported, reset),
        cmocka_unit_test_setup(test_signal_and_rebind, reset),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
