/* Unit tests of the intra-job scheduler (controller/sched.h) against an
 * independent brute force: every vector of per-slot counts is tried, the
 * smallest maximum load and, among the vectors reaching it, the fewest
 * moves are the known optimal answers. Hand-worked tables first, then
 * random ones (fixed seed), memory limits with and without time-slicing,
 * refusals, bad input, and the two rules the benchmark compares against. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "controller/sched.h"

/* Load of k ESTs on slot s, written out again from the model in sched.h
 * (not by calling the module). UINT64_MAX: not placeable. */
static uint64_t ref_load(const es_sched_in_t *in, int s, int k)
{
    if (k == 0)
        return 0;
    uint64_t fit = in->est_mem ? in->slots[s].mem / in->est_mem : (uint64_t)k;
    if (fit == 0 || ((uint64_t)k > fit && !in->time_slicing))
        return UINT64_MAX;
    uint64_t extra = (uint64_t)k > fit ? (uint64_t)k - fit : 0;
    return (uint64_t)k * in->slots[s].est_ns + extra * in->swap_ns;
}

typedef struct best {
    uint64_t load; /* UINT64_MAX: infeasible */
    int moves;
} best_t;

static void brute(const es_sched_in_t *in, int s, int left, int *k, best_t *b)
{
    if (s == in->nslots - 1) {
        k[s] = left;
        uint64_t m = 0;
        for (int i = 0; i < in->nslots; i++) {
            uint64_t l = ref_load(in, i, k[i]);
            if (l > m)
                m = l;
        }
        if (m == UINT64_MAX)
            return;
        int cur[ES_SCHED_MAX_SLOTS] = { 0 }, kept = 0;
        for (int i = 0; i < in->nests; i++)
            if (in->cur && in->cur[i] >= 0)
                cur[in->cur[i]]++;
        for (int i = 0; i < in->nslots; i++)
            kept += cur[i] < k[i] ? cur[i] : k[i];
        int moves = in->nests - kept;
        if (m < b->load || (m == b->load && moves < b->moves)) {
            b->load = m;
            b->moves = moves;
        }
        return;
    }
    for (int x = 0; x <= left; x++) {
        k[s] = x;
        brute(in, s + 1, left - x, k, b);
    }
}

/* Runs the scheduler and checks it against the brute force; returns its
 * maximum load (or UINT64_MAX when it refused). */
static uint64_t check_against_brute(const es_sched_in_t *in)
{
    int place[64], k[ES_SCHED_MAX_SLOTS];
    uint64_t maxl = 0;
    int moves = -1;
    char why[256];
    best_t b = { UINT64_MAX, 1 << 30 };
    brute(in, 0, in->nests, k, &b);
    int rc = es_sched_place(in, place, &maxl, &moves, why, sizeof(why));
    if (b.load == UINT64_MAX) {
        assert_int_equal(rc, -ENOSPC);
        assert_true(strlen(why) > 0);
        return UINT64_MAX;
    }
    assert_int_equal(rc, 0);
    assert_true(maxl == b.load);
    assert_int_equal(moves, b.moves);
    /* the placement itself has that load and that many moves */
    int cnt[ES_SCHED_MAX_SLOTS] = { 0 }, diff = 0;
    for (int i = 0; i < in->nests; i++) {
        assert_true(place[i] >= 0 && place[i] < in->nslots);
        cnt[place[i]]++;
        diff += !in->cur || place[i] != in->cur[i];
    }
    uint64_t m = 0;
    for (int s = 0; s < in->nslots; s++) {
        uint64_t l = ref_load(in, s, cnt[s]);
        if (l > m)
            m = l;
    }
    assert_true(m == b.load);
    assert_int_equal(diff, b.moves);
    return maxl;
}

static void test_known_tables(void **state)
{
    (void)state;
    /* two equal slots, 4 ESTs: 2 + 2 */
    es_sched_slot_t eq[2] = { { 10, 0 }, { 10, 0 } };
    es_sched_in_t in = { .nslots = 2, .slots = eq, .nests = 4 };
    assert_true(check_against_brute(&in) == 20);
    /* A100-like (10) and T4-like (40), 5 ESTs: 4 + 1, load 40 */
    es_sched_slot_t at[2] = { { 10, 0 }, { 40, 0 } };
    in = (es_sched_in_t){ .nslots = 2, .slots = at, .nests = 5 };
    assert_true(check_against_brute(&in) == 40);
    /* 10, 16, 40 with 8 ESTs: (4,3,1) = max(40, 48, 40) = 48, worked by hand */
    es_sched_slot_t three[3] = { { 10, 0 }, { 16, 0 }, { 40, 0 } };
    in = (es_sched_in_t){ .nslots = 3, .slots = three, .nests = 8 };
    assert_true(check_against_brute(&in) == 48);
    /* 2 and 3 with 5 ESTs: (3,2) = 6 */
    es_sched_slot_t tt[2] = { { 2, 0 }, { 3, 0 } };
    in = (es_sched_in_t){ .nslots = 2, .slots = tt, .nests = 5 };
    assert_true(check_against_brute(&in) == 6);
    /* a slot so slow it gets nothing: 1 and 100, 3 ESTs -> 3 on the fast one */
    es_sched_slot_t slow[2] = { { 1, 0 }, { 100, 0 } };
    int place[3];
    uint64_t l;
    int mv;
    char why[128];
    in = (es_sched_in_t){ .nslots = 2, .slots = slow, .nests = 3 };
    assert_int_equal(es_sched_place(&in, place, &l, &mv, why, sizeof(why)), 0);
    assert_true(l == 3);
    assert_int_equal(place[0] + place[1] + place[2], 0);
}

static void test_few_moves(void **state)
{
    (void)state;
    /* 6 ESTs on two equal GPUs (3+3); a third equal GPU arrives: the
     * optimum (2,2,2) keeps 4 in place, the highest rank of each moves. */
    es_sched_slot_t s3[3] = { { 10, 0 }, { 10, 0 }, { 10, 0 } };
    int cur[6] = { 0, 0, 0, 1, 1, 1 }, place[6], mv;
    uint64_t l;
    char why[128];
    es_sched_in_t in = { .nslots = 3, .slots = s3, .nests = 6, .cur = cur };
    check_against_brute(&in);
    assert_int_equal(es_sched_place(&in, place, &l, &mv, why, sizeof(why)), 0);
    assert_true(l == 20);
    assert_int_equal(mv, 2);
    int want[6] = { 0, 0, 2, 1, 1, 2 };
    for (int i = 0; i < 6; i++)
        assert_int_equal(place[i], want[i]);
    /* 4 ESTs (2+2) and the same third GPU: (2,1,1) is no faster than
     * (2,2,0), so nothing moves */
    int cur4[4] = { 0, 0, 1, 1 };
    in = (es_sched_in_t){ .nslots = 3, .slots = s3, .nests = 4, .cur = cur4 };
    assert_int_equal(es_sched_place(&in, place, &l, &mv, why, sizeof(why)), 0);
    assert_int_equal(mv, 0);
    /* a GPU leaves: ESTs of the others stay, only its ESTs move */
    int cur2[4] = { 0, 1, -1, -1 }; /* ranks 2, 3 were on the removed GPU */
    es_sched_slot_t s2[2] = { { 10, 0 }, { 10, 0 } };
    in = (es_sched_in_t){ .nslots = 2, .slots = s2, .nests = 4, .cur = cur2 };
    check_against_brute(&in);
    assert_int_equal(es_sched_place(&in, place, &l, &mv, why, sizeof(why)), 0);
    assert_int_equal(mv, 2);
    assert_int_equal(place[0], 0);
    assert_int_equal(place[1], 1);
    /* nothing changes: nothing moves */
    int cur3[4] = { 0, 1, 0, 1 };
    in.cur = cur3;
    assert_int_equal(es_sched_place(&in, place, &l, &mv, why, sizeof(why)), 0);
    assert_int_equal(mv, 0);
}

static void test_memory(void **state)
{
    (void)state;
    const uint64_t G = 1ull << 30;
    int place[8], mv;
    uint64_t l;
    char why[256];
    /* 6 GiB ESTs on 8, 8, 16 GiB: 1, 1, 2 fit whatever the speeds */
    es_sched_slot_t s[3] = { { 10, 8 * G }, { 10, 8 * G }, { 1, 16 * G } };
    es_sched_in_t in = { .nslots = 3, .slots = s, .nests = 4, .est_mem = 6 * G };
    assert_true(check_against_brute(&in) == 10);
    /* one more does not fit without time-slicing */
    in.nests = 5;
    assert_int_equal(es_sched_place(&in, place, &l, &mv, why, sizeof(why)), -ENOSPC);
    assert_non_null(strstr(why, "without time-slicing"));
    check_against_brute(&in);
    /* with time-slicing it does, at the swap cost */
    in.time_slicing = 1;
    in.swap_ns = 100;
    check_against_brute(&in);
    /* an EST larger than every GPU: refused even with time-slicing */
    in.est_mem = 20 * G;
    assert_int_equal(es_sched_place(&in, place, &l, &mv, why, sizeof(why)), -ENOSPC);
    assert_non_null(strstr(why, "largest GPU has 16.00 GiB"));
    /* ... but a GPU it fits on takes them all */
    es_sched_slot_t big[2] = { { 10, 8 * G }, { 10, 32 * G } };
    in = (es_sched_in_t){ .nslots = 2, .slots = big, .nests = 3, .est_mem = 20 * G,
                          .time_slicing = 1, .swap_ns = 5 };
    assert_int_equal(es_sched_place(&in, place, &l, &mv, why, sizeof(why)), 0);
    assert_int_equal(place[0] + place[1] + place[2], 3);
    check_against_brute(&in);
}

static void test_random_tables(void **state)
{
    (void)state;
    const uint64_t G = 1ull << 30;
    unsigned seed = 12345;
    int feasible = 0, refused = 0;
    for (int t = 0; t < 3000; t++) {
        es_sched_slot_t s[4];
        int cur[8];
        es_sched_in_t in = { .nslots = 1 + rand_r(&seed) % 4, .slots = s,
                             .nests = 1 + rand_r(&seed) % 8, .cur = cur };
        for (int i = 0; i < in.nslots; i++) {
            s[i].est_ns = 1 + (uint64_t)(rand_r(&seed) % 60);
            s[i].mem = (uint64_t)(4 + rand_r(&seed) % 29) * G;
        }
        if (rand_r(&seed) % 2) {
            in.est_mem = (uint64_t)(1 + rand_r(&seed) % 12) * G;
            in.time_slicing = rand_r(&seed) % 2;
            in.swap_ns = (uint64_t)(rand_r(&seed) % 30);
        }
        for (int i = 0; i < in.nests; i++)
            cur[i] = (int)(rand_r(&seed) % (unsigned)(in.nslots + 1)) - 1;
        if (rand_r(&seed) % 5 == 0)
            in.cur = NULL;
        if (check_against_brute(&in) == UINT64_MAX)
            refused++;
        else
            feasible++;
    }
    /* both outcomes were exercised */
    assert_true(feasible > 1000);
    assert_true(refused > 50);
}

static void test_bad_input(void **state)
{
    (void)state;
    es_sched_slot_t s[2] = { { 10, 0 }, { 0, 0 } };
    int place[2], mv, cur[2] = { 0, 5 };
    uint64_t l;
    char why[64];
    es_sched_in_t in = { .nslots = 2, .slots = s, .nests = 2 };
    assert_int_equal(es_sched_place(&in, place, &l, &mv, why, sizeof(why)), -EINVAL); /* 0 ns */
    s[1].est_ns = 5;
    in.nslots = 0;
    assert_int_equal(es_sched_place(&in, place, &l, &mv, why, sizeof(why)), -EINVAL);
    in.nslots = 2;
    in.nests = 0;
    assert_int_equal(es_sched_place(&in, place, &l, &mv, why, sizeof(why)), -EINVAL);
    in.nests = 2;
    in.cur = cur; /* slot 5 does not exist */
    assert_int_equal(es_sched_place(&in, place, &l, &mv, why, sizeof(why)), -EINVAL);
    in.cur = NULL;
    assert_int_equal(es_sched_place(NULL, place, &l, &mv, why, sizeof(why)), -EINVAL);
    assert_int_equal(es_sched_place(&in, NULL, &l, &mv, why, sizeof(why)), -EINVAL);
    assert_int_equal(es_sched_place(&in, place, &l, &mv, why, sizeof(why)), 0);
}

static void test_baselines(void **state)
{
    (void)state;
    int c[3];
    es_sched_slot_t s[3] = { { 10, 0 }, { 16, 0 }, { 40, 0 } };
    es_sched_in_t in = { .nslots = 3, .slots = s, .nests = 8 };
    /* proportional: speeds .1 .0625 .025 -> shares 4.27 2.67 1.07 -> 4 3 1 */
    assert_int_equal(es_sched_proportional(&in, c), 0);
    assert_int_equal(c[0], 4);
    assert_int_equal(c[1], 3);
    assert_int_equal(c[2], 1);
    assert_true(es_sched_max_load(&in, c) == 48);
    /* equal split: 3 3 2 -> the slow slot carries 80 */
    assert_int_equal(es_sched_equal(&in, c), 0);
    assert_int_equal(c[0], 3);
    assert_int_equal(c[1], 3);
    assert_int_equal(c[2], 2);
    assert_true(es_sched_max_load(&in, c) == 80);
    /* where rounding in proportion loses: 1 and 4 with 3 ESTs -> shares
     * 2.4 0.6 -> 2 1 = max(2, 4) = 4; the optimum (3,0) = 3 */
    es_sched_slot_t u[2] = { { 1, 0 }, { 4, 0 } };
    in = (es_sched_in_t){ .nslots = 2, .slots = u, .nests = 3 };
    assert_int_equal(es_sched_proportional(&in, c), 0);
    assert_int_equal(c[0], 2);
    assert_int_equal(c[1], 1);
    assert_true(es_sched_max_load(&in, c) == 4);
    assert_true(check_against_brute(&in) == 3);
    /* and 10, 16, 40 with 4 ESTs: 2 1 1 = 40 against (3,1,0) = 30 */
    in = (es_sched_in_t){ .nslots = 3, .slots = s, .nests = 4 };
    assert_int_equal(es_sched_proportional(&in, c), 0);
    assert_true(es_sched_max_load(&in, c) == 40);
    assert_true(check_against_brute(&in) == 30);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_known_tables),
        cmocka_unit_test(test_few_moves),
        cmocka_unit_test(test_memory),
        cmocka_unit_test(test_random_tables),
        cmocka_unit_test(test_bad_input),
        cmocka_unit_test(test_baselines),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
