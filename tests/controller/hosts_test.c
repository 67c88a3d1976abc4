/* A job across simulated hosts (scripts/simhosts: each host its own
 * network, /dev/shm, /tmp and simcuda GPUs): `easyscale-ctl run --nnodes 2`
 * on each of 2 hosts x 2 GPUs (tests/controller/hosts_node.sh), the trainer
 * with 2 ESTs per host and NCCL's own collectives between the hosts.
 *
 *  - the job completes on both hosts: node 0 serves it on TCP with the
 *    token, node 1's ESTs register over the network; every rank prints the
 *    same checksum (the trainer also compares them itself), lines prefixed
 *    with the host's name and the global rank; with NCCL's timeout above
 *    the test's (a destroy must not wait for peers of the other host that
 *    said goodbye and left);
 *  - a host's link cut mid-run (simhosts cut: packets dropped, as a cut
 *    cable): node 0 fails the job naming node 1 and its host, node 1 fails
 *    it for want of an answer from node 0; both runs exit 1.
 * Needs root (network namespaces), as CI runs: fails, never skips, where
 * the hosts cannot be made. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tests/controller/bgjob.h"
#include "tests/harness.h"

#define T_JOB 240 /* a loaded 2-core machine: two hosts' trainers */

static char g_dir[512], g_tok[600];

static char *node_cmd(char *buf, size_t len, const char *extra, int steps, int hb)
{
    snprintf(buf, len, "%s --hosts 2 --gpus-per-host 2 --gpu a100:2G %s -- %s %s 29500 %d %d",
             es_root_path("scripts/simhosts"), extra, es_root_path("tests/controller/hosts_node.sh"),
             g_tok, steps, hb);
    return buf;
}

static void need_hosts(const es_proc_result_t *r)
{
    if (r->status == 2 && strstr(r->out, "simhosts:")) {
        print_message("%s\n", r->out);
        fail_msg("scripts/simhosts cannot make the hosts (needs root): see above");
    }
}

static void test_trainer_two_hosts(void **state)
{
    (void)state;
    char cmd[2048], sum[128] = "", s[128];
    es_proc_result_t r;
    /* NCCL's timeout beyond the test's: a destroy that waited for it on
     * peers of the other host already gone (simcuda once did) fails here */
    char *env[] = { "NCCL_SIM_TIMEOUT_MS=600000", NULL };
    assert_int_equal(es_run_sh(node_cmd(cmd, sizeof(cmd), "", 40, 10), env, T_JOB, &r), 0);
    need_hosts(&r);
    if (r.status != 0)
        fail_msg("the job across hosts exited %d:\n%s", r.status, r.out);
    assert_int_equal(es_count(r.out, "] checksum "), 4);
    for (const char *p = r.out; (p = strstr(p, "] checksum ")) != NULL; p++) {
        assert_int_equal(sscanf(p + 11, "%127s", s), 1);
        if (!sum[0])
            snprintf(sum, sizeof(sum), "%s", s);
        assert_string_equal(s, sum);
    }
    assert_non_null(strstr(r.out, "-h0:0] checksum "));
    assert_non_null(strstr(r.out, "-h1:3] checksum "));
    assert_non_null(strstr(r.out, "(node 0 of 2, 4 ESTs in all) exited with status 0"));
    assert_non_null(strstr(r.out, "(node 1 of 2, 4 ESTs in all) exited with status 0"));
    assert_non_null(strstr(r.out, "all 4 ESTs registered"));
    es_proc_result_free(&r);
}

/* Waits until node 0's daemon says every EST registered and both nodes
 * reported (asked from inside host 0). */
static void wait_registered(const char *run, bg_t *b)
{
    char cmd[2048];
    snprintf(cmd, sizeof(cmd),
             "%s exec --run %s --host 0 -- env EASYSCALE_TOKEN=\"$(cat %s)\" %s status --json "
             "--socket tcp:${SIMHOST_ADDR:-10.213.0.1}:29500",
             es_root_path("scripts/simhosts"), run, g_tok, es_build_path("bin/easyscale-ctl"));
    for (int i = 0; i < T_JOB * 4; i++) {
        es_proc_result_t r;
        if (bg_ended(b)) {
            char *o = bg_output(b);
            fail_msg("the job ended (%d) before every EST registered:\n%s", b->status, o);
        }
        assert_int_equal(es_run_sh(cmd, NULL, 60, &r), 0);
        int ok = r.status == 0 && strstr(r.out, "\"registered\":4,") &&
                 !strstr(r.out, "\"state\":\"unknown\"");
        es_proc_result_free(&r);
        if (ok)
            return;
        msleep(250);
    }
    fail_msg("the ESTs of both hosts did not register");
}

static void test_host_cut(void **state)
{
    (void)state;
    char cmd[2048], runf[700], run[64] = "", extra[800];
    snprintf(runf, sizeof(runf), "%s/run-id", g_dir);
    snprintf(extra, sizeof(extra), "--run-file %s --grace 2", runf);
    node_cmd(cmd, sizeof(cmd), extra, 1000000, 3);
    char *argv[] = { "/bin/bash", "-c", cmd, NULL };
    bg_t b;
    bg_start(&b, NULL, argv);
    for (int i = 0; i < T_JOB * 10 && !run[0]; i++) {
        FILE *f = fopen(runf, "r");
        if (f) {
            if (!fgets(run, sizeof(run), f))
                run[0] = '\0';
            run[strcspn(run, "\n")] = '\0';
            fclose(f);
        }
        if (!run[0]) {
            if (bg_ended(&b)) {
                char *o = bg_output(&b);
                fail_msg("simhosts ended (%d) before its hosts were up:\n%s", b.status, o);
            }
            msleep(100);
        }
    }
    assert_true(run[0] != '\0');
    wait_registered(run, &b);
    es_proc_result_t r;
    snprintf(cmd, sizeof(cmd), "%s cut --run %s --host 1", es_root_path("scripts/simhosts"), run);
    assert_int_equal(es_run_sh(cmd, NULL, 60, &r), 0);
    assert_int_equal(r.status, 0);
    es_proc_result_free(&r);
    assert_int_equal(bg_wait(&b, T_JOB), 1);
    char *o = bg_output(&b);
    if (!strstr(o, "-h1 (node 1): gone: no word from it in ") ||
        !strstr(o, "no answer from the job's controller at tcp:"))
        fail_msg("no node named failed on both hosts:\n%s", o);
    assert_null(strstr(o, "exited with status 0"));
    free(o);
}

static int setup(void **state)
{
    (void)state;
    /* on the shared file system (the hosts' /tmp are their own) */
    snprintf(g_dir, sizeof(g_dir), "%s/hosts.XXXXXX", es_build_path("tests"));
    if (!mkdtemp(g_dir))
        return -1;
    bg_dir(g_dir);
    snprintf(g_tok, sizeof(g_tok), "%s/token", g_dir);
    FILE *f = fopen(g_tok, "w");
    if (!f)
        return -1;
    fprintf(f, "hosts-test-token-%d\n", (int)getpid());
    fclose(f);
    return chmod(g_tok, 0600);
}

static int teardown(void **state)
{
    (void)state;
    bg_kill_all();
    char cmd[700];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", g_dir);
    return system(cmd) == 0 ? 0 : -1;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_trainer_two_hosts),
        cmocka_unit_test(test_host_cut),
    };
    const char *f = getenv("HOSTS_TEST");
    if (f && *f)
        cmocka_set_test_filter(f);
    return cmocka_run_group_tests(tests, setup, teardown);
}
