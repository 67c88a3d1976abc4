/* simcuda NCCL across simulated hosts (issue 23, items 2-3): a client of
 * nccl.h (tests/sim/nccl/net_client.c) on 2 hosts x 2 GPUs made by
 * scripts/simhosts (network, IPC, mount, pid namespaces: nothing crosses
 * but the network). Needs root, as CI has: without it simhosts says what is
 * missing and the tests fail (never skip).
 *
 *   results            allreduce of float/double/int32/half against the
 *                      plan's reference fold order, broadcast, allgather,
 *                      reduce-scatter, send/recv; and the negative control
 *                      that the float bits differ from one host's ring
 *   cut                host 1's link cut mid-run: every rank fails, naming
 *                      an unreachable rank of the other host, no hang
 *   dead_peer          rank 3 (host 1) exits mid-run: the others fail, host 0's
 *                      ranks naming a rank of host 1
 *   wrong_interface    negative control: NCCL_SOCKET_IFNAME=lo puts the
 *                      root's loopback in the id; host 1 cannot reach it,
 *                      init fails on every rank within the timeout */
#include "tests/harness.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#define NRANKS 4

/* Runs the client in every host; the simhosts command line and its output. */
static void run_hosts(const char *mode, char *const env[], es_proc_result_t *r)
{
    const char *client = es_need_built("tests/sim/nccl/net_client");
    const char *simhosts = es_root_path("scripts/simhosts");
    char cmd[2048];
    snprintf(cmd, sizeof(cmd),
             "%s --hosts 2 --gpus-per-host 2 --gpu a100:2G --grace 2 -- %s %s", simhosts,
             client, mode);
    int rc = es_run_sh(cmd, env, 150, r);
    assert_int_equal(rc, 0);
    print_message("%s\n", r->out);
    if (r->status == 2 && strstr(r->out, "simhosts"))
        fail_msg("scripts/simhosts cannot make the hosts (needs root): see above");
    assert_false(r->timed_out);
}

/* The line of rank r that starts with "rank r: <tag>", or NULL. */
static const char *rank_line(const char *out, int r, const char *tag, char *buf, size_t len)
{
    char key[64];
    snprintf(key, sizeof(key), "rank %d: %s", r, tag);
    const char *p = out;
    while ((p = strstr(p, key)) != NULL) {
        if (p == out || p[-1] == '\n') {
            size_t l = strcspn(p, "\n");
            snprintf(buf, len, "%.*s", (int)(l < len ? l : len - 1), p);
            return buf;
        }
        p++;
    }
    return NULL;
}

static void test_results(void **state)
{
    (void)state;
    char *const env[] = {"NCCL_ALGO=Ring", "NCCL_PROTO=Simple", "NCCL_MIN_CTAS=2",
                         "NCCL_MAX_CTAS=2", "NCCL_SIM_BUFFSIZE=262144",
                         "NCCL_SIM_TIMEOUT_MS=20000", "NCCL_SIM_INIT_TIMEOUT_MS=30000", NULL};
    es_proc_result_t r;
    run_hosts("results", env, &r);
    char buf[512];
    for (int k = 0; k < NRANKS; k++) {
        if (!rank_line(r.out, k, "PASS all", buf, sizeof(buf)))
            fail_msg("rank %d did not pass", k);
        if (!rank_line(r.out, k, "PASS negative_control", buf, sizeof(buf)))
            fail_msg("rank %d: no negative control", k);
    }
    const char *bad = strstr(r.out, ": FAIL");
    if (bad)
        fail_msg("a check failed: %.300s", bad > r.out + 40 ? bad - 40 : r.out);
    assert_int_equal(r.status, 0);
    es_proc_result_free(&r);
}

static void test_cut(void **state)
{
    (void)state;
    /* long enough that a loaded machine does not fail before the cut */
    char *const env[] = {"NCCL_SIM_TIMEOUT_MS=5000", "NCCL_SIM_INIT_TIMEOUT_MS=30000", NULL};
    es_proc_result_t r;
    run_hosts("cut", env, &r);
    assert_non_null(strstr(r.out, "rank 0: cut host 1's link"));
    char buf[512];
    for (int k = 0; k < NRANKS; k++) {
        const char *l = rank_line(r.out, k, "FAILED-AS-EXPECTED", buf, sizeof(buf));
        if (!l)
            fail_msg("rank %d did not fail", k);
        if (!strstr(l, "remote process exited or there was a network error"))
            fail_msg("rank %d: not ncclRemoteError: %s", k, l);
        /* it names a rank of the other host, with its address */
        const char *p = strstr(l, "peer rank ");
        if (!p)
            fail_msg("rank %d names no peer: %s", k, l);
        int peer = atoi(p + 10);
        if (peer / 2 == k / 2)
            fail_msg("rank %d names a rank of its own host: %s", k, l);
        char addr[64];
        snprintf(addr, sizeof(addr), "(10.213.0.%d:", peer / 2 + 1);
        if (!strstr(l, addr) || !strstr(l, "unreachable"))
            fail_msg("rank %d: no address of the peer: %s", k, l);
    }
    assert_int_not_equal(r.status, 0);
    es_proc_result_free(&r);
}

static void test_dead_peer(void **state)
{
    (void)state;
    char *const env[] = {"NCCL_SIM_TIMEOUT_MS=20000", "NCCL_SIM_INIT_TIMEOUT_MS=30000", NULL};
    es_proc_result_t r;
    run_hosts("kill", env, &r);
    assert_non_null(strstr(r.out, "rank 3: exits now"));
    char buf[512];
    for (int k = 0; k < NRANKS - 1; k++) {
        const char *l = rank_line(r.out, k, "FAILED-AS-EXPECTED", buf, sizeof(buf));
        if (!l)
            fail_msg("rank %d did not fail", k);
        if (!strstr(l, "remote process exited or there was a network error"))
            fail_msg("rank %d: not ncclRemoteError: %s", k, l);
        const char *p = strstr(l, "peer rank ");
        if (k < 2 && (!p || atoi(p + 10) / 2 != 1 || !strstr(l, "(10.213.0.2:")))
            fail_msg("rank %d names no rank of host 1: %s", k, l);
    }
    assert_int_not_equal(r.status, 0);
    es_proc_result_free(&r);
}

static void test_wrong_interface(void **state)
{
    (void)state;
    char *const env[] = {"NCCL_SOCKET_IFNAME=lo", "NCCL_SIM_INIT_TIMEOUT_MS=3000", NULL};
    es_proc_result_t r;
    run_hosts("init", env, &r);
    char buf[512];
    for (int k = 0; k < NRANKS; k++) {
        const char *l = rank_line(r.out, k, "FAILED-AS-EXPECTED", buf, sizeof(buf));
        if (!l)
            fail_msg("rank %d: init did not fail", k);
    }
    assert_non_null(strstr(r.out, "cannot reach the bootstrap root at 127.0.0.1:"));
    assert_int_not_equal(r.status, 0);
    es_proc_result_free(&r);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_results),
        cmocka_unit_test(test_cut),
        cmocka_unit_test(test_dead_peer),
        cmocka_unit_test(test_wrong_interface),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
