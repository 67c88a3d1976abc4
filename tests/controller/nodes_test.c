/* A job across hosts (`easyscale-ctl run --nnodes`): the daemon's table of
 * nodes (controller/nodes.c) as a unit, and whole processes: two runs of
 * easyscale-ctl on this host as node 0 and node 1 of one job, joined over
 * TCP on loopback with the job's token, their ESTs stand-ins
 * (tests/controller/fake_est: they register over the unix socket on node 0
 * and over TCP with the token on node 1, and end when the test says so).
 *
 *  - the node table: reports parsed strictly, a silent node and one that
 *    never joined fail the job (and only those), the answers;
 *  - usage: the options of a job across hosts, the token's file;
 *  - every EST's variables (global RANK, WORLD_SIZE, LOCAL_*, GROUP_*,
 *    MASTER_ADDR, MASTER_PORT = --master's port + 1, the control target),
 *    output prefixed [HOST:RANK]; status (text and JSON) shows both hosts
 *    and all four ESTs; both runs exit 0;
 *  - an EST failing on node 1 fails the job on node 0 (named: host, node,
 *    EST), both exit 1; node 1 gone (killed) fails node 0, node 0 gone
 *    fails node 1, each naming it; a wrong token never joins;
 *  - the node table keeps a failure across a daemon's restart (the job
 *    file's record restored: answered at once);
 *  - moves: to another host refused ("ESTs stay on their host", both
 *    ways), so are scale, swap-out and time-slicing, and preempting a
 *    node's last GPU; node 1's GPUs (1:0, 1:1) reach the daemon through its
 *    reports (a bad NODE:ORDINAL refused as bad, an unknown one as not
 *    there); each host's ESTs, its leader too, are placed by preempt and
 *    grant and migrated inside their host; the daemon killed mid-run
 *    re-learns both hosts, and still moves node 1's EST (its GPUs kept in
 *    the job file).
 * The simulated hosts' whole jobs (the trainer) are tests/controller/
 * hosts_test.c's. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "controller/ctl.h"
#include "tests/controller/bgjob.h"
#include "tests/harness.h"

#define T_CMD 30
#define T_JOB 120

static char g_tmp[256], g_tok[300], g_token[80];
/* the stand-in ESTs speak no NCCL: nothing to set (one test sets
 * EASYSCALE_XHOST for run, which the job file then says) */
static char *g_env[2] = { NULL, NULL };

/* ---- the node table (nodes.c) ------------------------------------------------------------- */

static void test_table_reports(void **state)
{
    (void)state;
    es_ctl_nodes_t t;
    char err[256], ans[600];
    es_ctl_nodes_init(&t, 2, 4, 3000, 60000, 1000);
    assert_int_equal(es_ctl_nodes_of_rank(&t, 3), 0);
    assert_int_equal(es_ctl_nodes_of_rank(&t, 4), 1);
    static const char *const bad[] = { "", "running", "running h0", "walking h0 a100:1",
                                       "running h0 a100:1 why", "failed h0 a100:1",
                                       "running  h0 a100:1", "running h0 a100:1 ",
                                       "done h\x01 a100:1" };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        assert_int_equal(es_ctl_nodes_report(&t, 0, bad[i], 1100, err, sizeof(err)), -EINVAL);
    assert_int_equal(es_ctl_nodes_report(&t, 2, "running h2 -", 1100, err, sizeof(err)), -EINVAL);
    assert_non_null(strstr(err, "no node 2"));
    assert_int_equal(es_ctl_nodes_report(&t, 0, "running h0 a100:8192", 1100, err, sizeof(err)), 0);
    assert_int_equal(es_ctl_nodes_answer(&t, 1100, ans, sizeof(ans)), 0);
    assert_string_equal(ans, "running 0/2");
    /* another live host claiming node 0 */
    assert_int_equal(es_ctl_nodes_report(&t, 0, "running h9 -", 1200, err, sizeof(err)), -EEXIST);
    assert_non_null(strstr(err, "host h9 says it is node 0"));
    assert_int_equal(es_ctl_nodes_report(&t, 1, "done h1 a100:8192,a100:8192", 1300, err,
                                         sizeof(err)), 0);
    assert_int_equal(es_ctl_nodes_answer(&t, 1300, ans, sizeof(ans)), 0);
    assert_string_equal(ans, "running 1/2");
    assert_int_equal(es_ctl_nodes_report(&t, 0, "done h0 a100:8192", 1400, err, sizeof(err)), 0);
    assert_int_equal(es_ctl_nodes_answer(&t, 1400, ans, sizeof(ans)), 0);
    assert_string_equal(ans, "done 2/2");
    /* done nodes go silent: nothing fails */
    assert_int_equal(es_ctl_nodes_tick(&t, 100000), 0);
    assert_false(t.failed);
}

/* A report's GPU description (a node's reports take turns through its
 * GPUs): kept in the node's entry for the daemon; bad ones refused. */
static void test_table_gpu_words(void **state)
{
    (void)state;
    es_ctl_nodes_t t;
    char err[256];
    es_ctl_nodes_init(&t, 2, 2, 3000, 60000, 0);
    const char *u = "GPU-0a1b2c3d-0000-4000-8000-00000000000a";
    char ok[300];
    snprintf(ok, sizeof(ok), "running h1 a100:2048 gpu=1/2,1,2048,a100,0,%s", u);
    assert_int_equal(es_ctl_nodes_report(&t, 1, ok, 10, err, sizeof(err)), 0);
    const es_ctl_node_t *d = &t.node[1];
    assert_true(d->gpu_new);
    assert_int_equal(d->gpu_index, 1);
    assert_int_equal(d->gpu_count, 2);
    assert_int_equal(d->gpu_injob, 0);
    assert_int_equal(d->gpu.ordinal, 1);
    assert_int_equal(d->gpu.mem, 2048ull << 20);
    assert_string_equal(d->gpu.model, "a100");
    assert_string_equal(d->gpu.uuid, u);
    assert_string_equal(d->reason, "");
    snprintf(ok, sizeof(ok), "done h1 - gpu=0/1,3,80,-,1,%s", u);
    assert_int_equal(es_ctl_nodes_report(&t, 1, ok, 20, err, sizeof(err)), 0);
    assert_string_equal(d->gpu.model, "");
    assert_int_equal(d->gpu_injob, 1);
    static const char *const bad[] = { /* %s: a good UUID's hex after "GPU-" */
        "gpu=2/2,1,2048,a100,1,GPU-%s", "gpu=0/0,1,2048,a100,1,GPU-%s",
        "gpu=0/1,-1,2048,a100,1,GPU-%s", "gpu=0/1,1,0,a100,1,GPU-%s",
        "gpu=0/1,1,2048,a100,2,GPU-%s", "gpu=0/1,1,2048,a100,1,NV-%s",
        "gpu=0/1,1,2048,a100,1",        "gpu=0/1,1,2048,a100,1,GPU-%s,",
        "gpu=0/1,1,2048,a100,1,GPU-",   "gpu=0/1,1,2048,a100,1,GPU-%s/x",
        "gpu=",                         "gpu=0/1,1,2048,a100,1,GPU-%s why",
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        char line[300], w[200];
        snprintf(w, sizeof(w), bad[i], u + 4);
        snprintf(line, sizeof(line), "running h1 - %s", w);
        assert_int_equal(es_ctl_nodes_report(&t, 1, line, 30, err, sizeof(err)), -EINVAL);
        assert_non_null(strstr(err, "gpu=I/N,ORDINAL,MIB,MODEL,INJOB,UUID"));
    }
    assert_int_equal(t.node[1].last_ms, 20); /* a refused report changes nothing */
}

static void test_table_failures(void **state)
{
    (void)state;
    es_ctl_nodes_t t;
    char err[256], ans[600];
    /* a node's own failure, with its reason */
    es_ctl_nodes_init(&t, 3, 1, 3000, 60000, 0);
    assert_int_equal(es_ctl_nodes_report(&t, 2, "failed h2 - EST 2 (pid 7) exited with status 3",
                                         10, err, sizeof(err)), 0);
    assert_int_equal(es_ctl_nodes_answer(&t, 10, ans, sizeof(ans)), 1);
    assert_string_equal(ans, "failed 1/3 host h2 (node 2): EST 2 (pid 7) exited with status 3");
    /* a silent running node, only after the timeout */
    es_ctl_nodes_init(&t, 2, 1, 3000, 60000, 0);
    assert_int_equal(es_ctl_nodes_report(&t, 0, "running h0 -", 100, err, sizeof(err)), 0);
    assert_int_equal(es_ctl_nodes_report(&t, 1, "running h1 -", 100, err, sizeof(err)), 0);
    assert_int_equal(es_ctl_nodes_report(&t, 0, "running h0 -", 3000, err, sizeof(err)), 0);
    assert_int_equal(es_ctl_nodes_tick(&t, 3100), 0);
    assert_int_equal(es_ctl_nodes_tick(&t, 3101), 1);
    assert_non_null(strstr(t.reason, "host h1 (node 1): gone: no word from it in 3.0 s"));
    assert_int_equal(es_ctl_nodes_tick(&t, 9000), 0); /* once */
    assert_int_equal(es_ctl_nodes_answer(&t, 3200, ans, sizeof(ans)), 1);
    assert_non_null(strstr(ans, "failed 1/2 "));
    /* a failure a daemon before this one kept (the job file): answered at
     * once, and the node it failed for counts as ended (it will not report) */
    es_ctl_nodes_init(&t, 2, 1, 3000, 60000, 0);
    es_ctl_nodes_restore_failed(&t, 1, "host h1 (node 1): EST 1 (pid 7) exited with status 3");
    assert_int_equal(es_ctl_nodes_report(&t, 0, "running h0 -", 100, err, sizeof(err)), 0);
    assert_int_equal(es_ctl_nodes_answer(&t, 100, ans, sizeof(ans)), 1);
    assert_string_equal(ans, "failed 1/2 host h1 (node 1): EST 1 (pid 7) exited with status 3");
    es_ctl_nodes_init(&t, 2, 1, 3000, 60000, 0);
    es_ctl_nodes_restore_failed(&t, 1, ""); /* none kept: nothing */
    assert_false(t.failed);
    /* a node never heard, after the join timeout only */
    es_ctl_nodes_init(&t, 2, 1, 3000, 5000, 0);
    assert_int_equal(es_ctl_nodes_report(&t, 0, "running h0 -", 4000, err, sizeof(err)), 0);
    assert_int_equal(es_ctl_nodes_tick(&t, 5000), 0);
    assert_int_equal(es_ctl_nodes_tick(&t, 5001), 1);
    assert_non_null(strstr(t.reason, "(node 1): never joined: no word from it in 5.0 s"));
}

/* ---- whole processes ---------------------------------------------------------------------- */

static const char *ctl_bin(void)
{
    static char p[4096];
    snprintf(p, sizeof(p), "%s", es_build_path("bin/easyscale-ctl"));
    return p;
}

/* A port p of loopback with p + 1 free too (the application's). */
static int free_ports(void)
{
    for (int tries = 0; tries < 50; tries++) {
        int fd = socket(AF_INET, SOCK_STREAM, 0), fd2 = socket(AF_INET, SOCK_STREAM, 0);
        struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
        socklen_t l = sizeof(a);
        int p = -1;
        if (bind(fd, (struct sockaddr *)&a, sizeof(a)) == 0 &&
            getsockname(fd, (struct sockaddr *)&a, &l) == 0 && ntohs(a.sin_port) < 65534) {
            p = ntohs(a.sin_port);
            a.sin_port = htons((uint16_t)(p + 1));
            if (bind(fd2, (struct sockaddr *)&a, sizeof(a)) < 0)
                p = -1;
        }
        close(fd);
        close(fd2);
        if (p > 0)
            return p;
    }
    fail_msg("no two free ports on loopback");
    return -1;
}

/* One node of a two-node job of fake ESTs (2 per node): argv into a,
 * strings into s. extra: more options of run (NULL-terminated). */
typedef struct node_args {
    char *argv[48];
    char master[64], sock[400], until[300], fake[4096], fail[16];
} node_args_t;

static void node_argv(node_args_t *n, int node, int port, const char *until, int fail_rank,
                      const char *const *extra)
{
    int k = 0;
    memset(n, 0, sizeof(*n));
    snprintf(n->master, sizeof(n->master), "127.0.0.1:%d", port);
    snprintf(n->sock, sizeof(n->sock), "%s/job.sock", g_tmp);
    snprintf(n->until, sizeof(n->until), "%s", until);
    snprintf(n->fake, sizeof(n->fake), "%s", es_build_path("tests/controller/fake_est"));
    snprintf(n->fail, sizeof(n->fail), "%d", fail_rank < 0 ? 9999 : fail_rank); /* none */
    n->argv[k++] = (char *)ctl_bin();
    n->argv[k++] = "run";
    n->argv[k++] = "--nnodes";
    n->argv[k++] = "2";
    n->argv[k++] = "--node-rank";
    n->argv[k++] = node ? "1" : "0";
    n->argv[k++] = "--master";
    n->argv[k++] = n->master;
    n->argv[k++] = "--token-file";
    n->argv[k++] = g_tok;
    n->argv[k++] = "--ests-per-node";
    n->argv[k++] = "2";
    n->argv[k++] = "--shim";
    n->argv[k++] = "none";
    n->argv[k++] = "--progress";
    n->argv[k++] = "off";
    if (node == 0) {
        n->argv[k++] = "--socket";
        n->argv[k++] = n->sock;
    }
    for (int i = 0; extra && extra[i]; i++)
        n->argv[k++] = (char *)extra[i];
    n->argv[k++] = "--";
    n->argv[k++] = "sh";
    n->argv[k++] = "-c";
    n->argv[k++] = "echo \"env rank=$RANK world=$WORLD_SIZE local=$LOCAL_RANK/$LOCAL_WORLD_SIZE "
                   "group=$GROUP_RANK/$GROUP_WORLD_SIZE master=$MASTER_ADDR:$MASTER_PORT "
                   "ctl=$EASYSCALE_CONTROL token=${EASYSCALE_TOKEN:+set}\"; exec \"$0\" --hb-ms 200 "
                   "--run-ms 600000 --until \"$1\" --fail-rank \"$2\"";
    n->argv[k++] = n->fake;
    n->argv[k++] = n->until;
    n->argv[k++] = n->fail;
    n->argv[k] = NULL;
}

/* Both nodes started (node 1 first: it waits for node 0's daemon). */
static void start_two(bg_t *b0, bg_t *b1, node_args_t *n0, node_args_t *n1, const char *until,
                      int fail_rank, const char *const *extra0, const char *const *extra1)
{
    int port = free_ports();
    node_argv(n0, 0, port, until, fail_rank, extra0);
    node_argv(n1, 1, port, until, fail_rank, extra1);
    bg_start(b1, g_env, n1->argv);
    bg_start(b0, g_env, n0->argv);
}

/* easyscale-ctl ARGS against node 0's daemon over TCP (the token set). */
static int ctl_tcpv(es_proc_result_t *r, const node_args_t *n0, const char *verb, va_list ap)
{
    char *argv[32], target[96], tokenv[120];
    char *env[] = { tokenv, NULL };
    int k = 0;
    snprintf(target, sizeof(target), "tcp:%s", n0->master);
    snprintf(tokenv, sizeof(tokenv), "EASYSCALE_TOKEN=%s", g_token);
    argv[k++] = (char *)ctl_bin();
    argv[k++] = (char *)verb;
    for (char *a; k < 28 && (a = va_arg(ap, char *)) != NULL;)
        argv[k++] = a;
    argv[k++] = "--socket";
    argv[k++] = target;
    argv[k] = NULL;
    memset(r, 0, sizeof(*r));
    assert_int_equal(es_run(argv, env, T_CMD, r), 0);
    return r->status;
}

/* easyscale-ctl VERB ARGS... (NULL-terminated) against node 0's daemon:
 * its exit status, its output in *r. */
static int ctl_tcp(es_proc_result_t *r, const node_args_t *n0, const char *verb, ...)
{
    va_list ap;
    va_start(ap, verb);
    int st = ctl_tcpv(r, n0, verb, ap);
    va_end(ap);
    return st;
}

/* The same, which must exit rc and (want not NULL) say want. */
static void expect_ctl(const node_args_t *n0, int rc, const char *want, const char *verb, ...)
{
    es_proc_result_t r;
    va_list ap;
    va_start(ap, verb);
    int st = ctl_tcpv(&r, n0, verb, ap);
    va_end(ap);
    if (st != rc || (want && !strstr(r.out ? r.out : "", want)))
        fail_msg("easyscale-ctl %s: exit %d, wanted %d%s%s%s:\n%s", verb, st, rc,
                 want ? " and \"" : "", want ? want : "", want ? "\"" : "", r.out);
    es_proc_result_free(&r);
}

/* Waits until status --json says every EST registered and both nodes
 * reported; returns the JSON (free). Fails when a node's run ended. */
static char *wait_all_registered(const node_args_t *n0, bg_t *b0, bg_t *b1)
{
    for (int i = 0; i < T_JOB * 5; i++) {
        es_proc_result_t r;
        if (bg_ended(b0) || bg_ended(b1)) {
            char *o0 = bg_output(b0), *o1 = bg_output(b1);
            fail_msg("a node's run ended (%d, %d) before every EST registered:\n%s\n---\n%s",
                     b0->status, b1->status, o0, o1);
        }
        if (ctl_tcp(&r, n0, "status", "--json", NULL) == 0 && r.out &&
            strstr(r.out, "\"registered\":4,") && !strstr(r.out, "\"state\":\"unknown\""))
            return r.out;
        es_proc_result_free(&r);
        msleep(200);
    }
    fail_msg("the ESTs of both nodes did not register");
    return NULL;
}

static void make_until(const char *until)
{
    int fd = open(until, O_WRONLY | O_CREAT, 0600);
    assert_true(fd >= 0);
    close(fd);
}

static void test_usage(void **state)
{
    (void)state;
    char bad_tok[300];
    snprintf(bad_tok, sizeof(bad_tok), "%s/open-token", g_tmp);
    FILE *f = fopen(bad_tok, "w");
    assert_non_null(f);
    fprintf(f, "%s\n", g_token);
    fclose(f);
    chmod(bad_tok, 0644);
    const char *T = g_tok;
    struct {
        const char *args[16];
        const char *want;
    } cases[] = {
        { { "--nnodes", "2", "--master", "127.0.0.1:2000", "--ests-per-node", "1" },
          "needs --node-rank, --master and --ests-per-node" },
        { { "--nnodes", "2", "--node-rank", "2", "--master", "127.0.0.1:2000", "--ests-per-node",
            "1" }, "--node-rank must be below --nnodes" },
        { { "--nnodes", "65", "--node-rank", "0" }, "bad --nnodes" },
        { { "--nnodes", "2", "--node-rank", "0", "--master", "127.0.0.1", "--ests-per-node", "1",
            "--token-file", T }, "bad --master" },
        { { "--nnodes", "2", "--node-rank", "0", "--master", "h:65535", "--ests-per-node", "1",
            "--token-file", T }, "bad --master" },
        { { "--nnodes", "2", "--node-rank", "0", "--master", "h:2000", "--ests-per-node", "1",
            "--token-file", bad_tok }, "can be read by others (mode 0644)" },
        { { "--nnodes", "2", "--node-rank", "0", "--master", "h:2000", "--ests-per-node", "1" },
          "needs its token in --token-file or EASYSCALE_TOKEN" },
        { { "--nnodes", "2", "--node-rank", "0", "--master", "h:2000", "--ests-per-node", "1",
            "--token-file", T, "--tcp", "127.0.0.1:0" }, "listens on --master" },
        { { "--nnodes", "2", "--node-rank", "0", "--master", "h:2000", "--ests-per-node", "2",
            "--token-file", T, "--ests", "3" }, "--ests is not --nnodes x --ests-per-node" },
        { { "--node-rank", "1", "--ests", "1" }, "are for a job across hosts" },
    };
    for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
        char *argv[32];
        char *env[] = { "EASYSCALE_TOKEN=", NULL };
        int k = 0;
        argv[k++] = (char *)ctl_bin();
        argv[k++] = "run";
        for (int i = 0; cases[c].args[i]; i++)
            argv[k++] = (char *)cases[c].args[i];
        argv[k++] = "--";
        argv[k++] = "true";
        argv[k] = NULL;
        es_proc_result_t r;
        assert_int_equal(es_run(argv, env, T_CMD, &r), 0);
        if (r.status != 2 || !strstr(r.out, cases[c].want))
            fail_msg("case %zu: status %d, wanted 2 and \"%s\" in:\n%s", c, r.status,
                     cases[c].want, r.out);
        es_proc_result_free(&r);
    }
}

/* Waits until node 0's daemon knows node 1's two GPUs (its reports
 * describe one at a time). */
static void wait_node1_gpus(const node_args_t *n0)
{
    for (int i = 0; i < T_JOB * 5; i++) {
        es_proc_result_t r;
        ctl_tcp(&r, n0, "status", "--json", NULL);
        int k = r.out ? es_count(r.out, "\"node\":1,\"uuid\"") : 0;
        es_proc_result_free(&r);
        if (k == 2)
            return;
        msleep(200);
    }
    fail_msg("node 1's GPUs never reached the daemon");
}

static void test_two_nodes(void **state)
{
    (void)state;
    bg_t b0, b1;
    node_args_t n0, n1;
    char until[300], until1[300], host[64], want[700];
    snprintf(until, sizeof(until), "%s/until-two", g_tmp);
    snprintf(until1, sizeof(until1), "%s/until-two-1", g_tmp);
    int port = free_ports();
    node_argv(&n0, 0, port, until, -1, NULL);
    node_argv(&n1, 1, port, until1, -1, NULL); /* node 1's ESTs end later */
    bg_start(&b1, g_env, n1.argv);
    bg_start(&b0, g_env, n0.argv);
    char *js = wait_all_registered(&n0, &b0, &b1);
    assert_non_null(strstr(js, "\"nodes\":[{\"node\":0,"));
    assert_non_null(strstr(js, "{\"node\":1,"));
    assert_non_null(strstr(js, "\"ranks\":[2,3],\"state\":\"running\""));
    assert_non_null(strstr(js, "\"failed\":null"));
    assert_non_null(strstr(js, "{\"rank\":3,"));
    free(js);
    /* node 1's GPUs, as its reports describe them: EST 3 on its GPU 1 */
    wait_node1_gpus(&n0);
    es_proc_result_t r;
    assert_int_equal(ctl_tcp(&r, &n0, "status", "--json", NULL), 0);
    assert_non_null(strstr(strstr(r.out, "{\"rank\":3,"), "\"gpu\":\"1:1\""));
    es_proc_result_free(&r);
    assert_int_equal(ctl_tcp(&r, &n0, "status", NULL), 0);
    assert_non_null(strstr(r.out, "hosts: 2 nodes of 2 ESTs"));
    assert_non_null(strstr(r.out, "node 1: host "));
    assert_non_null(strstr(r.out, "ranks 2-3"));
    es_proc_result_free(&r);
    /* node 0's ESTs end first: its run (and the daemon) stay for node 1's */
    make_until(until);
    int done0 = 0;
    for (int i = 0; i < T_JOB * 5 && !done0; i++) {
        assert_int_equal(ctl_tcp(&r, &n0, "status", "--json", NULL), 0);
        done0 = strstr(r.out, "{\"node\":0,") &&
                strstr(strstr(r.out, "{\"node\":0,"), "\"state\":\"done\"") != NULL;
        es_proc_result_free(&r);
        msleep(100);
    }
    assert_true(done0);
    msleep(3000); /* beyond run's 2 s for what ESTs leave behind */
    assert_false(bg_ended(&b0));
    make_until(until1);
    assert_int_equal(bg_wait(&b1, T_JOB), 0);
    assert_int_equal(bg_wait(&b0, T_JOB), 0);
    char *o0 = bg_output(&b0), *o1 = bg_output(&b1);
    gethostname(host, sizeof(host));
    int mp = atoi(strrchr(n0.master, ':') + 1) + 1;
    for (int rank = 0; rank < 4; rank++) {
        const char *o = rank < 2 ? o0 : o1;
        if (rank < 2)
            snprintf(want, sizeof(want), "[%s:%d] env rank=%d world=4 local=%d/2 group=0/2 "
                     "master=127.0.0.1:%d ctl=%s token=\n", host, rank, rank, rank, mp, n0.sock);
        else
            snprintf(want, sizeof(want), "[%s:%d] env rank=%d world=4 local=%d/2 group=1/2 "
                     "master=127.0.0.1:%d ctl=tcp:%s token=set\n", host, rank, rank, rank - 2,
                     mp, n0.master);
        if (!strstr(o, want))
            fail_msg("no \"%s\" in:\n%s", want, o);
    }
    assert_non_null(strstr(o0, "the 2 ESTs of this host (node 0 of 2, 4 ESTs in all) exited "
                               "with status 0"));
    assert_non_null(strstr(o1, "(node 1 of 2, 4 ESTs in all) exited with status 0"));
    free(o0);
    free(o1);
}

static void test_failure_on_node1(void **state)
{
    (void)state;
    bg_t b0, b1;
    node_args_t n0, n1;
    char until[300];
    snprintf(until, sizeof(until), "%s/until-fail", g_tmp);
    start_two(&b0, &b1, &n0, &n1, until, 3, NULL, NULL);
    free(wait_all_registered(&n0, &b0, &b1));
    make_until(until); /* rank 3 exits 3, the others 0 (if not stopped first) */
    assert_int_equal(bg_wait(&b1, T_JOB), 1);
    assert_int_equal(bg_wait(&b0, T_JOB), 1);
    char *o0 = bg_output(&b0), *o1 = bg_output(&b1);
    assert_non_null(strstr(o1, "the job failed after"));
    assert_non_null(strstr(o1, ": EST 3 (pid "));
    assert_non_null(strstr(o1, ") exited with status 3"));
    assert_non_null(strstr(o0, "the job failed after"));
    if (!strstr(o0, "(node 1): EST 3 (pid "))
        fail_msg("node 0 did not name node 1's EST 3:\n%s", o0);
    free(o0);
    free(o1);
}

static void test_node_gone(void **state)
{
    (void)state;
    static const char *const hb[] = { "--heartbeat-timeout", "3", NULL };
    char until[300];
    snprintf(until, sizeof(until), "%s/until-gone", g_tmp);
    for (int gone = 1; gone >= 0; gone--) {
        bg_t b0, b1;
        node_args_t n0, n1;
        start_two(&b0, &b1, &n0, &n1, until, -1, hb, hb);
        free(wait_all_registered(&n0, &b0, &b1));
        bg_t *dead = gone ? &b1 : &b0, *alive = gone ? &b0 : &b1;
        kill(-dead->pid, SIGKILL); /* the node's run, its daemon and ESTs: a host gone */
        assert_int_equal(bg_wait(dead, T_CMD), 128 + SIGKILL);
        assert_int_equal(bg_wait(alive, T_JOB), 1);
        char *o = bg_output(alive);
        if (gone)
            assert_non_null(strstr(o, "(node 1): gone: no word from it in "));
        else
            assert_non_null(strstr(o, "no answer from the job's controller at tcp:127.0.0.1:"));
        assert_non_null(strstr(o, "the job failed after"));
        free(o);
    }
}

static void test_wrong_token(void **state)
{
    (void)state;
    static const char *const join[] = { "--join-timeout", "3", NULL };
    static const char *const hb[] = { "--heartbeat-timeout", "3", NULL };
    char other[300], until[300];
    snprintf(other, sizeof(other), "%s/other-token", g_tmp);
    snprintf(until, sizeof(until), "%s/until-token", g_tmp);
    FILE *f = fopen(other, "w");
    assert_non_null(f);
    fprintf(f, "another-token-of-another-job\n");
    fclose(f);
    chmod(other, 0600);
    bg_t b0, b1;
    node_args_t n0, n1;
    int port = free_ports();
    node_argv(&n0, 0, port, until, -1, join);
    node_argv(&n1, 1, port, until, -1, hb);
    for (int i = 0; n1.argv[i]; i++) /* node 1 holds another job's token */
        if (n1.argv[i] == g_tok)
            n1.argv[i] = other;
    bg_start(&b1, g_env, n1.argv);
    bg_start(&b0, g_env, n0.argv);
    assert_int_equal(bg_wait(&b0, T_JOB), 1);
    assert_int_equal(bg_wait(&b1, T_JOB), 1);
    char *o0 = bg_output(&b0), *o1 = bg_output(&b1);
    assert_non_null(strstr(o0, "(node 1): never joined: no word from it in 3.0 s"));
    assert_non_null(strstr(o0, "bad token"));
    assert_non_null(strstr(o1, "no answer from the job's controller"));
    free(o0);
    free(o1);
    make_until(until);
}

static void test_moves_and_restart(void **state)
{
    (void)state;
    bg_t b0, b1;
    node_args_t n0, n1;
    char until[300];
    es_proc_result_t r;
    snprintf(until, sizeof(until), "%s/until-moves", g_tmp);
    start_two(&b0, &b1, &n0, &n1, until, -1, NULL, NULL);
    free(wait_all_registered(&n0, &b0, &b1));
    assert_int_equal(ctl_tcp(&r, &n0, "migrate", "3", "--gpu", "0", NULL), 1);
    assert_non_null(strstr(r.out, "ESTs stay on their host: EST 3 runs on node 1"));
    assert_non_null(strstr(r.out, "nothing moved"));
    es_proc_result_free(&r);
    /* parked and time-sliced ESTs are refused */
    expect_ctl(&n0, 1, "swap-out: not in a job across 2 hosts", "swap-out", "1", NULL);
    expect_ctl(&n0, 1, "timeslice: not in a job across 2 hosts", "timeslice", "0", NULL);
    /* node 0, EST 0 (its leader) on GPU 0, EST 1 on GPU 1: GPU 0 taken
     * (EST 0 moves), given back (EST 1 moves: the highest rank of the
     * fuller GPU), then EST 1 migrated; node 1's ESTs untouched */
    expect_ctl(&n0, 0, "(1 EST moved)", "preempt", "0", NULL);
    expect_ctl(&n0, 0, NULL, "grant", "0", NULL);
    expect_ctl(&n0, 0, NULL, "migrate", "1", "--gpu", "1", NULL);
    /* node 1's GPUs (1:0, 1:1) as its reports describe them: its ESTs move
     * inside node 1 only; scale (a set of several hosts' GPUs) is refused */
    wait_node1_gpus(&n0);
    expect_ctl(&n0, 0, "1:1 ", "status", NULL);
    assert_int_equal(ctl_tcp(&r, &n0, "migrate", "3", "--gpu", "1", NULL), 1);
    assert_non_null(strstr(r.out, "ESTs stay on their host: EST 3 runs on node 1"));
    assert_non_null(strstr(r.out, "GPU 1 is node 0's"));
    es_proc_result_free(&r);
    expect_ctl(&n0, 1, "ESTs stay on their host: EST 1 runs on node 0", "migrate", "1", "--gpu",
               "1:0", NULL);
    expect_ctl(&n0, 1, "scale: not in a job across 2 hosts", "scale", "--gpus", "0", NULL);
    /* GPU names that are not: a bad one (2), one that does not exist (1) */
    static const char *const bad[][3] = { { "1:x", "2", "bad GPU" }, { "5:0", "2", "bad GPU" },
                                          { "1:0:1", "2", "bad GPU" }, { "x:0", "2", "bad GPU" },
                                          { "1:7", "1", "no such GPU" } };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        expect_ctl(&n0, atoi(bad[i][1]), bad[i][2], "grant", bad[i][0], NULL);
    expect_ctl(&n0, 0, NULL, "migrate", "2", "--gpu", "1:1", NULL);
    expect_ctl(&n0, 0, "(2 ESTs moved)", "preempt", "1:1", NULL);
    expect_ctl(&n0, 1, "node 1's last GPU of the job", "preempt", "1:0", NULL);
    expect_ctl(&n0, 0, NULL, "grant", "1:1", NULL);
    /* the daemon killed: run restarts it, and it re-learns both hosts */
    assert_int_equal(ctl_tcp(&r, &n0, "status", "--json", NULL), 0);
    long pid = strtol(strstr(r.out, "\"daemon_pid\":") + 13, NULL, 10);
    es_proc_result_free(&r);
    assert_true(pid > 0);
    assert_int_equal(kill((pid_t)pid, SIGKILL), 0);
    char *js = NULL;
    for (int i = 0; i < T_JOB * 5; i++) {
        free(js);
        js = wait_all_registered(&n0, &b0, &b1);
        if (strtol(strstr(js, "\"daemon_pid\":") + 13, NULL, 10) != pid)
            break;
        msleep(200);
    }
    assert_true(strtol(strstr(js, "\"daemon_pid\":") + 13, NULL, 10) != pid);
    assert_non_null(strstr(js, "\"ranks\":[2,3],\"state\":\"running\""));
    free(js);
    /* the restarted daemon knows node 1's GPUs (the job file): a move there */
    expect_ctl(&n0, 0, NULL, "migrate", "3", "--gpu", "1:0", NULL);
    make_until(until);
    assert_int_equal(bg_wait(&b1, T_JOB), 0);
    assert_int_equal(bg_wait(&b0, T_JOB), 0);
    char *o0 = bg_output(&b0), *o1 = bg_output(&b1);
    assert_non_null(strstr(o0, "re-learns the job from the ESTs"));
    /* each EST's moves, as its stand-in answered them (3's migration: after
     * the restart) */
    static const int want[4][2] = { { 1, 0 }, { 1, 1 }, { 1, 1 }, { 2, 1 } };
    for (int e = 0; e < 4; e++)
        for (int k = 0; k < 2; k++) {
            char line[64];
            const char *o = e < 2 ? o0 : o1;
            snprintf(line, sizeof(line), "fake_est: rank %d: %s -> ", e, k ? "migrate" : "place");
            if (es_count(o, line) != want[e][k])
                fail_msg("EST %d: %d \"%s\" lines, wanted %d", e, es_count(o, line), line,
                         want[e][k]);
        }
    free(o0);
    free(o1);
}

/* A job whose levels between the hosts are in host memory
 * (EASYSCALE_XHOST=host): the controller's parks act inside a host, and
 * one that would cross hosts is refused: a rotation naming another host's
 * EST, a swap-in onto another host's GPU. */
static void test_parks_inside_a_host(void **state)
{
    (void)state;
    bg_t b0, b1;
    node_args_t n0, n1;
    char until[300];
    snprintf(until, sizeof(until), "%s/until-parks", g_tmp);
    g_env[0] = "EASYSCALE_XHOST=host";
    start_two(&b0, &b1, &n0, &n1, until, -1, NULL, NULL);
    g_env[0] = NULL;
    free(wait_all_registered(&n0, &b0, &b1));
    wait_node1_gpus(&n0);
    expect_ctl(&n0, 1, "ESTs stay on their host: EST 3 runs on node 1, and the rotation's GPU "
               "is node 0's", "timeslice", "0", "--ranks", "0,3", NULL);
    expect_ctl(&n0, 0, NULL, "swap-out", "1", NULL);
    expect_ctl(&n0, 1, "ESTs stay on their host: EST 1 runs on node 0", "swap-in", "1", "--gpu",
               "1:0", NULL);
    expect_ctl(&n0, 0, NULL, "swap-in", "1", "--gpu", "0", NULL);
    make_until(until);
    assert_int_equal(bg_wait(&b1, T_JOB), 0);
    assert_int_equal(bg_wait(&b0, T_JOB), 0);
    char *o0 = bg_output(&b0);
    assert_int_equal(es_count(o0, "fake_est: rank 1: swap-out -> "), 1);
    assert_int_equal(es_count(o0, "fake_est: rank 1: swap-in -> "), 1);
    free(o0);
}

static int setup(void **state)
{
    (void)state;
    snprintf(g_tmp, sizeof(g_tmp), "/tmp/es-nodes-test-XXXXXX");
    if (!mkdtemp(g_tmp))
        return -1;
    signal(SIGPIPE, SIG_IGN);
    bg_dir(g_tmp);
    snprintf(g_token, sizeof(g_token), "nodes-test-token-%d-%ld", (int)getpid(), (long)time(NULL));
    snprintf(g_tok, sizeof(g_tok), "%s/token", g_tmp);
    FILE *f = fopen(g_tok, "w");
    if (!f)
        return -1;
    fprintf(f, "%s\n", g_token);
    fclose(f);
    return chmod(g_tok, 0600);
}

static int teardown(void **state)
{
    (void)state;
    bg_kill_all();
    char cmd[400];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", g_tmp);
    return system(cmd) == 0 ? 0 : -1;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_table_reports),
        cmocka_unit_test(test_table_gpu_words),
        cmocka_unit_test(test_table_failures),
        cmocka_unit_test(test_usage),
        cmocka_unit_test(test_two_nodes),
        cmocka_unit_test(test_failure_on_node1),
        cmocka_unit_test(test_node_gone),
        cmocka_unit_test(test_wrong_token),
        cmocka_unit_test(test_moves_and_restart),
        cmocka_unit_test(test_parks_inside_a_host),
    };
    const char *f = getenv("NODES_TEST");
    if (f && *f)
        cmocka_set_test_filter(f);
    return cmocka_run_group_tests(tests, setup, teardown);
}
