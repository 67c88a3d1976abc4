/* Tests of time-slicing (move/tslice.h): the members of a slot take
 * turns in rank order; a dead holder is skipped; and four ESTs (separate
 * processes) share one simulated GPU that holds only one of them at a
 * time, parking and coming back at each turn with their memory whole; and
 * the same four sum their buffers in a collective that takes place while
 * they are parked (each yields at the collective, takes part from its host
 * copies, and comes back at its next turn with the sum, folded in rank
 * order, on the device). The negative control keeps the ESTs resident: the
 * second one finds no memory. A dynamic rotation (a running job's) skips
 * the turn of a member that has not entered and agrees on a switch point. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "move/drv.h"
#include "move/memreg.h"
#include "move/mover.h"
#include "move/tslice.h"
#include "move/vhandle.h"
#include "kernels/swapsum.h"
#include "tests/move/movetest.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#define MiB (1024UL * 1024)
#define N 4
#define STEPS 6

extern const unsigned char es_swapsum_fatbin[];

static char job[64];
static const int ranks[N] = { 3, 1, 0, 2 }; /* any order: turns go by rank */

/* A log shared with the children: who held the turn, in order. */
typedef struct tlog {
    int n;
    int attempted;
    int who[256];
    size_t peak[N];
    int resident, max_resident;   /* cap 2: members holding room, and the most at once */
    int prefetched;               /* turns whose next member had room before the pass */
    int died;                     /* the member that died holding room (-1: none) */
} tlog_t;
static tlog_t *lg;

static void new_job(const char *tag)
{
    snprintf(job, sizeof(job), "test-%s-%d", tag, (int)getpid());
}

static int wait_all(pid_t *pids, int n)
{
    int bad = 0;
    for (int i = 0; i < n; i++) {
        int st = 0;
        waitpid(pids[i], &st, 0);
        if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
            bad++;
    }
    return bad;
}

static void test_join_checks(void **state)
{
    (void)state;
    es_tslice_t *t;
    new_job("join");
    int two[2] = { 0, 1 }, dup[2] = { 1, 1 }, other[2] = { 0, 2 };
    assert_int_equal(es_tslice_join(&t, "bad name", 0, 0, two, 2), -EINVAL);
    assert_int_equal(es_tslice_join(&t, job, 0, 5, two, 2), -EINVAL);
    assert_int_equal(es_tslice_join(&t, job, 0, 1, dup, 2), -EINVAL);
    assert_int_equal(es_tslice_join(&t, job, -1, 0, two, 2), -EINVAL);
    assert_int_equal(es_tslice_join(&t, job, 0, 0, two, 2), 0);
    es_tslice_t *u;
    /* the same slot with another set of members: refused */
    assert_int_equal(es_tslice_join(&u, job, 0, 0, other, 2), -EPROTO);
    assert_true(es_tslice_mine(t)); /* rank 0 first */
    es_tslice_t *v;
    assert_int_equal(es_tslice_join(&v, job, 0, 1, two, 2), 0);
    assert_int_equal(es_tslice_pass(v), -EPERM);
    assert_int_equal(es_tslice_wait(v, 10), -ETIMEDOUT);
    assert_int_equal(es_tslice_pass(t), 0);
    assert_int_equal(es_tslice_wait(v, 1000), 0);
    assert_int_equal(es_tslice_passes(v), 1);
    es_tslice_leave(v); /* passes the turn on */
    assert_true(es_tslice_mine(t));
    es_tslice_leave(t);
}

static int rotate_child(int rank, int die_at)
{
    es_tslice_t *t;
    if (es_tslice_join(&t, job, 0, rank, ranks, N) != 0)
        return 2;
    for (int s = 0; s < STEPS; s++) {
        if (es_tslice_wait(t, 20000) != 0)
            return 3;
        int i = __atomic_fetch_add(&lg->n, 1, __ATOMIC_ACQ_REL);
        if (i < 256)
            lg->who[i] = rank;
        if (rank == die_at && s == 2)
            _exit(0); /* dies holding the turn */
        usleep(2000);
        if (es_tslice_pass(t) != 0)
            return 4;
    }
    es_tslice_leave(t);
    return 0;
}

static void run_rotation(int die_at)
{
    memset(lg, 0, sizeof(*lg));
    pid_t pids[N];
    for (int i = 0; i < N; i++) {
        pids[i] = fork();
        if (pids[i] == 0)
            _exit(rotate_child(ranks[i], die_at));
    }
    assert_int_equal(wait_all(pids, N), 0);
}

/* A dynamic rotation (a running job's, started by the controller): a
 * member that has not entered holds no turn, the switch point is the
 * latest collective offered, and a fixed rotation of the same name is
 * another kind. (In a fixed rotation the holder that has not joined is
 * waited for: test_join_checks.) */
static void test_dynamic_rotation(void **state)
{
    (void)state;
    new_job("dyn");
    const int three[3] = { 2, 0, 1 };
    es_tslice_t *t0, *t1, *t2, *f;
    uint64_t at = 0;
    assert_int_equal(es_tslice_join_dynamic(&t0, job, 0, 0, three, 3), 0);
    assert_int_equal(es_tslice_join_dynamic(&t1, job, 0, 1, three, 3), 0);
    assert_int_equal(es_tslice_join_dynamic(&t2, job, 0, 2, three, 3), 0);
    assert_true(es_tslice_dynamic(t0));
    assert_int_equal(es_tslice_join(&f, job, 0, 1, three, 3), -EPROTO);
    /* the switch point: once every member offered, the latest */
    assert_int_equal(es_tslice_switch_at(t0, &at), -EAGAIN);
    assert_int_equal(es_tslice_offer(t0, 5), 0);
    assert_int_equal(es_tslice_offer(t1, 7), 0);
    assert_int_equal(es_tslice_switch_at(t2, &at), -EAGAIN);
    assert_int_equal(es_tslice_offer(t2, 6), 0);
    assert_int_equal(es_tslice_switch_at(t2, &at), 0);
    assert_int_equal(at, 7);
    /* rank 1 enters first: rank 0's turn is skipped, not waited for */
    assert_int_equal(es_tslice_enter(t1), 0);
    assert_int_equal(es_tslice_enter(t1), -EALREADY);
    assert_false(es_tslice_mine(t1));
    assert_int_equal(es_tslice_wait(t1, 1000), 0);
    assert_true(es_tslice_mine(t1));
    /* alone: the turn stays */
    assert_int_equal(es_tslice_pass(t1), 0);
    assert_true(es_tslice_mine(t1));
    /* rank 0 enters: the next pass is its (rank 2 has not entered) */
    assert_int_equal(es_tslice_enter(t0), 0);
    assert_int_equal(es_tslice_pass(t1), 0);
    assert_true(es_tslice_mine(t0));
    assert_int_equal(es_tslice_wait(t0, 0), 0);
    es_tslice_leave(t2); /* never entered */
    es_tslice_leave(t0); /* passes to rank 1 */
    assert_true(es_tslice_mine(t1));
    es_tslice_leave(t1); /* the last: the segment goes */
    char path[160];
    snprintf(path, sizeof(path), "/dev/shm/easyscale-ts-%u-%s-0", (unsigned)getuid(), job);
    assert_int_equal(access(path, F_OK), -1);
}

/* ---- cap 2: the next member's room while the holder runs ---------------------------- */

static void room_take_note(void)
{
    int r = __atomic_add_fetch(&lg->resident, 1, __ATOMIC_ACQ_REL);
    int m = __atomic_load_n(&lg->max_resident, __ATOMIC_ACQUIRE);
    while (r > m && !__atomic_compare_exchange_n(&lg->max_resident, &m, r, 0, __ATOMIC_ACQ_REL,
                                                 __ATOMIC_ACQUIRE)) {
    }
}

/* A member of a cap-2 rotation: memory (room) first, then the turn; the
 * holder waits (bounded) until the next member has its room, passes, then
 * gives its own room back. die_at: that rank exits holding room and turn
 * at its second turn. */
static int room_child(int rank, int die_at)
{
    es_tslice_t *t;
    if (es_tslice_join_cap(&t, job, 0, rank, ranks, N, 2) != 0)
        return 2;
    for (int s = 0; s < STEPS; s++) {
        if (es_tslice_wait_room(t, 20000) != 0)
            return 3;
        room_take_note();
        if (es_tslice_wait(t, 20000) != 0)
            return 4;
        int i = __atomic_fetch_add(&lg->n, 1, __ATOMIC_ACQ_REL);
        if (i < 256)
            lg->who[i] = rank;
        if (rank == die_at && s == 1) {
            lg->died = rank;
            _exit(0); /* its room must come back to the others */
        }
        /* the next member brings its memory back while this one runs (the
         * last turn of the last member has no next) */
        int want = __atomic_load_n(&lg->n, __ATOMIC_ACQUIRE) < N * STEPS - (die_at >= 0 ? 6 : 0);
        for (int k = 0; want && k < 20000 && __atomic_load_n(&lg->resident, __ATOMIC_ACQUIRE) < 2;
             k++)
            usleep(1000);
        if (__atomic_load_n(&lg->resident, __ATOMIC_ACQUIRE) >= 2)
            __atomic_add_fetch(&lg->prefetched, 1, __ATOMIC_ACQ_REL);
        if (es_tslice_pass(t) != 0)
            return 5;
        __atomic_sub_fetch(&lg->resident, 1, __ATOMIC_ACQ_REL);
        es_tslice_room_release(t);
    }
    es_tslice_leave(t);
    return 0;
}

static void run_rooms(int die_at)
{
    memset(lg, 0, sizeof(*lg));
    lg->died = -1;
    pid_t pids[N];
    for (int i = 0; i < N; i++) {
        pids[i] = fork();
        if (pids[i] == 0)
            _exit(room_child(ranks[i], die_at));
    }
    assert_int_equal(wait_all(pids, N), 0);
}

static void test_two_footprints(void **state)
{
    (void)state;
    es_tslice_t *t, *u;
    int two[2] = { 0, 1 };
    new_job("capchk");
    assert_int_equal(es_tslice_join_cap(&t, job, 0, 0, two, 2, 3), -EINVAL);
    assert_int_equal(es_tslice_join_cap(&t, job, 0, 0, two, 2, 2), 0);
    assert_int_equal(es_tslice_cap(t), 2);
    /* every member gives the same cap */
    assert_int_equal(es_tslice_join_cap(&u, job, 0, 1, two, 2, 1), -EPROTO);
    es_tslice_leave(t);

    new_job("rooms");
    run_rooms(-1);
    assert_int_equal(lg->n, N * STEPS);
    for (int i = 0; i < lg->n; i++) /* turns still in rank order */
        assert_int_equal(lg->who[i], i % N);
    print_message("cap 2: at most %d resident, %d of %d turns with the next one's memory "
                  "back before the pass\n", lg->max_resident, lg->prefetched, lg->n);
    assert_int_equal(lg->max_resident, 2); /* two at once, never three */
    assert_true(lg->prefetched >= lg->n - 1);

    /* a member that dies holding its room gives it back (its memory went) */
    new_job("roomdead");
    run_rooms(1);
    assert_int_equal(lg->died, 1);
    assert_int_equal(lg->n, (N - 1) * STEPS + 2);
}

static void test_turns_in_rank_order(void **state)
{
    (void)state;
    new_job("order");
    run_rotation(-1);
    assert_int_equal(lg->n, N * STEPS);
    for (int i = 0; i < lg->n; i++)
        assert_int_equal(lg->who[i], i % N);
}

static void test_dead_holder_is_skipped(void **state)
{
    (void)state;
    new_job("dead");
    run_rotation(1);
    /* rank 1 held its third turn and died; the others went on without it */
    assert_int_equal(lg->n, (N - 1) * STEPS + 3);
    int seen1 = 0;
    for (int i = 0; i < lg->n; i++)
        seen1 += lg->who[i] == 1;
    assert_int_equal(seen1, 3);
}

/* A killed job's segment (every member dead, none left) is removed by the
 * next join of any rotation; a live job's is not. */
static int shm_exists(const char *jobname)
{
    char path[256];
    snprintf(path, sizeof(path), "/dev/shm/easyscale-ts-%u-%s-0", (unsigned)getuid(), jobname);
    return access(path, F_OK) == 0;
}

/* A child that joins jobname's rotation {0, 1} as rank, says so on fd
 * (one byte), then exits without leaving (die) or waits to be killed. */
static pid_t join_and(const char *jobname, int rank, int die, int fd)
{
    static const int two[2] = { 0, 1 };
    pid_t p = fork();
    if (p == 0) {
        es_tslice_t *t = NULL;
        if (es_tslice_join(&t, jobname, 0, rank, two, 2) != 0)
            _exit(2);
        if (write(fd, "j", 1) != 1)
            _exit(3);
        if (die)
            _exit(0); /* as if killed: never leaves */
        pause();
        _exit(0);
    }
    return p;
}

static void test_killed_job_segment_removed(void **state)
{
    (void)state;
    char dead[64], live[64];
    snprintf(dead, sizeof(dead), "test-killed-%d", (int)getpid());
    snprintf(live, sizeof(live), "test-alive-%d", (int)getpid());
    int pf[2];
    assert_int_equal(pipe(pf), 0);
    pid_t l[2] = { join_and(live, 0, 0, pf[1]), join_and(live, 1, 0, pf[1]) };
    char b[2];
    for (size_t got = 0; got < 2;) { /* both live members joined */
        ssize_t k = read(pf[0], b, 2 - got);
        assert_true(k > 0);
        got += (size_t)k;
    }
    pid_t d[2] = { join_and(dead, 0, 1, pf[1]), join_and(dead, 1, 1, pf[1]) };
    assert_int_equal(wait_all(d, 2), 0);
    close(pf[0]);
    close(pf[1]);
    assert_true(shm_exists(dead));
    assert_true(shm_exists(live));
    es_tslice_t *t = NULL;
    new_job("sweeper");
    static const int one[1] = { 0 };
    assert_int_equal(es_tslice_join(&t, job, 0, 0, one, 1), 0);
    assert_false(shm_exists(dead));
    assert_true(shm_exists(live));
    es_tslice_leave(t);
    for (int i = 0; i < 2; i++) {
        kill(l[i], SIGKILL);
        waitpid(l[i], NULL, 0);
    }
    assert_int_equal(es_tslice_join(&t, job, 0, 0, one, 1), 0);
    assert_false(shm_exists(live)); /* now its members are dead too */
    es_tslice_leave(t);
    assert_false(shm_exists(job));
}

/* ---- four ESTs on one GPU ------------------------------------------------------- */

static void pattern(uint64_t *h, size_t words, int rank, int step)
{
    for (size_t i = 0; i < words; i++)
        h[i] = (uint64_t)(i * 0x9e3779b97f4a7c15ULL) ^ ((uint64_t)rank << 48) ^ (uint64_t)step;
}

#define EST_BYTES (24 * MiB)
#define NCH ((int)(EST_BYTES / ES_SWAPSUM_CHUNK))

/* One EST: each step hashes its memory on the device into its own record,
 * then writes the next step's content; parks between turns. */
static int est_child(int rank, int slice)
{
    ct_setup_shared();
    es_mover_init();
    es_tslice_t *t = NULL;
    if (slice && es_tslice_join(&t, job, 0, rank, ranks, N) != 0)
        return 2;
    if (t && es_tslice_wait(t, 60000) != 0)
        return 3;
    CUcontext ctx;
    CUstream s;
    CUmodule m;
    CUfunction f;
    CUdeviceptr data, sums;
    uint64_t *host = malloc(EST_BYTES);
    if (es_vh_primary_retain(&ctx, 0, 0) || es_vh_set_current(ctx) ||
        es_vh_stream_create(&s, CU_STREAM_NON_BLOCKING, 0, 0) ||
        es_vh_module_load(&m, es_swapsum_fatbin, 0, 0, NULL, NULL) ||
        es_vh_module_get_function(&f, m, "es_swapsum"))
        return 4;
    int got_mem = es_mem_alloc(0, EST_BYTES, ES_ALLOC_PLAIN, &data) == CUDA_SUCCESS &&
                  es_mem_alloc(0, STEPS * NCH * 8, ES_ALLOC_PLAIN, &sums) == CUDA_SUCCESS;
    if (!slice) {
        /* resident ESTs: hold the memory until every EST has tried */
        __atomic_add_fetch(&lg->attempted, 1, __ATOMIC_ACQ_REL);
        for (int i = 0; got_mem && i < 30000 && __atomic_load_n(&lg->attempted,
                                                                 __ATOMIC_ACQUIRE) < N; i++)
            usleep(1000);
    }
    if (!got_mem)
        return 5; /* no memory on the GPU */
    char msg[256];
    for (int step = 0; step < STEPS; step++) {
        if (step > 0 && t) {
            if (es_tslice_wait(t, 60000) != 0 || es_mover_run(0, 0, msg, sizeof(msg)) != 0) {
                fprintf(stderr, "rank %d unpark: %s\n", rank, msg);
                return 6;
            }
        }
        int i = __atomic_fetch_add(&lg->n, 1, __ATOMIC_ACQ_REL);
        if (i < 256)
            lg->who[i] = rank;
        size_t used = ct_used(0);
        if (used > lg->peak[rank])
            lg->peak[rank] = used;
        pattern(host, EST_BYTES / 8, rank, step);
        es_swapsum_args_t a = { (const es_u64 *)data, (es_u64 *)(sums + (size_t)step * NCH * 8),
                                (es_u64)NCH };
        void *params[] = { &a };
        if (cuMemcpyHtoD(data, host, EST_BYTES) != CUDA_SUCCESS ||
            cuLaunchKernel(es_vh_real(f), NCH, 1, 1, ES_SWAPSUM_THREADS, 1, 1, 0,
                           es_vh_stream(s), params, NULL) != CUDA_SUCCESS ||
            cuStreamSynchronize(es_vh_stream(s)) != CUDA_SUCCESS)
            return 7;
        if (t) {
            if (es_mover_run(0, ES_MOVER_PARK, msg, sizeof(msg)) != 0) {
                fprintf(stderr, "rank %d park: %s\n", rank, msg);
                return 8;
            }
            es_tslice_pass(t);
        }
    }
    if (t && (es_tslice_wait(t, 60000) != 0 || es_mover_run(0, 0, msg, sizeof(msg)) != 0))
        return 9;
    /* every step's hashes of this EST's memory, against the host's */
    uint64_t *got = malloc(STEPS * NCH * 8);
    if (cuMemcpyDtoH(got, sums, STEPS * NCH * 8) != CUDA_SUCCESS)
        return 10;
    for (int step = 0; step < STEPS; step++) {
        pattern(host, EST_BYTES / 8, rank, step);
        for (int c = 0; c < NCH; c++)
            if (got[step * NCH + c] != es_ss_chunk(host + c * (ES_SWAPSUM_CHUNK / 8)))
                return 11;
    }
    if (t) {
        es_mover_run(0, ES_MOVER_PARK, msg, sizeof(msg));
        es_tslice_leave(t);
    }
    return 0;
}

static int run_ests(int slice)
{
    memset(lg, 0, sizeof(*lg));
    pid_t pids[N];
    for (int i = 0; i < N; i++) {
        pids[i] = fork();
        if (pids[i] == 0)
            _exit(est_child(ranks[i], slice));
    }
    return wait_all(pids, N);
}

static void test_four_ests_on_one_gpu(void **state)
{
    (void)state;
    new_job("ests");
    assert_int_equal(run_ests(1), 0);
    /* every EST ran every step, in turn */
    assert_int_equal(lg->n, N * STEPS);
    for (int i = 0; i < lg->n; i++)
        assert_int_equal(lg->who[i], i % N);
    /* at most one EST's memory on the GPU while an EST ran, plus staging */
    for (int r = 0; r < N; r++)
        assert_true(lg->peak[r] <= EST_BYTES + 3 * 2 * MiB);
}

static void test_negative_control_without_slicing(void **state)
{
    (void)state;
    new_job("resident");
    /* the same ESTs kept resident: the GPU holds one; the others fail */
    assert_true(run_ests(0) >= N - 1);
}

/* ---- a collective while parked -------------------------------------------------------- */

#define CB (6 * MiB)             /* each EST's buffer: contributions in shared memory */
#define CN ((size_t)(CB / 4))   /* floats */
#define CSTEPS 3

typedef struct coll {
    float in[N][CN];            /* contributions, by rank */
    int arrived[CSTEPS], done[CSTEPS];
    size_t peak[N];
} coll_t;
static coll_t *cl;

static float cval(int rank, int step, size_t i)
{
    return (float)((i * 2654435761u + (unsigned)rank * 977u + (unsigned)step * 131u) % 1000u) /
           7.0f;
}

static void spin_until(int *v, int want)
{
    while (__atomic_load_n(v, __ATOMIC_ACQUIRE) < want)
        usleep(200);
}

/* One EST: per step, fill its buffer on the device, then an all-reduce:
 * yield (park, pass the turn), contribute from the host copy, fold the four
 * contributions in rank order into the host copy, come back at its turn
 * and check the device holds the sum. */
static int coll_child(int rank)
{
    ct_setup_shared();
    es_mover_init();
    es_tslice_t *t = NULL;
    char msg[256] = "";
    if (es_tslice_join(&t, job, 0, rank, ranks, N) != 0 || es_tslice_wait(t, 60000) != 0)
        return 2;
    CUcontext ctx;
    CUdeviceptr buf;
    if (es_vh_primary_retain(&ctx, 0, 0) || es_vh_set_current(ctx) ||
        es_mem_alloc(0, CB, ES_ALLOC_PLAIN, &buf) != CUDA_SUCCESS)
        return 3;
    float *h = malloc(CB), *want = malloc(CB);
    for (int step = 0; step < CSTEPS; step++) {
        for (size_t i = 0; i < CN; i++)
            h[i] = cval(rank, step, i);
        if (cuMemcpyHtoD(buf, h, CB) != CUDA_SUCCESS)
            return 4;
        size_t used = ct_used(0);
        if (used > cl->peak[rank])
            cl->peak[rank] = used;
        /* the collective */
        if (es_mover_yield(t, msg, sizeof(msg)) != 0) {
            fprintf(stderr, "rank %d yield: %s\n", rank, msg);
            return 5;
        }
        if (es_swap_park_read(0, cl->in[rank], buf, CB) != 0)
            return 6;
        __atomic_add_fetch(&cl->arrived[step], 1, __ATOMIC_ACQ_REL);
        spin_until(&cl->arrived[step], N);
        for (size_t i = 0; i < CN; i++) {
            float a = cl->in[0][i];
            for (int r = 1; r < N; r++)
                a += cl->in[r][i];
            h[i] = a;
        }
        if (es_swap_park_write(0, buf, h, CB) != 0)
            return 7;
        __atomic_add_fetch(&cl->done[step], 1, __ATOMIC_ACQ_REL);
        spin_until(&cl->done[step], N); /* nobody overwrites a contribution still read */
        if (es_mover_resume(t, 0, msg, sizeof(msg)) != 0) {
            fprintf(stderr, "rank %d resume: %s\n", rank, msg);
            return 8;
        }
        /* the sum, folded in rank order, is on the device */
        for (size_t i = 0; i < CN; i++) {
            float a = cval(0, step, i);
            for (int r = 1; r < N; r++)
                a += cval(r, step, i);
            want[i] = a;
        }
        if (cuMemcpyDtoH(h, buf, CB) != CUDA_SUCCESS || memcmp(h, want, CB) != 0)
            return 9;
    }
    if (es_mover_yield(t, msg, sizeof(msg)) != 0)
        return 10;
    es_tslice_leave(t);
    return 0;
}

static void test_collective_while_parked(void **state)
{
    (void)state;
    new_job("coll");
    memset(cl, 0, sizeof(*cl));
    pid_t pids[N];
    for (int i = 0; i < N; i++) {
        pids[i] = fork();
        if (pids[i] == 0)
            _exit(coll_child(ranks[i]));
    }
    assert_int_equal(wait_all(pids, N), 0);
    /* one EST's memory on the GPU at a time, plus staging */
    for (int r = 0; r < N; r++)
        assert_true(cl->peak[r] > 0 && cl->peak[r] <= CB + 3 * 2 * MiB);
}

int main(void)
{
    /* one GPU with room for one EST (24 MiB + its records + staging) */
    char shm[64];
    snprintf(shm, sizeof(shm), "/simcuda-test-tslice-%d", (int)getpid());
    setenv("SIMCUDA_SHM_NAME", shm, 1);
    setenv("SIMCUDA_DEVICES", "a100:40M", 1);
    unsetenv("CUDA_VISIBLE_DEVICES");
    lg = mmap(NULL, sizeof(*lg), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    cl = mmap(NULL, sizeof(*cl), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_join_checks),
        cmocka_unit_test(test_dynamic_rotation),
        cmocka_unit_test(test_turns_in_rank_order),
        cmocka_unit_test(test_dead_holder_is_skipped),
        cmocka_unit_test(test_killed_job_segment_removed),
        cmocka_unit_test(test_two_footprints),
        cmocka_unit_test(test_four_ests_on_one_gpu),
        cmocka_unit_test(test_collective_while_parked),
        cmocka_unit_test(test_negative_control_without_slicing),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    shm_unlink(shm);
    return rc;
}
