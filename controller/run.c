/* easyscale-ctl run: starts a job. Probes the GPUs, plans the first
 * placement, writes the job file, starts the job's daemon (restarting it if
 * it dies), launches N EST processes with libeasyscale.so preloaded and the
 * variables a torchrun user expects, prefixes their output with their rank,
 * shows progress, replays a schedule of scale events, and exits with the
 * job's status when every EST has ended.
 *
 * The ESTs are forked first and held on a pipe until the job file names
 * their pids and the daemon listens, so no registration races the start.
 *
 * es_ctl_run_main takes its steps in order, each a short function on one
 * run_ctx_t: the options, the GPUs and the first placement, the socket,
 * the held ESTs, the job's files and the daemon, the event loop (output,
 * children, progress, schedule: run_loop_t), the report; run_teardown
 * releases whatever the steps took.
 *
 * This file holds the entry point, the steps before the ESTs (the options,
 * the GPUs and the plan, the socket) and the job's start, and the
 * teardown; the ESTs' and the daemon's processes are run_ests.c's, the
 * event loop and the report run_loop.c's, the schedule and progress
 * run_sched.c's, the output run_out.c's (run_int.h: what they share). */
#include "controller/run_int.h"
#include "controller/sched.h"

#include <errno.h>
#include <ftw.h>
#include <getopt.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>


static const char *const usage =
    "usage: easyscale-ctl run --ests N [--gpus SPEC] [--determinism d1|d2|off]\n"
    "           [--schedule FILE] [--socket PATH] [--est-memory SIZE] [--no-time-slicing]\n"
    "           [--tcp HOST:PORT] [--heartbeat-timeout S] [--move-timeout S]\n"
    "           [--hold-timeout S]\n"
    "           [--nnodes N --node-rank R --master HOST:PORT --ests-per-node K\n"
    "            [--token-file F] [--join-timeout S]]\n"
    "           [--shim PATH|none] [--progress auto|off|SECONDS] -- CMD ARGS...\n"
    "Starts a job of N ESTs: N processes of CMD with libeasyscale.so preloaded\n"
    "(--shim, default ../lib/libeasyscale.so beside this program; none: not\n"
    "preloaded) and RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR,\n"
    "MASTER_PORT (a free local port), ES_RDZV_DIR (a fresh directory),\n"
    "EASYSCALE_CONTROL (the job's socket), EASYSCALE_SLOT (the EST's GPU, by UUID),\n"
    "EASYSCALE_DETERMINISM and, in d2, EASYSCALE_CANONICAL_DEVICE (the models of the\n"
    "job's GPUs, unless set already) and EASYSCALE_D2_GEMM (int8 or fma, one value\n"
    "for the whole job: int8 unless set). Serves the job (a daemon on --socket, default\n"
    "$XDG_RUNTIME_DIR/easyscale/job-PID.sock, restarted if it dies) until every EST\n"
    "has ended. Each output line of an EST is prefixed with [RANK].\n"
    "  --gpus SPEC          the job's GPUs: all (default), ordinals, ranges, UUIDs\n"
    "  --determinism        d1 (default), d2, or off (the shim passes calls through)\n"
    "  --schedule FILE      scale events, one a line: 'step N|time SECONDS VERB ARGS'\n"
    "                       with VERB scale SPEC, preempt GPU, grant GPU, migrate RANK\n"
    "                       GPU, swap-out RANK, swap-in RANK GPU, timeslice GPU [RANKS]\n"
    "                       (RANKS: 2,3 or 0-3), timeslice off; in order, each once its\n"
    "                       step (the least step of the ESTs) or time (since launch)\n"
    "                       is reached; the ESTs wait at a step event's step until its\n"
    "                       events are done; step events in ascending order; '#' starts\n"
    "                       a comment\n"
    "  --est-memory SIZE    GPU memory one EST needs (e.g. 256M, 2G), for placement\n"
    "  --no-time-slicing    never place more ESTs on a GPU than fit in its memory\n"
    "  --tcp HOST:PORT      also listen on TCP (ESTs on other hosts; EASYSCALE_TOKEN)\n"
    "  --heartbeat-timeout  seconds without heartbeat before an EST is unresponsive (10)\n"
    "  --move-timeout       seconds a move may take before it counts as failed (300)\n"
    "  --hold-timeout       seconds the ESTs wait at a scheduled step for its events\n"
    "                       before they go on without them (the move timeout + 60)\n"
    "  --progress           auto (default: one updating line on a terminal, else a\n"
    "                       line every 30 s and on placement changes), off, or SECONDS\n"
    "A job across hosts: run it on every host with the same --nnodes, --master,\n"
    "--ests-per-node and token, and that host's --node-rank (0..N-1). Node 0 (the\n"
    "host of HOST) serves the job on TCP HOST:PORT; node R runs ranks R*K..R*K+K-1\n"
    "on its own GPUs with RANK, WORLD_SIZE (N*K), LOCAL_RANK, LOCAL_WORLD_SIZE (K),\n"
    "GROUP_RANK (R), GROUP_WORLD_SIZE (N), MASTER_ADDR (HOST) and MASTER_PORT\n"
    "(PORT + 1: the application's rendezvous); output lines are prefixed\n"
    "[HOSTNAME:RANK]. A node that fails, or is not heard from for the heartbeat\n"
    "timeout, fails the job on every host (exit 1 everywhere). Node R's GPUs are\n"
    "R:ORDINAL (1:0); migrations, preempt and grant act inside a host; --schedule:\n"
    "the same file on every host (node 0 asks for its events, every node's ESTs\n"
    "wait at its steps).\n"
    "  --nnodes N           hosts of the job (1..64; 1: this host only)\n"
    "  --node-rank R        this host's node (0..N-1)\n"
    "  --master HOST:PORT   node 0's address and the job's control port (not 0, < 65535)\n"
    "  --ests-per-node K    ESTs on every host (instead of --ests)\n"
    "  --token-file F       the job's token (first line; mode 0600), else EASYSCALE_TOKEN\n"
    "  --join-timeout S     seconds node 0 waits for a node's first report (120)\n"
    "Exit status: 0 every EST exited 0 (and every scheduled event succeeded), 1 an\n"
    "EST failed (named on stderr) or an event failed, 2 usage.\n";

/* The run's state (run_int.h). */
run_state_t R;

static int bad_usage(const char *fmt, const char *a)
{
    char m[600];
    snprintf(m, sizeof(m), fmt, a ? a : "");
    es_ctl_err("%s", m);
    fputs(usage, stderr);
    return ES_CTL_EXIT_USAGE;
}

/* ---- run's steps ------------------------------------------------------------------------ */

static void run_ctx_init(run_ctx_t *x)
{
    memset(&R, 0, sizeof(R));
    memset(x, 0, sizeof(*x));
    x->spec = "all";
    x->progress = "auto";
    x->hb = 10;
    x->mv = 300;
    x->hold = -1;
    x->nnodes = 1;
    x->node_rank = -1;
    x->join = 120;
    x->job.determinism = 1;
    x->job.time_slicing = 1;
    x->lockfd = x->go[0] = x->go[1] = -1;
    x->rc = ES_CTL_EXIT_FAIL;
}

/* A usage error: the message and the usage on stderr, exit status 2. */
static int usage_fail(run_ctx_t *x, const char *fmt, const char *a)
{
    x->rc = bad_usage(fmt, a);
    return -EINVAL;
}

/* An error that ends the run with exit status rc. */
static int run_fail(run_ctx_t *x, int rc, int err)
{
    x->rc = rc;
    return err;
}

static const struct option run_opts[] = {
    { "ests", required_argument, NULL, 'n' },
    { "gpus", required_argument, NULL, 'g' },
    { "determinism", required_argument, NULL, 'd' },
    { "schedule", required_argument, NULL, 'S' },
    { "socket", required_argument, NULL, 's' },
    { "est-memory", required_argument, NULL, 'm' },
    { "no-time-slicing", no_argument, NULL, 'T' },
    { "tcp", required_argument, NULL, 't' },
    { "heartbeat-timeout", required_argument, NULL, 'H' },
    { "move-timeout", required_argument, NULL, 'M' },
    { "hold-timeout", required_argument, NULL, 'W' },
    { "shim", required_argument, NULL, 'L' },
    { "progress", required_argument, NULL, 'p' },
    { "nnodes", required_argument, NULL, 'N' },
    { "node-rank", required_argument, NULL, 'R' },
    { "master", required_argument, NULL, 'A' },
    { "ests-per-node", required_argument, NULL, 'K' },
    { "token-file", required_argument, NULL, 'F' },
    { "join-timeout", required_argument, NULL, 'J' },
    { "help", no_argument, NULL, 'h' },
    { NULL, 0, NULL, 0 }
};

/* The options into x. Returns 0, -EINVAL (usage) or -ECANCELED (--help
 * shown: exit 0). */
static int run_getopt(run_ctx_t *x, int argc, char **argv)
{
    int c;
    optind = 1;
    opterr = 0;
    while ((c = getopt_long(argc, argv, "+h", run_opts, NULL)) != -1) {
        switch (c) {
        case 'n':
            if (es_ctl_parse_long(optarg, 1, ES_CTL_MAX_ESTS, &x->n) < 0)
                return usage_fail(x, "bad --ests \"%s\" (1 to 1024)", optarg);
            break;
        case 'g': x->spec = optarg; break;
        case 'd':
            if (strcmp(optarg, "d1") && strcmp(optarg, "d2") && strcmp(optarg, "off"))
                return usage_fail(x, "bad --determinism \"%s\" (d1, d2 or off)", optarg);
            x->job.determinism = strcmp(optarg, "off") == 0 ? 0 : optarg[1] - '0';
            break;
        case 'S': x->schedule = optarg; break;
        case 's': x->sock = optarg; break;
        case 'm':
            if (es_ctl_parse_size(optarg, &x->job.est_mem) < 0)
                return usage_fail(x, "bad --est-memory \"%s\" (e.g. 256M, 2G)", optarg);
            break;
        case 'T': x->job.time_slicing = 0; break;
        case 't': x->tcp = optarg; break;
        case 'H':
            if (es_ctl_parse_seconds(optarg, 0.1, 3600, &x->hb) < 0)
                return usage_fail(x, "bad --heartbeat-timeout \"%s\" (0.1 to 3600 s)", optarg);
            break;
        case 'M':
            if (es_ctl_parse_seconds(optarg, 0.1, 86400, &x->mv) < 0)
                return usage_fail(x, "bad --move-timeout \"%s\" (0.1 to 86400 s)", optarg);
            break;
        case 'W':
            if (es_ctl_parse_seconds(optarg, 1, 86400, &x->hold) < 0)
                return usage_fail(x, "bad --hold-timeout \"%s\" (1 to 86400 s)", optarg);
            break;
        case 'L': x->shim_opt = optarg; break;
        case 'p': x->progress = optarg; break;
        case 'N':
            if (es_ctl_parse_long(optarg, 1, ES_CTL_MAX_NODES, &x->nnodes) < 0)
                return usage_fail(x, "bad --nnodes \"%s\" (1 to 64)", optarg);
            break;
        case 'R':
            if (es_ctl_parse_long(optarg, 0, ES_CTL_MAX_NODES - 1, &x->node_rank) < 0)
                return usage_fail(x, "bad --node-rank \"%s\" (0 to 63)", optarg);
            break;
        case 'A': x->master = optarg; break;
        case 'K':
            if (es_ctl_parse_long(optarg, 1, ES_CTL_MAX_ESTS, &x->kpn) < 0)
                return usage_fail(x, "bad --ests-per-node \"%s\" (1 to 1024)", optarg);
            break;
        case 'F': x->token_file = optarg; break;
        case 'J':
            if (es_ctl_parse_seconds(optarg, 1, 86400, &x->join) < 0)
                return usage_fail(x, "bad --join-timeout \"%s\" (1 to 86400 s)", optarg);
            break;
        case 'h': fputs(usage, stdout); return run_fail(x, ES_CTL_EXIT_OK, -ECANCELED);
        default: return usage_fail(x, "unknown or incomplete option \"%s\"", argv[optind - 1]);
        }
    }
    x->cmd = optind < argc ? argv + optind : NULL;
    return 0;
}

/* The token of a job across hosts: --token-file's first line (a file
 * others may read is refused), else EASYSCALE_TOKEN; into R.token and the
 * environment (the daemon reads it there). Returns 0 or -EINVAL (usage). */
static int read_token(run_ctx_t *x)
{
    const char *tok = getenv("EASYSCALE_TOKEN");
    char line[128] = "";
    if (x->token_file) {
        struct stat st;
        FILE *f = fopen(x->token_file, "re");
        if (!f) {
            es_ctl_err("--token-file %s: %s", x->token_file, strerror(errno));
            return run_fail(x, ES_CTL_EXIT_USAGE, -EINVAL);
        }
        if (fstat(fileno(f), &st) == 0 && (st.st_mode & 077)) {
            fclose(f);
            es_ctl_err("--token-file %s can be read by others (mode %04o): chmod 600 it",
                       x->token_file, (unsigned)(st.st_mode & 07777));
            return run_fail(x, ES_CTL_EXIT_USAGE, -EINVAL);
        }
        if (!fgets(line, sizeof(line), f))
            line[0] = '\0';
        fclose(f);
        line[strcspn(line, "\r\n")] = '\0';
        tok = line;
    }
    if (!tok || es_proto_token_valid(tok) < 0)
        return usage_fail(x, "a job across hosts needs its token in --token-file or "
                          "EASYSCALE_TOKEN (16 to 64 printable characters, no spaces)%s", NULL);
    snprintf(R.token, sizeof(R.token), "%s", tok);
    setenv("EASYSCALE_TOKEN", R.token, 1);
    return 0;
}

/* --master HOST:PORT: its port (1..65534: PORT + 1 is the application's)
 * into *port. Returns 0 or -EINVAL. */
static int master_port(const char *m, int *port)
{
    char host[64], ps[16];
    long p;
    if (strlen(m) >= sizeof(R.master) ||
        es_ctl_split_hostport(m, host, sizeof(host), ps, sizeof(ps)) < 0 ||
        es_ctl_parse_long(ps, 1, 65534, &p) < 0)
        return -EINVAL;
    *port = (int)p;
    return 0;
}

/* A job across hosts (--nnodes > 1): its options, this node's ranks, the
 * token; one host: --ests-per-node is --ests. Returns 0 or -EINVAL. */
static int run_check_nodes(run_ctx_t *x)
{
    R.nnodes = (int)x->nnodes;
    if (x->nnodes == 1) {
        if (x->node_rank > 0 || x->master || x->token_file)
            return usage_fail(x, "--node-rank, --master and --token-file are for a job across "
                              "hosts (--nnodes 2 or more)%s", NULL);
        if (x->kpn && x->n && x->n != x->kpn)
            return usage_fail(x, "--ests and --ests-per-node differ on one host%s", NULL);
        if (x->kpn)
            x->n = x->kpn;
        R.world = (int)x->n;
        return 0;
    }
    if (x->node_rank < 0 || !x->master || !x->kpn)
        return usage_fail(x, "a job across hosts needs --node-rank, --master and "
                          "--ests-per-node%s", NULL);
    if (x->node_rank >= x->nnodes)
        return usage_fail(x, "--node-rank must be below --nnodes (0 to N-1)%s", NULL);
    if (x->n && x->n != x->nnodes * x->kpn)
        return usage_fail(x, "--ests is not --nnodes x --ests-per-node%s", NULL);
    if (x->nnodes * x->kpn > ES_CTL_MAX_ESTS)
        return usage_fail(x, "a job of more than 1024 ESTs%s", NULL);
    if (x->tcp)
        return usage_fail(x, "--tcp: a job across hosts listens on --master%s", NULL);
    int port;
    if (master_port(x->master, &port) < 0)
        return usage_fail(x, "bad --master \"%s\" (HOST:PORT, PORT 1 to 65534)", x->master);
    if (read_token(x) < 0)
        return -EINVAL;
    R.node = (int)x->node_rank;
    R.base = R.node * (int)x->kpn;
    R.world = (int)(x->nnodes * x->kpn);
    x->n = x->kpn;
    x->port = port + 1; /* MASTER_PORT: the application's rendezvous */
    snprintf(R.master, sizeof(R.master), "%s", x->master);
    if (gethostname(R.host, sizeof(R.host)) < 0 || !R.host[0])
        snprintf(R.host, sizeof(R.host), "node%d", R.node);
    R.host[sizeof(R.host) - 1] = '\0';
    for (char *h = R.host; *h; h++) /* one word in the node's reports */
        if (*h <= ' ' || *h >= 0x7f)
            *h = '_';
    snprintf(x->job.tcp, sizeof(x->job.tcp), "%s", x->master);
    x->job.nnodes = R.nnodes;
    x->job.ests_per_node = (int)x->kpn;
    x->job.join_timeout_ms = (int)(x->join * 1000);
    return 0;
}

/* What the options mean together: the job's size, the hold timeout,
 * progress, TCP. Returns 0 or -EINVAL (usage). */
static int run_check_opts(run_ctx_t *x)
{
    if (run_check_nodes(x) < 0)
        return -EINVAL;
    if (!x->n)
        return usage_fail(x, "run needs --ests N (or --ests-per-node K)%s", NULL);
    R.hold_timeout_s = x->hold > 0 ? x->hold : (x->mv + 60 < 86400 ? x->mv + 60 : 86400);
    if (!x->cmd)
        return usage_fail(x, "run needs a command: -- CMD ARGS...%s", NULL);
    R.n = (int)x->n;
    if (R.nnodes <= 1)
        R.world = R.n;
    R.tty = isatty(2);
    if (strcmp(x->progress, "auto") == 0) {
        R.progress_mode = R.tty ? 1 : 2;
        R.progress_every = R.tty ? 0 : 30;
    } else if (strcmp(x->progress, "off") == 0) {
        R.progress_mode = 0;
    } else if (es_ctl_parse_seconds(x->progress, 0.1, 86400, &R.progress_every) == 0) {
        R.progress_mode = 2;
    } else {
        return usage_fail(x, "bad --progress \"%s\" (auto, off or seconds)", x->progress);
    }
    if (x->tcp) {
        const char *tok = getenv("EASYSCALE_TOKEN");
        if (strlen(x->tcp) >= sizeof(x->job.tcp) || !strchr(x->tcp, ':'))
            return usage_fail(x, "bad --tcp \"%s\" (HOST:PORT)", x->tcp);
        if (!tok || es_proto_token_valid(tok) < 0)
            return usage_fail(x, "--tcp needs EASYSCALE_TOKEN (16 to 64 printable characters, "
                              "no spaces)%s", NULL);
        snprintf(x->job.tcp, sizeof(x->job.tcp), "%s", x->tcp);
    }
    return 0;
}

/* The schedule (parsed before anything starts), this program and the
 * shim. Returns 0 or a negative errno (x->rc set). */
static int run_locate(run_ctx_t *x)
{
    if (x->schedule && run_parse_schedule(x->schedule, x->err, sizeof(x->err)) < 0) {
        es_ctl_err("%s", x->err);
        return run_fail(x, ES_CTL_EXIT_USAGE, -EINVAL);
    }
    /* across hosts: node 0 asks for the events; the other nodes' ESTs only
     * wait at their steps (released by node 0's daemon) */
    if (R.node > 0)
        R.nev = 0;
    ssize_t sl = readlink("/proc/self/exe", R.self, sizeof(R.self) - 1);
    if (sl <= 0) {
        es_ctl_err("cannot find this program (/proc/self/exe): %s", strerror(errno));
        return -ENOENT;
    }
    R.self[sl] = '\0';
    if (run_find_shim(x->shim_opt, x->shim, sizeof(x->shim), x->err, sizeof(x->err)) < 0) {
        es_ctl_err("%s", x->err);
        return -ENOENT;
    }
    return 0;
}

/* d2's canonical device: EASYSCALE_CANONICAL_DEVICE, else the models of
 * the job's GPUs, each once. Returns 0 or -ENOTSUP (a model d2 does not
 * know). */
static int d2_canonical(run_ctx_t *x)
{
    es_ctl_job_t *job = &x->job;
    const char *env = getenv("EASYSCALE_CANONICAL_DEVICE");
    if (env && *env) {
        snprintf(x->canonical, sizeof(x->canonical), "%s", env);
        goto out;
    }
    size_t o = 0;
    for (int g = 0; g < job->ngpus; g++) {
        if (!(job->slots & (1ull << g)))
            continue;
        if (!es_ctl_d2_model_known(job->gpus[g].model)) {
            es_ctl_err("GPU %d (%s) is of a model d2 does not know (t4 a100 a10 l4 h100 h200 "
                       "b200); set EASYSCALE_CANONICAL_DEVICE", job->gpus[g].ordinal,
                       job->gpus[g].name);
            return -ENOTSUP;
        }
        char key[20], have[140];
        snprintf(key, sizeof(key), ",%s,", job->gpus[g].model);
        snprintf(have, sizeof(have), ",%s,", x->canonical);
        if (strstr(have, key))
            continue;
        int w = snprintf(x->canonical + o, sizeof(x->canonical) - o, "%s%s", o ? "," : "",
                         job->gpus[g].model);
        if (w > 0)
            o += (size_t)w;
    }
out:
    snprintf(job->canonical, sizeof(job->canonical), "%s", x->canonical);
    return 0;
}

/* d2's GEMM path, one for the whole job (a GPU of the job choosing its own
 * would give the job mixed bits): EASYSCALE_D2_GEMM as the shim parses it
 * (int8 or fma; unset: int8). Returns 0 or -EINVAL (named). */
static int d2_gemm_path(run_ctx_t *x)
{
    const char *env = getenv("EASYSCALE_D2_GEMM");
    if (!env)
        env = "int8";
    if (strcmp(env, "int8") != 0 && strcmp(env, "fma") != 0) {
        es_ctl_err("EASYSCALE_D2_GEMM=\"%s\" is not valid: expected int8 or fma", env);
        return -EINVAL;
    }
    snprintf(x->d2_gemm, sizeof(x->d2_gemm), "%s", env);
    return 0;
}

/* The machine's GPUs, the job's (--gpus), d2's canonical device, and the
 * shim's own time-slicing's limits. Returns 0 or a negative errno (x->rc
 * set). */
static int run_gpus(run_ctx_t *x)
{
    es_ctl_job_t *job = &x->job;
    if (es_ctl_gpus_probe(job->gpus, ES_CTL_MAX_GPUS, &job->ngpus, x->err, sizeof(x->err)) < 0) {
        es_ctl_err("%s", x->err);
        return -ENODEV;
    }
    int prc = es_ctl_gpus_parse(x->spec, job->gpus, job->ngpus, &job->slots, x->err,
                                sizeof(x->err));
    if (prc < 0) {
        es_ctl_err("--gpus: %s", x->err);
        return run_fail(x, prc == -EINVAL ? ES_CTL_EXIT_USAGE : ES_CTL_EXIT_FAIL, prc);
    }
    if (job->determinism == 2 && d2_canonical(x) < 0)
        return -ENOTSUP;
    if (job->determinism == 2 && d2_gemm_path(x) < 0)
        return run_fail(x, ES_CTL_EXIT_USAGE, -EINVAL);
    /* The shim's time-slicing (EASYSCALE_TIME_SLICE=on or overlap, docs/MOVING.md) groups
     * the ESTs of a GPU by local rank modulo the GPUs it sees, without
     * EASYSCALE_SLOT: under the controller that is the same placement only
     * when the job has one GPU and sees only it. The job file says so: the
     * daemon counts every EST (which reports no slot) on that GPU. */
    const char *ts = getenv("EASYSCALE_TIME_SLICE"), *xh = getenv("EASYSCALE_XHOST");
    job->shim_time_slice = ts && (strcmp(ts, "on") == 0 || strcmp(ts, "overlap") == 0);
    /* the levels between the hosts in host memory (the shim checks the value) */
    job->xhost_host = job->shim_time_slice || (xh && strcmp(xh, "host") == 0);
    if (job->shim_time_slice && (__builtin_popcountll(job->slots) != 1 || job->ngpus != 1)) {
        es_ctl_err("EASYSCALE_TIME_SLICE=%s: the controller runs time-sliced jobs on one GPU "
                   "that is the only one visible (CUDA_VISIBLE_DEVICES); this job has %d of %d "
                   "(on several GPUs: 'easyscale-ctl timeslice' while it runs, or a timeslice "
                   "event of --schedule)", ts, __builtin_popcountll(job->slots), job->ngpus);
        return run_fail(x, ES_CTL_EXIT_USAGE, -EINVAL);
    }
    return 0;
}

/* The job's timeouts and first placement (the scheduler, with the prior
 * speeds). Returns 0 or a negative errno. */
static int run_plan(run_ctx_t *x)
{
    es_ctl_job_t *job = &x->job;
    es_sched_slot_t slots[ES_CTL_MAX_GPUS];
    int idx[ES_CTL_MAX_GPUS], ns = 0, place[ES_CTL_MAX_ESTS], moves, rc;
    uint64_t maxl;
    job->nests = R.n;
    job->hb_timeout_ms = (int)(x->hb * 1000);
    R.hb_timeout_ms = job->hb_timeout_ms;
    job->move_timeout_ms = (int)(x->mv * 1000);
    for (int g = 0; g < job->ngpus; g++)
        if (job->slots & (1ull << g)) {
            idx[ns] = g;
            slots[ns].est_ns = es_ctl_gpu_prior_ns(&job->gpus[g]);
            slots[ns].mem = job->gpus[g].mem;
            ns++;
        }
    es_sched_in_t in = { .nslots = ns, .slots = slots, .nests = R.n, .est_mem = job->est_mem,
                         .time_slicing = job->time_slicing, .swap_ns = job->est_mem / 5 };
    if ((rc = es_sched_place(&in, place, &maxl, &moves, x->err, sizeof(x->err))) < 0) {
        es_ctl_err("cannot place the job: %s", x->err);
        return rc;
    }
    for (int r = 0; r < R.n; r++)
        job->place[r] = idx[place[r]];
    /* node 0 of a job across hosts: the other hosts' ESTs are on GPUs of theirs */
    job->nests = R.nnodes > 1 ? R.world : R.n;
    for (int r = R.n; r < job->nests; r++)
        job->place[r] = -1;
    return 0;
}

/* The job's socket: --socket (made absolute), else job-PID.sock in the
 * default directory (its stale jobs' files removed). Returns 0 or a
 * negative errno (x->rc set). */
static int run_socket_path(run_ctx_t *x)
{
    if (R.nnodes > 1 && R.node > 0) { /* node 0's daemon */
        snprintf(R.sock, sizeof(R.sock), "tcp:%s", R.master);
        return 0;
    }
    if (x->sock && x->sock[0] == '/') {
        snprintf(R.sock, sizeof(R.sock), "%s", x->sock);
    } else if (x->sock) {
        char cwd[PATH_MAX];
        if (!getcwd(cwd, sizeof(cwd))) {
            es_ctl_err("getcwd: %s", strerror(errno));
            return -ENOENT;
        }
        if (snprintf(R.sock, sizeof(R.sock), "%s/%s", cwd, x->sock) >= (int)sizeof(R.sock)) {
            es_ctl_err("socket path too long");
            return run_fail(x, ES_CTL_EXIT_USAGE, -ENAMETOOLONG);
        }
    } else {
        char dir[4096];
        if (es_ctl_default_dir(dir, sizeof(dir), x->err, sizeof(x->err)) < 0) {
            es_ctl_err("%s", x->err);
            return -ENOENT;
        }
        es_ctl_clean_stale(dir);
        if (snprintf(R.sock, sizeof(R.sock), "%s/job-%d.sock", dir, (int)getpid()) >=
            (int)sizeof(R.sock)) {
            es_ctl_err("socket path too long");
            return -ENAMETOOLONG;
        }
    }
    if (strlen(R.sock) >= 108) {
        es_ctl_err("socket path too long (over 107 bytes): %s", R.sock);
        return run_fail(x, ES_CTL_EXIT_USAGE, -ENAMETOOLONG);
    }
    return 0;
}

/* The job's lock and file, the daemon, then the go for the held ESTs.
 * Returns 0 or a negative errno. */
static int start_job(run_ctx_t *x)
{
    pid_t holder = 0;
    if (R.nnodes > 1)
        run_start_node_link(x);
    if (R.nnodes > 1 && R.node > 0) { /* node 0 serves the job */
        R.start_ms = es_ctl_now_ms();
        close(x->go[1]); /* go */
        x->go[1] = -1;
        return 0;
    }
    x->lockfd = es_ctl_lock(R.sock, &holder);
    if (x->lockfd < 0) {
        int rc = x->lockfd;
        if (rc == -EBUSY)
            es_ctl_err("a job is already running at %s (controller pid %d)", R.sock, (int)holder);
        else
            es_ctl_err("cannot lock %s: %s", R.sock, strerror(-rc));
        return rc;
    }
    x->made_files = 1;
    int wr = es_ctl_job_write(R.sock, &x->job);
    if (wr < 0) {
        es_ctl_err("cannot write the job file: %s", strerror(-wr));
        return wr;
    }
    close(x->lockfd); /* the daemon takes the lock from here on */
    x->lockfd = -1;
    R.daemon = run_start_daemon(x->err, sizeof(x->err));
    if (R.daemon < 0) {
        R.daemon = 0;
        es_ctl_err("%s", x->err);
        return -ECHILD;
    }
    R.start_ms = es_ctl_now_ms();
    close(x->go[1]); /* go */
    x->go[1] = -1;
    return 0;
}

/* ---- teardown --------------------------------------------------------------------------- */

/* nftw callback: the rendezvous directory's files, then the directory. */
static int rm_entry(const char *path, const struct stat *st, int type, struct FTW *f)
{
    (void)st;
    (void)f;
    if (type == FTW_DP)
        rmdir(path);
    else
        unlink(path);
    return 0;
}

/* SIGTERM to the daemon, SIGKILL after the grace time. */
static void stop_daemon(void)
{
    R.stopping_daemon = 1;
    kill(R.daemon, SIGTERM);
    int64_t until = es_ctl_now_ms() + STOP_GRACE_MS;
    while (waitpid(R.daemon, NULL, WNOHANG) == 0) {
        if (es_ctl_now_ms() > until) {
            kill(R.daemon, SIGKILL);
            waitpid(R.daemon, NULL, 0);
            break;
        }
        struct timespec ts = { 0, 20000000 };
        nanosleep(&ts, NULL);
    }
}

/* Releases what the run holds (whichever step it got to). */
static void run_teardown(run_ctx_t *x)
{
    if (x->go[0] >= 0)
        close(x->go[0]);
    if (x->go[1] >= 0)
        close(x->go[1]); /* held ESTs see the pipe close... */
    if (R.e && x->rc != ES_CTL_EXIT_OK) {
        /* ... and must not run when the start failed */
        for (int r = 0; r < R.n; r++)
            if (R.e[r].pid > 0 && !R.e[r].done) {
                kill(R.e[r].pid, SIGKILL);
                waitpid(R.e[r].pid, NULL, 0);
                R.e[r].done = 1;
            }
    }
    if (R.daemon > 0)
        stop_daemon();
    if (x->made_files) {
        char jobf[4200], lockf[4200];
        es_ctl_job_paths(R.sock, jobf, lockf, sizeof(jobf));
        unlink(R.sock);
        unlink(jobf);
        unlink(lockf);
    }
    if (x->lockfd >= 0)
        close(x->lockfd);
    if (x->rdzv[0])
        nftw(x->rdzv, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
    if (R.e)
        for (int r = 0; r < R.n; r++)
            for (int s = 0; s < 2; s++) {
                if (R.e[r].out[s].fd >= 0)
                    close(R.e[r].out[s].fd);
                free(R.e[r].out[s].buf);
            }
    free(R.e);
    es_ctl_nlink_free(&R.nlink);
    if (run_selfpipe[0] >= 0) {
        close(run_selfpipe[0]);
        close(run_selfpipe[1]);
        run_selfpipe[0] = run_selfpipe[1] = -1;
    }
}

int es_ctl_run_main(int argc, char **argv)
{
    static run_ctx_t x; /* the job table is large */
    run_loop_t l;
    run_ctx_init(&x);
    /* options, GPUs, the plan and the socket: nothing held yet */
    if (run_getopt(&x, argc, argv) < 0 || run_check_opts(&x) < 0 || run_locate(&x) < 0)
        goto out;
    if (run_gpus(&x) < 0 || run_plan(&x) < 0 || run_socket_path(&x) < 0)
        goto out;
    /* the ESTs (held), the job's files, the daemon, the go */
    if (run_prepare(&x) < 0 || run_spawn_ests(&x) < 0 || start_job(&x) < 0)
        goto out;
    if (run_loop(&x, &l) == 0)
        run_report(&x, &l);
out:
    run_teardown(&x);
    return x.rc;
}
