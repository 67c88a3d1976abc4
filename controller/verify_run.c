/* easyscale-ctl verify, the subcommand (controller/verify.h): builds or
 * reads a matrix of configurations (controller/verify.c), runs the
 * training command once per configuration under `easyscale-ctl run` (this
 * same binary), takes each run's checksum from its output, judges the
 * matrix, explains mismatches with the collectives' digests
 * (controller/digest.h), and prints a table (or JSON). Exit status: 0 the
 * matrix passes, 1 it does not, 2 usage. */
#include "controller/verify.h"
#include "controller/digest.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
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

/* ---- running the configurations ------------------------------------------------------- */

static const char *const usage =
    "usage: easyscale-ctl verify [--ests N] [--steps N] [--calls-per-step K]\n"
    "           [--matrix FILE | --reduced] [--only NAMES] [--pattern REGEX] [--json]\n"
    "           [--list] [--workdir DIR] [--timeout SECONDS] [--no-digest] [-- CMD ARGS...]\n"
    "Runs CMD (default: examples/train.py --steps N --deterministic-kernels) under\n"
    "'easyscale-ctl run --ests N' once per configuration of a matrix (built from the\n"
    "GPUs it sees, or --matrix FILE; --list prints it), takes each run's checksum\n"
    "from its output with REGEX, and prints a table of configuration, checksum,\n"
    "steps/s and verdict (--json: one JSON object). Passes when every check of a\n"
    "determinism level gives the same checksum and every negative control (shim\n"
    "not loaded, NCCL's own collectives) gives another.\n"
    "  --ests N            ESTs of the job (4)\n"
    "  --steps N           training steps: passed to the default trainer (200); with\n"
    "                      CMD, how many it runs (for steps/s and scheduled events)\n"
    "  --calls-per-step K  all-reduce calls per training step (the controller's step\n"
    "                      unit; 3 for the default trainer, else 1)\n"
    "  --matrix FILE       the configurations (format: controller/verify.h, --list)\n"
    "  --reduced           the built-in matrix's short form (what CI runs)\n"
    "  --only NAMES        run only these configurations (comma-separated)\n"
    "  --pattern REGEX     the checksum in the output, POSIX extended; its first\n"
    "                      group when it has one (default 'checksum ([0-9a-f]+)')\n"
    "  --workdir DIR       keep each run's output (NAME.log) and digests there\n"
    "                      (default: a temporary directory, kept when it fails)\n"
    "  --timeout SECONDS   per configuration (600)\n"
    "  --no-digest         no collective digests (EASYSCALE_DIGEST) for explaining\n"
    "                      mismatches\n"
    "Exit status: 0 pass, 1 fail, 2 usage.\n";

typedef struct vrun_ctx {
    const char *self;
    char **visible;      /* per configuration: CUDA_VISIBLE_DEVICES for gpus=, or NULL */
    char **cmd;
    int ncmd;
    int nests;
    long steps;          /* training steps (0: unknown) */
    double timeout;
    const char *workdir;
    int digest;
    int json;
    int moves_avail;     /* -1 unknown, 0 no, 1 yes */
    int no_digest;       /* a difference had no digests to explain it */
} vrun_ctx_t;

static volatile sig_atomic_t g_stop;
static void on_stop(int sig) { g_stop = sig; }

static char *read_all(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    char *buf = NULL;
    size_t n = 0, cap = 0;
    if (!f)
        return NULL;
    for (;;) {
        if (cap - n < 65536) {
            size_t nc = cap ? cap * 2 : 131072;
            char *nb = realloc(buf, nc + 1);
            if (!nb) {
                free(buf);
                fclose(f);
                return NULL;
            }
            buf = nb;
            cap = nc;
        }
        size_t r = fread(buf + n, 1, cap - n, f);
        n += r;
        if (r == 0)
            break;
    }
    fclose(f);
    buf[n] = '\0';
    *len = n;
    return buf;
}

/* The first line of the log that says why the run failed. */
static void failure_line(const char *log, char *out, size_t len)
{
    static const char *const keys[] = { "not supported", "Duplicate GPU", "the job failed",
                                        "did not happen", "failed", "error", "refused", NULL };
    out[0] = '\0';
    for (int k = 0; keys[k] && !out[0]; k++) {
        const char *p = strstr(log, keys[k]);
        if (!p)
            continue;
        const char *b = p, *e = strchr(p, '\n');
        while (b > log && b[-1] != '\n')
            b--;
        size_t l = e ? (size_t)(e - b) : strlen(b);
        /* an EST's line: without run's "[RANK] " and NCCL's "host:pid:tid [dev] NCCL WARN " */
        if (*b == '[') {
            const char *q = b + 1;
            while (q < b + l && isdigit((unsigned char)*q))
                q++;
            if (q < b + l - 1 && q[0] == ']' && q[1] == ' ') {
                l -= (size_t)(q + 2 - b);
                b = q + 2;
            }
        }
        const char *w = strstr(b, "NCCL WARN ");
        if (w && w < b + l) {
            l -= (size_t)(w + 10 - b);
            b = w + 10;
        }
        while (l && (*b == ' ' || *b == '\t')) {
            b++;
            l--;
        }
        if (l >= len)
            l = len - 1;
        memcpy(out, b, l);
        out[l] = '\0';
    }
}

static int write_schedule(const char *path, const char *events)
{
    FILE *f = fopen(path, "w");
    if (!f)
        return -errno;
    for (const char *p = events; *p;) {
        const char *semi = strchr(p, ';');
        size_t l = semi ? (size_t)(semi - p) : strlen(p);
        while (l && (*p == ' ' || *p == '\t')) {
            p++;
            l--;
        }
        fprintf(f, "%.*s\n", (int)l, p);
        p += l + (semi ? 1 : 0);
    }
    return fclose(f) ? -errno : 0;
}

/* The paths of configuration c's output, schedule and digests in the
 * work directory. Returns 0 or -ENAMETOOLONG. */
static int config_paths(const vrun_ctx_t *x, const es_vcfg_t *c, char *logp, char *schedp,
                        char *digp, size_t len)
{
    if (snprintf(logp, len, "%s/%s.log", x->workdir, c->name) >= (int)len ||
        snprintf(schedp, len, "%s/%s.schedule", x->workdir, c->name) >= (int)len ||
        snprintf(digp, len, "%s/%s.digest", x->workdir, c->name) >= (int)len)
        return -ENAMETOOLONG;
    return 0;
}

/* `easyscale-ctl run` of configuration c into argv (max entries; nests
 * holds --ests), its schedule written to schedp. Returns 0 or a negative
 * errno from writing the schedule. */
static int config_argv(const vrun_ctx_t *x, const es_vcfg_t *c, const char *schedp,
                       char *nests, size_t nlen, char **argv, int max)
{
    int a = 0;
    snprintf(nests, nlen, "%d", c->ests ? c->ests : x->nests);
    argv[a++] = (char *)x->self;
    argv[a++] = "run";
    argv[a++] = "--ests";
    argv[a++] = nests;
    argv[a++] = "--determinism";
    argv[a++] = c->shim_off ? "off" : c->level == 2 ? "d2" : "d1";
    argv[a++] = "--progress";
    argv[a++] = "off";
    if (c->schedule) {
        int w = write_schedule(schedp, c->schedule);
        if (w < 0)
            return w;
        argv[a++] = "--schedule";
        argv[a++] = (char *)schedp;
    }
    if (c->est_mem) {
        argv[a++] = "--est-memory";
        argv[a++] = c->est_mem;
    }
    if (c->no_tslice)
        argv[a++] = "--no-time-slicing";
    if (c->shim_none) {
        argv[a++] = "--shim";
        argv[a++] = "none";
    }
    argv[a++] = "--";
    for (int i = 0; i < x->ncmd && a < max - 1; i++)
        argv[a++] = x->cmd[i];
    argv[a] = NULL;
    return 0;
}

/* The forked run of configuration c: output into logp, its environment,
 * then exec. */
static void config_child(const vrun_ctx_t *x, const es_vcfg_t *c, const char *visible,
                         const char *logp, const char *digp, char **argv)
    __attribute__((noreturn));
static void config_child(const vrun_ctx_t *x, const es_vcfg_t *c, const char *visible,
                         const char *logp, const char *digp, char **argv)
{
    int fd = open(logp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0)
        _exit(126);
    dup2(fd, 1);
    dup2(fd, 2);
    int nul = open("/dev/null", O_RDONLY);
    if (nul >= 0)
        dup2(nul, 0);
    signal(SIGINT, SIG_DFL);
    signal(SIGTERM, SIG_DFL);
    if (visible)
        setenv("CUDA_VISIBLE_DEVICES", visible, 1);
    /* a schedule's steps are seen through heartbeats: make them frequent */
    if (c->schedule)
        setenv("EASYSCALE_HEARTBEAT_MS", "100", 0);
    for (int i = 0; i < c->nenv; i++)
        putenv(c->env[i]);
    if (x->digest && !c->shim_none)
        setenv("EASYSCALE_DIGEST", digp, 1);
    else
        unsetenv("EASYSCALE_DIGEST");
    execv(x->self, argv);
    _exit(127);
}

/* Waits for the run pid started at t0: SIGTERM at the timeout or on
 * SIGINT/SIGTERM (run stops its ESTs), SIGKILL 20 s later. Sets *st;
 * returns 0, 1 timed out, 2 interrupted. */
static int config_wait(const vrun_ctx_t *x, pid_t pid, uint64_t t0, int *st)
{
    int killed = 0;
    uint64_t deadline = t0 + (uint64_t)(x->timeout * 1e9), kill_at = 0;
    for (;;) {
        pid_t w = waitpid(pid, st, WNOHANG);
        if (w == pid)
            break;
        if (w < 0 && errno != EINTR) {
            *st = 0x7f00;
            break;
        }
        uint64_t now = es_ctl_now_ns();
        if ((g_stop || now > deadline) && !killed) {
            kill(pid, SIGTERM); /* run stops its ESTs */
            killed = g_stop ? 2 : 1;
            kill_at = now + 20000000000ull;
        } else if (killed && kill_at && now > kill_at) {
            kill(pid, SIGKILL);
            kill_at = 0;
        }
        struct timespec ts = { 0, 50000000 };
        nanosleep(&ts, NULL);
    }
    return killed;
}

/* The state of a run that ended (killed: config_wait's), from its output
 * log (its checksum already in r when have). */
static void config_judge(vrun_ctx_t *x, const es_vcfg_t *c, const char *log, int have,
                         int killed, es_vresult_t *r)
{
    if (killed) {
        r->state = ES_VRUN_FAILED;
        snprintf(r->why, sizeof(r->why), killed == 2 ? "interrupted" : "timed out after %.0f s",
                 x->timeout);
    } else if (r->exit_status != 0 || !have) {
        char line[400];
        failure_line(log, line, sizeof(line));
        if (c->moves && strstr(log, "not supported")) {
            r->state = ES_VRUN_NOT_RUN;
            r->sum[0] = '\0';
            r->nmatch = r->ndistinct = 0;
            x->moves_avail = 0;
            snprintf(r->why, sizeof(r->why), "moves not available: %s", line);
        } else {
            r->state = ES_VRUN_FAILED;
            if (r->exit_status != 0)
                snprintf(r->why, sizeof(r->why), "exit %d: %s", r->exit_status,
                         line[0] ? line : "(see the log)");
            else
                snprintf(r->why, sizeof(r->why), "no checksum in the output");
        }
    } else {
        r->state = ES_VRUN_OK;
        if (c->moves && c->schedule)
            x->moves_avail = 1;
    }
}

/* Runs one configuration; fills r (state, exit status, log text). */
static void run_config(vrun_ctx_t *x, const es_vcfg_t *c, const char *visible,
                       const regex_t *re, es_vresult_t *r)
{
    char logp[PATH_MAX], schedp[PATH_MAX], digp[PATH_MAX], nests[16];
    char *argv[64 + 256];
    memset(r, 0, sizeof(*r));
    if (c->moves && x->moves_avail == 0) {
        r->state = ES_VRUN_NOT_RUN;
        snprintf(r->why, sizeof(r->why), "moves not available (shown by an earlier run)");
        return;
    }
    if (config_paths(x, c, logp, schedp, digp, PATH_MAX) < 0) {
        r->state = ES_VRUN_FAILED;
        snprintf(r->why, sizeof(r->why), "the work directory's path is too long");
        return;
    }
    int w = config_argv(x, c, schedp, nests, sizeof(nests), argv,
                        (int)(sizeof(argv) / sizeof(argv[0])));
    if (w < 0) {
        r->state = ES_VRUN_FAILED;
        snprintf(r->why, sizeof(r->why), "cannot write the schedule: %s", strerror(-w));
        return;
    }
    uint64_t t0 = es_ctl_now_ns();
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid < 0) {
        r->state = ES_VRUN_FAILED;
        snprintf(r->why, sizeof(r->why), "fork: %s", strerror(errno));
        return;
    }
    if (pid == 0)
        config_child(x, c, visible, logp, digp, argv);
    int st = 0, killed = config_wait(x, pid, t0, &st);
    r->seconds = (double)(es_ctl_now_ns() - t0) / 1e9;
    r->exit_status = WIFEXITED(st) ? WEXITSTATUS(st) : -(WIFSIGNALED(st) ? WTERMSIG(st) : 1);
    size_t len = 0;
    char *log = read_all(logp, &len);
    if (!log) {
        r->state = ES_VRUN_FAILED;
        snprintf(r->why, sizeof(r->why), "cannot read the run's output (%s.log)", c->name);
        return;
    }
    int have = es_verify_checksum(log, len, re, r->sum, sizeof(r->sum), &r->nmatch,
                                  &r->ndistinct) == 0;
    config_judge(x, c, log, have, killed, r);
    free(log);
}

/* ---- output --------------------------------------------------------------------------- */

static double steps_per_s(const vrun_ctx_t *x, const es_vresult_t *r)
{
    return x->steps > 0 && r->state == ES_VRUN_OK && r->seconds > 0 ? (double)x->steps / r->seconds
                                                                      : 0;
}

static void print_table(const vrun_ctx_t *x, const es_vmatrix_t *m, const es_vresult_t *r,
                        const char *summary, int pass)
{
    printf("%-16s %-5s %-7s %-18s %8s %7s  %s\n", "configuration", "level", "kind", "checksum",
           "steps/s", "time", "verdict");
    for (int i = 0; i < m->n; i++) {
        const es_vcfg_t *c = &m->c[i];
        const es_vresult_t *y = &r[i];
        char sps[32] = "-", tm[32] = "-", sum[20] = "-";
        double s = steps_per_s(x, y);
        if (s > 0)
            snprintf(sps, sizeof(sps), "%.1f", s);
        if (y->state != ES_VRUN_NOT_RUN)
            snprintf(tm, sizeof(tm), "%.1fs", y->seconds);
        if (y->sum[0])
            snprintf(sum, sizeof(sum), "%.16s", y->sum);
        printf("%-16s d%-4d %-7s %-18s %8s %7s  %s%s%s\n", c->name, c->level,
               c->role == ES_VCFG_CHECK ? "check" : "control", sum, sps, tm, y->verdict,
               y->why[0] ? ": " : "", y->why);
        if (y->explain[0])
            printf("%-16s %s\n", "", y->explain);
    }
    if (x->no_digest)
        printf("verify: no collective digests to explain the differences (this "
               "libeasyscale.so writes none)\n");
    printf("verify: %s\n", summary);
    if (!pass)
        printf("verify: each run's output is in %s/NAME.log\n", x->workdir);
}

static void print_json(const vrun_ctx_t *x, const es_vmatrix_t *m, const es_vresult_t *r,
                       const char *summary, int pass, const char *pattern)
{
    es_ctl_buf_t b = { 0 };
    es_ctl_buf_printf(&b, "{\"pass\":%s,\"summary\":", pass ? "true" : "false");
    es_ctl_buf_json_str(&b, summary);
    es_ctl_buf_printf(&b, ",\"ests\":%d,\"pattern\":", x->nests);
    es_ctl_buf_json_str(&b, pattern);
    es_ctl_buf_printf(&b, ",\"workdir\":");
    es_ctl_buf_json_str(&b, x->workdir);
    es_ctl_buf_printf(&b, ",\"command\":[");
    for (int i = 0; i < x->ncmd; i++) {
        es_ctl_buf_printf(&b, "%s", i ? "," : "");
        es_ctl_buf_json_str(&b, x->cmd[i]);
    }
    es_ctl_buf_printf(&b, "],\"configs\":[");
    for (int i = 0; i < m->n; i++) {
        const es_vcfg_t *c = &m->c[i];
        const es_vresult_t *y = &r[i];
        es_ctl_buf_printf(&b, "%s{\"name\":", i ? "," : "");
        es_ctl_buf_json_str(&b, c->name);
        es_ctl_buf_printf(&b, ",\"kind\":\"%s\",\"level\":\"d%d\",\"gpus\":",
                          c->role == ES_VCFG_CHECK ? "check" : "control", c->level);
        es_ctl_buf_json_str(&b, c->gpus ? c->gpus : "all");
        es_ctl_buf_printf(&b, ",\"env\":[");
        for (int k = 0; k < c->nenv; k++) {
            es_ctl_buf_printf(&b, "%s", k ? "," : "");
            es_ctl_buf_json_str(&b, c->env[k]);
        }
        es_ctl_buf_printf(&b, "],\"schedule\":");
        if (c->schedule)
            es_ctl_buf_json_str(&b, c->schedule);
        else
            es_ctl_buf_printf(&b, "null");
        es_ctl_buf_printf(&b, ",\"description\":");
        es_ctl_buf_json_str(&b, c->desc ? c->desc : "");
        es_ctl_buf_printf(&b, ",\"state\":\"%s\",\"exit\":%d,\"checksum\":",
                          y->state == ES_VRUN_OK ? "ok" : y->state == ES_VRUN_FAILED ? "failed"
                                                                                     : "skipped",
                          y->exit_status);
        if (y->sum[0])
            es_ctl_buf_json_str(&b, y->sum);
        else
            es_ctl_buf_printf(&b, "null");
        es_ctl_buf_printf(&b, ",\"ranks_agree\":%s,\"seconds\":%.3f,\"steps_per_s\":",
                          y->ndistinct <= 1 ? "true" : "false", y->seconds);
        double s = steps_per_s(x, y);
        if (s > 0)
            es_ctl_buf_printf(&b, "%.3f", s);
        else
            es_ctl_buf_printf(&b, "null");
        es_ctl_buf_printf(&b, ",\"reference\":%s,\"good\":%s,\"verdict\":",
                          y->reference ? "true" : "false", y->good ? "true" : "false");
        es_ctl_buf_json_str(&b, y->verdict);
        es_ctl_buf_printf(&b, ",\"why\":");
        es_ctl_buf_json_str(&b, y->why);
        es_ctl_buf_printf(&b, ",\"divergence\":");
        es_ctl_buf_json_str(&b, y->explain);
        es_ctl_buf_printf(&b, "}");
    }
    es_ctl_buf_printf(&b, "]}\n");
    if (b.p)
        fputs(b.p, stdout);
    es_ctl_buf_free(&b);
}

static int rm_entry(const char *p, const struct stat *s, int f, struct FTW *w)
{
    (void)s;
    (void)f;
    (void)w;
    remove(p);
    return 0;
}

/* The repository root for the default command: $ES_ROOT, else two levels
 * above this binary (build/bin/easyscale-ctl). */
static int default_trainer(const char *self, char *out, size_t len)
{
    const char *root = getenv("ES_ROOT");
    char buf[PATH_MAX];
    if (root && *root) {
        if (snprintf(out, len, "%s/examples/train.py", root) >= (int)len)
            return -ENAMETOOLONG;
    } else {
        snprintf(buf, sizeof(buf), "%s", self);
        for (int up = 0; up < 3; up++) {
            char *s = strrchr(buf, '/');
            if (!s)
                return -ENOENT;
            *s = '\0';
        }
        if (snprintf(out, len, "%s/examples/train.py", buf) >= (int)len)
            return -ENAMETOOLONG;
    }
    return access(out, R_OK) == 0 ? 0 : -ENOENT;
}


/* ---- the subcommand ------------------------------------------------------------------------ */

/* What es_ctl_verify_main works with: the options, the matrix, the
 * results, and what it holds until verify_release frees it. */
typedef struct verify {
    /* options */
    long nests, steps, cps;
    const char *matrix, *only, *pattern, *workdir;
    int reduced, json, list, digest;
    double timeout;
    /* the command and the runs */
    char self[PATH_MAX], trainer[PATH_MAX], steps_s[32], wd[PATH_MAX], err[1024];
    char *defcmd[8];
    vrun_ctx_t x;
    /* what is held */
    es_vmatrix_t *m;
    es_vresult_t *res;
    char *mtext;
    es_ctl_buf_t b;      /* the built-in matrix's text */
    regex_t re;
    int have_re, made_dir, sig_set;
    struct sigaction sa_old_int, sa_old_term;
    es_ctl_gpu_t *gp;
    int ngp, probe_rc;
    char probe_err[512];
    int rc;              /* the exit status */
} verify_t;

static const struct option verify_opts[] = {
    { "ests", required_argument, NULL, 'n' },    { "steps", required_argument, NULL, 's' },
    { "calls-per-step", required_argument, NULL, 'k' },
    { "matrix", required_argument, NULL, 'm' },  { "reduced", no_argument, NULL, 'r' },
    { "only", required_argument, NULL, 'o' },    { "pattern", required_argument, NULL, 'p' },
    { "json", no_argument, NULL, 'j' },          { "list", no_argument, NULL, 'l' },
    { "workdir", required_argument, NULL, 'w' }, { "timeout", required_argument, NULL, 't' },
    { "no-digest", no_argument, NULL, 'D' },     { "help", no_argument, NULL, 'h' },
    { NULL, 0, NULL, 0 }
};

/* A usage error: the usage on stderr, exit status 2. */
static int verify_usage(verify_t *v)
{
    fputs(usage, stderr);
    v->rc = ES_CTL_EXIT_USAGE;
    return -EINVAL;
}

/* The options into v. Returns 0, -EINVAL (usage) or -ECANCELED (--help
 * shown: exit 0). */
static int verify_getopt(verify_t *v, int argc, char **argv)
{
    int c, bad;
    optind = 1;
    opterr = 0;
    while ((c = getopt_long(argc, argv, "+h", verify_opts, NULL)) != -1) {
        bad = 0;
        switch (c) {
        case 'n': bad = es_ctl_parse_long(optarg, 1, ES_CTL_MAX_ESTS, &v->nests) < 0; break;
        case 's': bad = es_ctl_parse_long(optarg, 1, 100000000, &v->steps) < 0; break;
        case 'k': bad = es_ctl_parse_long(optarg, 1, 100000, &v->cps) < 0; break;
        case 'm': v->matrix = optarg; break;
        case 'r': v->reduced = 1; break;
        case 'o': v->only = optarg; break;
        case 'p': v->pattern = optarg; break;
        case 'j': v->json = 1; break;
        case 'l': v->list = 1; break;
        case 'w': v->workdir = optarg; break;
        case 't': bad = es_ctl_parse_seconds(optarg, 1, 86400, &v->timeout) < 0; break;
        case 'D': v->digest = 0; break;
        case 'h':
            fputs(usage, stdout);
            v->rc = ES_CTL_EXIT_OK;
            return -ECANCELED;
        default:
            es_ctl_err("unknown or incomplete option \"%s\"", argv[optind - 1]);
            return verify_usage(v);
        }
        if (bad) {
            es_ctl_err("bad value \"%s\" for %s", optarg, argv[optind - 1]);
            return verify_usage(v);
        }
    }
    if (optind < argc && strcmp(argv[optind - 1], "--") != 0) {
        es_ctl_err("unexpected argument \"%s\" (the command goes after --)", argv[optind]);
        return verify_usage(v);
    }
    if (v->matrix && v->reduced) {
        es_ctl_err("--reduced is a form of the built-in matrix: not with --matrix");
        v->rc = ES_CTL_EXIT_USAGE;
        return -EINVAL;
    }
    return 0;
}

/* This program, the checksum's pattern and the command: CMD ARGS (from
 * argv + first), else the default trainer. Returns 0 or a negative errno
 * (v->rc set). */
static int verify_command(verify_t *v, int argc, char **argv, int first)
{
    ssize_t sl = readlink("/proc/self/exe", v->self, sizeof(v->self) - 1);
    if (sl <= 0) {
        es_ctl_err("cannot find this program (/proc/self/exe)");
        return -ENOENT;
    }
    v->self[sl] = '\0';
    int rerr = regcomp(&v->re, v->pattern, REG_EXTENDED);
    if (rerr) {
        regerror(rerr, &v->re, v->err, sizeof(v->err));
        es_ctl_err("bad --pattern \"%s\": %s", v->pattern, v->err);
        v->rc = ES_CTL_EXIT_USAGE;
        return -EINVAL;
    }
    v->have_re = 1;
    v->x = (vrun_ctx_t){ .self = v->self, .nests = (int)v->nests, .timeout = v->timeout,
                         .digest = v->digest, .json = v->json, .moves_avail = -1 };
    if (first < argc) {
        v->x.cmd = argv + first;
        v->x.ncmd = argc - first;
        v->x.steps = v->steps > 0 ? v->steps : 0;
        if (v->cps < 0)
            v->cps = 1;
        return 0;
    }
    if (default_trainer(v->self, v->trainer, sizeof(v->trainer)) < 0) {
        es_ctl_err("no default command (examples/train.py not found from $ES_ROOT or beside "
                   "this binary): give one after --");
        v->rc = ES_CTL_EXIT_USAGE;
        return -ENOENT;
    }
    if (v->steps < 0)
        v->steps = 200;
    if (v->cps < 0)
        v->cps = 3; /* train.py's 3 gradient buckets at its default --bucket-kb */
    snprintf(v->steps_s, sizeof(v->steps_s), "%ld", v->steps);
    int d = 0;
    v->defcmd[d++] = "python3";
    v->defcmd[d++] = v->trainer;
    v->defcmd[d++] = "--steps";
    v->defcmd[d++] = v->steps_s;
    v->defcmd[d++] = "--log-every";
    v->defcmd[d++] = "1000000";
    v->defcmd[d++] = "--deterministic-kernels";
    v->defcmd[d] = NULL;
    v->x.cmd = v->defcmd;
    v->x.ncmd = d;
    v->x.steps = v->steps;
    return 0;
}

/* The GPUs (probed; their failure matters only where they are needed)
 * and the matrix: --matrix FILE, else the built-in one. Returns 0 or a
 * negative errno (v->rc set). */
static int verify_matrix(verify_t *v)
{
    v->m = calloc(1, sizeof(*v->m));
    v->gp = calloc(ES_CTL_MAX_GPUS, sizeof(*v->gp));
    if (!v->m || !v->gp) {
        es_ctl_err("out of memory");
        return -ENOMEM;
    }
    v->probe_rc = es_ctl_gpus_probe(v->gp, ES_CTL_MAX_GPUS, &v->ngp, v->probe_err,
                                    sizeof(v->probe_err));
    if (v->matrix) {
        size_t len;
        v->mtext = read_all(v->matrix, &len);
        if (!v->mtext) {
            es_ctl_err("cannot read the matrix %s: %s", v->matrix, strerror(errno));
            v->rc = ES_CTL_EXIT_USAGE;
            return -EIO;
        }
        if (es_vmatrix_parse(v->mtext, v->matrix, v->m, v->err, sizeof(v->err)) < 0) {
            es_ctl_err("%s", v->err);
            v->rc = ES_CTL_EXIT_USAGE;
            return -EINVAL;
        }
        return 0;
    }
    if (v->probe_rc < 0) {
        es_ctl_err("%s", v->probe_err);
        return v->probe_rc;
    }
    es_vmatrix_opts_t mo = { .nests = (int)v->nests,
                             .job_steps = v->x.steps > 0 ? v->x.steps * v->cps : 0,
                             .reduced = v->reduced };
    if (es_vmatrix_builtin(v->gp, v->ngp, &mo, &v->b) < 0) {
        es_ctl_err("no GPU to build a matrix on");
        return -ENODEV;
    }
    if (es_vmatrix_parse(v->b.p, "built-in matrix", v->m, v->err, sizeof(v->err)) < 0) {
        es_ctl_err("%s", v->err);
        return -EINVAL;
    }
    return 0;
}

/* --only: keeps the named configurations, in matrix order; every name
 * must exist. Returns 0 or a negative errno (v->rc set). */
static int verify_only(verify_t *v)
{
    es_vmatrix_t *m = v->m;
    char *dup = strdup(v->only), *save = NULL;
    int keep[ES_VCFG_MAX] = { 0 }, bad = 0;
    if (!dup) {
        es_ctl_err("out of memory");
        return -ENOMEM;
    }
    for (char *t = strtok_r(dup, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        int f = 0;
        for (int i = 0; i < m->n; i++)
            if (strcmp(m->c[i].name, t) == 0)
                keep[i] = f = 1;
        if (!f) {
            es_ctl_err("--only: no configuration named \"%s\" (--list shows them)", t);
            bad = 1;
        }
    }
    free(dup);
    if (bad) {
        v->rc = ES_CTL_EXIT_USAGE;
        return -ENOENT;
    }
    int n = 0;
    for (int i = 0; i < m->n; i++) {
        if (keep[i])
            m->c[n++] = m->c[i];
        else
            es_vcfg_free(&m->c[i]);
    }
    for (int i = n; i < m->n; i++)
        memset(&m->c[i], 0, sizeof(m->c[i]));
    m->n = n;
    return 0;
}

/* Every gpus= as CUDA_VISIBLE_DEVICES, resolved before anything runs.
 * Returns 0 or a negative errno (v->rc set). */
static int verify_visible(verify_t *v)
{
    const es_vmatrix_t *m = v->m;
    v->x.visible = calloc((size_t)m->n, sizeof(char *));
    if (!v->x.visible) {
        es_ctl_err("out of memory");
        return -ENOMEM;
    }
    for (int i = 0; i < m->n; i++) {
        if (!m->c[i].gpus)
            continue;
        if (v->probe_rc < 0) {
            es_ctl_err("configuration %s: gpus= needs the GPUs: %s", m->c[i].name, v->probe_err);
            return v->probe_rc;
        }
        size_t vl = (size_t)v->ngp * 48 + 1;
        v->x.visible[i] = malloc(vl);
        if (!v->x.visible[i]) {
            es_ctl_err("out of memory");
            return -ENOMEM;
        }
        if (es_verify_gpus_visible(m->c[i].gpus, v->gp, v->ngp, v->x.visible[i], vl, v->err,
                                   sizeof(v->err)) < 0) {
            es_ctl_err("configuration %s: %s", m->c[i].name, v->err);
            v->rc = ES_CTL_EXIT_USAGE;
            return -EINVAL;
        }
    }
    return 0;
}

/* --list: the matrix as it would run. */
static void verify_list(const verify_t *v)
{
    es_ctl_buf_t l = { 0 };
    for (int i = 0; i < v->m->n; i++)
        es_vcfg_format(&v->m->c[i], &l);
    if (l.p)
        fputs(l.p, stdout);
    es_ctl_buf_free(&l);
}

/* The work directory (--workdir, else a temporary one), the results, the
 * signal handlers. Returns 0 or a negative errno. */
static int verify_prepare(verify_t *v)
{
    if (v->workdir) {
        if (mkdir(v->workdir, 0700) < 0 && errno != EEXIST) {
            es_ctl_err("cannot create --workdir %s: %s", v->workdir, strerror(errno));
            return -EIO;
        }
        snprintf(v->wd, sizeof(v->wd), "%s", v->workdir);
    } else {
        const char *tmp = getenv("TMPDIR");
        snprintf(v->wd, sizeof(v->wd), "%s/es-verify.XXXXXX", tmp && *tmp ? tmp : "/tmp");
        if (!mkdtemp(v->wd)) {
            es_ctl_err("cannot create a temporary directory: %s", strerror(errno));
            return -EIO;
        }
        v->made_dir = 1;
    }
    v->x.workdir = v->wd;
    v->res = calloc((size_t)v->m->n, sizeof(*v->res));
    if (!v->res) {
        es_ctl_err("out of memory");
        return -ENOMEM;
    }
    struct sigaction sa = { 0 };
    sa.sa_handler = on_stop;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, &v->sa_old_int);
    sigaction(SIGTERM, &sa, &v->sa_old_term);
    v->sig_set = 1;
    return 0;
}

/* Runs every configuration (until SIGINT/SIGTERM), one line each on
 * stderr. */
static void verify_run_all(verify_t *v)
{
    const es_vmatrix_t *m = v->m;
    es_vresult_t *res = v->res;
    fprintf(stderr, "verify: %d configuration%s, %ld ESTs, command:", m->n, m->n == 1 ? "" : "s",
            v->nests);
    for (int i = 0; i < v->x.ncmd; i++)
        fprintf(stderr, " %s", v->x.cmd[i]);
    fprintf(stderr, "\n");
    for (int i = 0; i < m->n && !g_stop; i++) {
        fprintf(stderr, "verify: [%d/%d] %s (%s) ...", i + 1, m->n, m->c[i].name,
                m->c[i].desc ? m->c[i].desc : "");
        fflush(stderr);
        run_config(&v->x, &m->c[i], v->x.visible[i], &v->re, &res[i]);
        if (res[i].state == ES_VRUN_OK)
            fprintf(stderr, " %.1f s, checksum %.16s%s\n", res[i].seconds, res[i].sum,
                    res[i].ndistinct > 1 ? " (ranks disagree)" : "");
        else
            fprintf(stderr, " %s\n", res[i].why);
    }
    if (g_stop)
        for (int i = 0; i < m->n; i++)
            if (!res[i].seconds && res[i].state == ES_VRUN_NOT_RUN && !res[i].why[0])
                snprintf(res[i].why, sizeof(res[i].why), "interrupted");
}

/* Explains each mismatch (and each control that differs or not) with the
 * collectives' digests of it and its level's reference. */
static void verify_explain(verify_t *v)
{
    const es_vmatrix_t *m = v->m;
    es_vresult_t *res = v->res;
    int no_digest = 0;
    for (int i = 0; i < m->n && v->x.digest; i++) {
        if (strcmp(res[i].verdict, "MISMATCH") != 0 &&
            strcmp(res[i].verdict, "SAME AS REFERENCE") != 0 &&
            strcmp(res[i].verdict, "differs (expected)") != 0)
            continue;
        int rf = -1;
        for (int k = 0; k < m->n; k++)
            if (res[k].reference && m->c[k].level == m->c[i].level)
                rf = k;
        if (rf < 0 || m->c[i].shim_none)
            continue;
        char pa[PATH_MAX], pb[PATH_MAX];
        if (snprintf(pa, sizeof(pa), "%s/%s.digest", v->wd, m->c[rf].name) >= (int)sizeof(pa) ||
            snprintf(pb, sizeof(pb), "%s/%s.digest", v->wd, m->c[i].name) >= (int)sizeof(pb))
            continue;
        struct stat st;
        if (stat(pa, &st) != 0 && stat(pb, &st) != 0) {
            no_digest++; /* this libeasyscale.so writes none */
            continue;
        }
        es_digest_explain(pa, pb, res[i].explain, sizeof(res[i].explain));
    }
    v->x.no_digest = no_digest > 0;
}

/* The judgement, its explanation and the output; the exit status into
 * v->rc. A temporary work directory of a passing matrix is removed. */
static void verify_report(verify_t *v)
{
    char summary[1024];
    int pass = es_verify_judge(v->m, v->res, summary, sizeof(summary));
    if (g_stop)
        pass = 0;
    verify_explain(v);
    if (v->json)
        print_json(&v->x, v->m, v->res, summary, pass, v->pattern);
    else
        print_table(&v->x, v->m, v->res, summary, pass);
    v->rc = pass ? ES_CTL_EXIT_OK : ES_CTL_EXIT_FAIL;
    if (v->made_dir && pass)
        nftw(v->wd, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

/* Releases what verify holds (whichever step it got to). */
static void verify_release(verify_t *v)
{
    if (v->sig_set) {
        sigaction(SIGINT, &v->sa_old_int, NULL);
        sigaction(SIGTERM, &v->sa_old_term, NULL);
    }
    if (v->have_re)
        regfree(&v->re);
    if (v->x.visible && v->m)
        for (int i = 0; i < v->m->n; i++)
            free(v->x.visible[i]);
    free(v->x.visible);
    free(v->gp);
    if (v->m)
        es_vmatrix_free(v->m);
    free(v->m);
    free(v->res);
    free(v->mtext);
    es_ctl_buf_free(&v->b);
}

int es_ctl_verify_main(int argc, char **argv)
{
    static verify_t v;
    memset(&v, 0, sizeof(v));
    v.nests = 4;
    v.steps = v.cps = -1;
    v.pattern = "checksum ([0-9a-f]+)";
    v.timeout = 600;
    v.digest = 1;
    v.probe_rc = -ENOENT;
    snprintf(v.probe_err, sizeof(v.probe_err), "no GPU probe");
    v.rc = ES_CTL_EXIT_FAIL;
    if (verify_getopt(&v, argc, argv) < 0 || verify_command(&v, argc, argv, optind) < 0)
        goto out;
    if (verify_matrix(&v) < 0 || (v.only && verify_only(&v) < 0) || verify_visible(&v) < 0)
        goto out;
    if (v.list) {
        verify_list(&v);
        v.rc = ES_CTL_EXIT_OK;
        goto out;
    }
    if (verify_prepare(&v) < 0)
        goto out;
    verify_run_all(&v);
    verify_report(&v);
out:
    verify_release(&v);
    return v.rc;
}
