/* Tests of scripts/simhosts, simulated hosts as namespaces on this machine:
 * its usage and its check of what it needs (not root: exit 2 naming the
 * missing capabilities); 2 hosts see their index, address and interface;
 * TCP between 2 hosts and among 3 on the bridge (every pair; an address no
 * host has is not reached: the negative control); a file in /dev/shm and
 * /tmp, a unix socket (path and abstract) of host 1 are not seen from host 0
 * nor from the machine, while host 1 sees its own; host 1's simcuda devices,
 * device servers and shared table are not seen from host 0; cut and mend of
 * a host's link; nothing left after a normal, a failed, an interrupted
 * (SIGTERM) and a killed (SIGKILL, then --cleanup-stale) run, where the same
 * check finds the run's processes while it runs. The cases themselves are
 * in simhosts_case.sh (beside this file); this program asserts their lines.
 * Needs root: it fails (never skips) where namespaces cannot be made. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/harness.h"

#define TMO 200 /* a loaded 2-core machine: a run takes seconds */

static char scratch[512];

/* A scratch directory on the shared file system (the hosts' /tmp are their
 * own): in the build directory. */
static int setup_scratch(void **state)
{
    (void)state;
    snprintf(scratch, sizeof scratch, "%s", es_build_path("tests"));
    strncat(scratch, "/simhosts.XXXXXX", sizeof scratch - strlen(scratch) - 1);
    return mkdtemp(scratch) ? 0 : -1;
}

static int teardown_scratch(void **state)
{
    (void)state;
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", scratch);
    return system(cmd) == 0 ? 0 : -1;
}

/* Runs a shell command line; its exit status, output in *out (free). */
static int sh(const char *cmd, char **out)
{
    es_proc_result_t r;
    assert_int_equal(es_run_sh(cmd, NULL, TMO, &r), 0);
    if (r.timed_out)
        fail_msg("timed out: %s\n%s", cmd, r.out);
    print_message("$ %s -> %d\n%s", cmd, r.status, r.out);
    *out = r.out;
    return r.status;
}

/* simhosts_case.sh ARGS with SCRATCH set: its exit status and output */
static int run_case(const char *args, char **out)
{
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "SCRATCH='%s' '%s' %s 2>&1", scratch,
             es_root_path("tests/scripts/simhosts_case.sh"), args);
    return sh(cmd, out);
}

/* scripts/simhosts ARGS: exit status and output */
static int simhosts(const char *prefix, const char *args, char **out)
{
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "%s '%s' %s 2>&1", prefix, es_root_path("scripts/simhosts"), args);
    return sh(cmd, out);
}

#define want(out, line)                                                   \
    do {                                                                  \
        if (!strstr((out), (line)))                                       \
            fail_msg("missing line \"%s\" in:\n%s", (line), (out));       \
    } while (0)
#define want_not(out, text)                                               \
    do {                                                                  \
        if (strstr((out), (text)))                                        \
            fail_msg("unexpected \"%s\" in:\n%s", (text), (out));         \
    } while (0)

static int count(const char *out, const char *text)
{
    int n = 0;
    for (const char *p = strstr(out, text); p; p = strstr(p + 1, text))
        n++;
    return n;
}

/* ---- usage and requirements ------------------------------------------------ */

static void test_usage(void **state)
{
    (void)state;
    char *out;
    assert_int_equal(simhosts("", "--help", &out), 0);
    const char *opts[] = {"--hosts", "--subnet", "--devices", "--gpus-per-host", "--gpu",
                          "--host-devices", "--run-file", "--grace", "--shell",
                          "--cleanup-stale", "cut", "mend", "exec", "SIMHOST_INDEX",
                          "SIMHOST_ADDRS", "SIMHOST_IFNAME", "SIMHOST_CUT_CMD"};
    for (size_t i = 0; i < sizeof opts / sizeof *opts; i++)
        want(out, opts[i]);
    free(out);
    const struct { const char *args, *msg; } bad[] = {
        {"--hosts 0 -- true", "--hosts: not a number of hosts 1..64: '0'"},
        {"--hosts 2x -- true", "--hosts: not a number of hosts"},
        {"--subnet 10.213.0.1/24 -- true", "has host bits set"},
        {"--subnet 10.213.0.0/31 -- true", "prefix length must be 8..30"},
        {"--subnet 10.300.0.0/24 -- true", "not an IPv4 address"},
        {"--hosts 7 --subnet 10.213.0.0/29 -- true", "no room for 7 hosts"},
        {"--gpus-per-host 0 -- true", "--gpus-per-host: not a number 1..16"},
        {"--devices a100 -- true", "--devices: not model:memory"},
        {"--host-devices 2=t4:4G -- true", "--host-devices: host 2 of 2 hosts"},
        {"--grace -1 -- true", "--grace: not seconds 0..60"},
        {"--shell 2", "--shell: host 2 of 2 hosts"},
        {"--hosts", "--hosts needs a value"},
        {"--frobnicate -- true", "unknown argument '--frobnicate'"},
        {"", "no command"},
        {"cut --run esh-1", "cut: --host I is required"},
        {"cut --run nope --host 0", "--run: not a run ID"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        assert_int_equal(simhosts("", bad[i].args, &out), 2);
        want(out, bad[i].msg);
        assert_int_equal(count(out, "\n"), 1); /* one line */
        free(out);
    }
}

static void test_not_root(void **state)
{
    (void)state;
    char *out;
    /* an ordinary user: no capabilities at all */
    assert_int_equal(simhosts("setpriv --reuid=65534 --regid=65534 --clear-groups", "-- true", &out), 2);
    want(out, "missing capabilities: CAP_SYS_ADMIN CAP_NET_ADMIN");
    free(out);
    /* root without CAP_NET_ADMIN: only that one is named */
    assert_int_equal(simhosts("setpriv --bounding-set=-net_admin", "-- true", &out), 2);
    want(out, "missing capabilities: CAP_NET_ADMIN");
    want_not(out, "CAP_SYS_ADMIN");
    free(out);
    /* the same as root passes the check (and runs) */
    assert_int_equal(simhosts("", "--hosts 1 -- true", &out), 0);
    free(out);
}

/* ---- hosts and their network ------------------------------------------------ */

static void test_two_hosts_env(void **state)
{
    (void)state;
    char *out;
    assert_int_equal(run_case("env", &out), 0);
    want(out, "rc=0");
    const char *runid = strstr(out, "name esh-");
    assert_non_null(runid);
    int pid = atoi(runid + strlen("name esh-"));
    char line[512];
    for (int i = 0; i < 2; i++) {
        snprintf(line, sizeof line,
                 "host %d of 2 addr 10.213.0.%d if esh%dh%d addrs 10.213.0.1,10.213.0.2 "
                 "name esh-%d-h%d ip 10.213.0.%d/24 tmpdir /tmp shm /simcuda-esh-%d-h%d devices ",
                 i, i + 1, pid, i, pid, i, i + 1, pid, i);
        want(out, line);
    }
    free(out);
}

static void test_tcp_two_hosts(void **state)
{
    (void)state;
    char *out;
    assert_int_equal(run_case("mesh 2", &out), 0);
    want(out, "0->1 10.213.0.2: pong from 1");
    want(out, "1->0 10.213.0.1: pong from 0");
    /* nobody answers at an address no host has */
    want(out, "0->none 10.213.0.3: rc=124 ''");
    assert_int_equal(count(out, "pong from"), 2);
    want(out, "rc=0");
    free(out);
}

static void test_three_hosts_bridge(void **state)
{
    (void)state;
    char *out;
    assert_int_equal(run_case("mesh 3 --subnet 10.213.7.0/28", &out), 0);
    char line[128];
    for (int i = 0; i < 3; i++)
        for (int j = 0; j < 3; j++) {
            if (i == j)
                continue;
            snprintf(line, sizeof line, "%d->%d 10.213.7.%d: pong from %d", i, j, j + 1, j);
            want(out, line);
        }
    assert_int_equal(count(out, "pong from"), 6);
    want(out, "2->none 10.213.7.4: rc=124 ''");
    free(out);
}

/* ---- isolation ---------------------------------------------------------------- */

static void test_isolation(void **state)
{
    (void)state;
    char *out;
    assert_int_equal(run_case("isolation", &out), 0);
    /* host 1 sees its own (the checks can see) */
    want(out, "host 1: own shm file seen");
    want(out, "host 1: own tmp file seen");
    want(out, "host 1: own socket '/tmp/simhosts-sock' connects");
    want(out, "host 1: own socket 'simhosts-abstract' connects");
    /* host 0 and the machine see none of it */
    want(out, "host 0: no shm file of host 1");
    want(out, "host 0: no tmp file of host 1");
    want(out, "host 0: cannot reach host 1 socket '/tmp/simhosts-sock'");
    want(out, "host 0: cannot reach host 1 socket 'simhosts-abstract'");
    want(out, "machine: no shm file of host 1");
    want(out, "machine: no tmp file of host 1");
    want(out, "machine: cannot reach host 1 abstract socket");
    want_not(out, "SEES");
    want_not(out, "CONNECTS");
    /* host 0 has loopback and its own interface, nothing of the machine */
    const char *l = strstr(out, "host 0: links ");
    assert_non_null(l);
    int pid = 0;
    assert_int_equal(sscanf(l, "host 0: links esh%dh0 lo \n", &pid), 1);
    char line[128];
    snprintf(line, sizeof line, "host 0: links esh%dh0 lo \n", pid);
    want(out, line);
    want(out, "rc=0");
    free(out);
}

static void test_simcuda_isolation(void **state)
{
    (void)state;
    char *out;
    es_need_built("bin/es-devices");
    es_need_built("sim/simcuda-gpu");
    assert_int_equal(run_case("cuda", &out), 0);
    /* host 1: two T4s, held by a client: its two device servers */
    want(out, "host 1: client holds 2 GPUs");
    want(out, "host 1: own device servers: 2");
    /* host 0: its own single A100, no server of host 1, its own table only */
    want(out, "host 0: es-devices sees 1 devices");
    want(out, "host 0: device 0 NVIDIA A100-SXM4-40GB");
    want_not(out, "host 0: device 1");
    want(out, "host 0: device servers visible: 0");
    const char *s0 = strstr(out, "host 0: shm ");
    const char *s1 = strstr(out, "host 1: shm ");
    assert_non_null(s0);
    assert_non_null(s1);
    int p0 = 0, p1 = 0;
    assert_int_equal(sscanf(s0, "host 0: shm simcuda-esh-%d-h0 \n", &p0), 1);
    assert_int_equal(sscanf(s1, "host 1: shm simcuda-esh-%d-h1 \n", &p1), 1);
    assert_int_equal(p0, p1);
    char line[128];
    snprintf(line, sizeof line, "host 0: shm simcuda-esh-%d-h0 \n", p0);
    want(out, line); /* nothing else in host 0's /dev/shm */
    want(out, "rc=0");
    free(out);
}

/* ---- cut and mend --------------------------------------------------------------- */

static void test_cut(void **state)
{
    (void)state;
    char *out;
    assert_int_equal(run_case("cut", &out), 0);
    want(out, "before: pong from 1");
    want(out, "cut: rc=0");
    want(out, "after cut: rc=124 ''"); /* silence, as a cut cable */
    want(out, "outside mend: rc=0");
    want(out, "after mend: pong from 1");
    want(out, "no host 7 (0..1)");
    want(out, "cut of no host: rc=1");
    want(out, "rc=0");
    free(out);
}

/* ---- nothing left ------------------------------------------------------------------ */

static void test_cleanup(void **state)
{
    (void)state;
    char *out;
    assert_int_equal(run_case("cleanup", &out), 0);
    want(out, "ran 0");
    want(out, "ran 1");
    want(out, "normal: rc=0");
    want(out, "failed: rc=3"); /* host 1's status */
    /* while they run, the check sees the commands of both hosts */
    want(out, "TERM: running sleeps=2");
    want(out, "TERM: rc=143");
    want(out, "simhosts: interrupted (SIGTERM): removing the hosts");
    want(out, "KILL: running sleeps=2");
    want(out, "KILL: rc=137");
    /* the killed run leaves its state directory only, which --cleanup-stale
     * removes */
    assert_int_equal(count(out, "leftover: "), 1);
    want(out, "leftover: state ");
    want(out, "simhosts: removed stale run esh-");
    want(out, "cleanup done");
    free(out);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_usage),
        cmocka_unit_test(test_not_root),
        cmocka_unit_test_setup_teardown(test_two_hosts_env, setup_scratch, teardown_scratch),
        cmocka_unit_test_setup_teardown(test_tcp_two_hosts, setup_scratch, teardown_scratch),
        cmocka_unit_test_setup_teardown(test_three_hosts_bridge, setup_scratch, teardown_scratch),
        cmocka_unit_test_setup_teardown(test_isolation, setup_scratch, teardown_scratch),
        cmocka_unit_test_setup_teardown(test_simcuda_isolation, setup_scratch, teardown_scratch),
        cmocka_unit_test_setup_teardown(test_cut, setup_scratch, teardown_scratch),
        cmocka_unit_test_setup_teardown(test_cleanup, setup_scratch, teardown_scratch),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
