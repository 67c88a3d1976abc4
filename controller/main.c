/* easyscale-ctl: the controller of an EasyScale job, one binary with
 * subcommands (run, daemon, status, scale, preempt, grant, swap-out,
 * swap-in, migrate, timeslice, gpus, verify, diff). This file: the table
 * of subcommands and main(), which looks the command up and calls its
 * *_main, the CLI verbs that send one request to a job's daemon, and gpus.
 * Exit status: 0 ok, 1 the job or command failed, 2 usage. */
#include "controller/ctl.h"
#include "controller/digest.h"
#include "controller/verify.h"

#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* ---- usage ----------------------------------------------------------------------- */

/* The usage: this head, the table's lines, the foot. */
static const char *const usage_head =
    "usage: easyscale-ctl COMMAND [OPTIONS]\n"
    "\n"
    "The controller of an EasyScale job: launches its ESTs with libeasyscale.so,\n"
    "serves their control channel, places them on GPUs, shows and changes where\n"
    "they run.\n"
    "\n"
    "commands:\n";

static const char *const usage_foot =
    "\n"
    "Every command that talks to a job takes --socket PATH (a unix socket path, or\n"
    "tcp:HOST:PORT with EASYSCALE_TOKEN set); the default is the one job's socket in\n"
    "$XDG_RUNTIME_DIR/easyscale (else /tmp/easyscale-UID).\n"
    "GPU: an ordinal or a UUID; SPEC: all, or comma-separated GPUs and ranges (0-3).\n"
    "'easyscale-ctl COMMAND --help' for a command's options.\n"
    "Exit status: 0 ok, 1 the job or the command failed, 2 usage.\n";

typedef struct verb_info {
    const char *name;
    uint32_t verb;
    int rank_arg;   /* takes RANK */
    int gpu_pos;    /* takes GPU as a positional */
    int gpu_opt;    /* takes --gpu G */
    int gpus_opt;   /* takes --gpus SPEC */
    int json;       /* takes --json */
    int timeout_s;  /* default wait for the reply */
    const char *help;
} verb_info_t;

/* The verbs' places in verbs[]. */
enum { V_STATUS, V_SCALE, V_PREEMPT, V_GRANT, V_SWAP_OUT, V_SWAP_IN, V_MIGRATE, V_TIMESLICE };

static const verb_info_t verbs[] = {
    [V_STATUS] = { "status", ES_VERB_STATUS, 0, 0, 0, 0, 1, 10,
      "usage: easyscale-ctl status [--json] [--socket PATH] [--timeout SECONDS]\n"
      "The job (ESTs, determinism, placement epoch, controller pid), each EST (rank,\n"
      "pid, GPU, step, state, step time) and each GPU (model, memory, ESTs placed,\n"
      "measured speed). An EST without heartbeat for longer than the job's bound is\n"
      "shown 'unresponsive'. --json: one JSON object.\n" },
    [V_SCALE] = { "scale", ES_VERB_SCALE, 0, 0, 0, 1, 0, 600,
      "usage: easyscale-ctl scale --gpus SPEC [--socket PATH] [--timeout SECONDS]\n"
      "Runs the job on the GPUs of SPEC: computes the new placement (ESTs in\n"
      "proportion to GPU speed, fewest moves), refuses it before anything moves when\n"
      "it cannot be met (memory), then moves the ESTs and returns when every EST has\n"
      "reached its place, printing how long it took and each EST's answer.\n" },
    [V_PREEMPT] = { "preempt", ES_VERB_PREEMPT, 0, 1, 0, 0, 0, 600,
      "usage: easyscale-ctl preempt GPU [--socket PATH] [--timeout SECONDS]\n"
      "Takes GPU (an ordinal or UUID; NODE:ORDINAL in a job across hosts) from the\n"
      "job: its ESTs move to the others (of its host).\n" },
    [V_GRANT] = { "grant", ES_VERB_GRANT, 0, 1, 0, 0, 0, 600,
      "usage: easyscale-ctl grant GPU [--socket PATH] [--timeout SECONDS]\n"
      "Gives GPU (an ordinal or UUID; NODE:ORDINAL in a job across hosts) to the\n"
      "job: ESTs (of its host) move onto it if that makes steps faster.\n" },
    [V_SWAP_OUT] = { "swap-out", ES_VERB_SWAP_OUT, 1, 0, 0, 0, 0, 600,
      "usage: easyscale-ctl swap-out RANK [--socket PATH] [--timeout SECONDS]\n"
      "Parks EST RANK's device state in host memory.\n" },
    [V_SWAP_IN] = { "swap-in", ES_VERB_SWAP_IN, 1, 0, 1, 0, 0, 600,
      "usage: easyscale-ctl swap-in RANK --gpu G [--socket PATH] [--timeout SECONDS]\n"
      "Brings swapped-out EST RANK back onto GPU G (one of the job's).\n" },
    [V_MIGRATE] = { "migrate", ES_VERB_MIGRATE, 1, 0, 1, 0, 0, 600,
      "usage: easyscale-ctl migrate RANK --gpu G [--socket PATH] [--timeout SECONDS]\n"
      "Moves EST RANK to GPU G (one of the job's).\n" },
    [V_TIMESLICE] = { "timeslice", ES_VERB_TIMESLICE, 0, 1, 0, 0, 0, 600,
      "usage: easyscale-ctl timeslice GPU [--ranks LIST] [--socket PATH] [--timeout SECONDS]\n"
      "       easyscale-ctl timeslice --off [--socket PATH] [--timeout SECONDS]\n"
      "Time-slices the running job on GPU (one of the job's): the ESTs of LIST\n"
      "(e.g. 2,3 or 0-3; default: the ESTs on GPU now, at least two) take turns on\n"
      "it, one resident at a time: at its next collective each parks in host memory,\n"
      "and comes back onto GPU in its turn (rank order); each then yields the GPU at\n"
      "every collective. Refused before anything moves when one EST beside the other\n"
      "ESTs on GPU would not fit in its memory, when the job is time-sliced already,\n"
      "or when an EST is not running. The job's other commands (scale, preempt,\n"
      "grant, migrate, swap-out, swap-in) are refused while it is time-sliced.\n"
      "--off: the ESTs leave their turns and are placed on the job's GPUs without\n"
      "time-slicing (refused when they would not fit). Returns when every EST\n"
      "answered.\n" },
};

static const char *const usage_gpus =
    "usage: easyscale-ctl gpus [--json]\n"
    "The GPUs the CUDA driver shows in this environment (ordinal, UUID, model,\n"
    "memory, SMs, clock), as the controller learns them: cuInit and cuDeviceGet*\n"
    "through libcuda.so.1, in a child process.\n";

static int usage_error(const char *help, const char *fmt, const char *arg)
{
    char msg[512];
    snprintf(msg, sizeof(msg), fmt, arg ? arg : "");
    es_ctl_err("%s", msg);
    fputs(help, stderr);
    return ES_CTL_EXIT_USAGE;
}

/* ---- the CLI verbs ------------------------------------------------------------------ */

int es_ctl_resolve_socket(const char *given, char *out, size_t len, char *err, size_t errlen)
{
    if (given) {
        if (strlen(given) >= len) {
            snprintf(err, errlen, "socket path too long");
            return -ENAMETOOLONG;
        }
        strcpy(out, given);
        return 0;
    }
    return es_ctl_find_job(out, len, err, errlen);
}

static int verb_main(const verb_info_t *v, int argc, char **argv)
{
    static const struct option opts[] = {
        { "socket", required_argument, NULL, 's' }, { "json", no_argument, NULL, 'j' },
        { "gpu", required_argument, NULL, 'g' },    { "gpus", required_argument, NULL, 'G' },
        { "timeout", required_argument, NULL, 't' }, { "help", no_argument, NULL, 'h' },
        { "ranks", required_argument, NULL, 'r' },  { "off", no_argument, NULL, 'o' },
        { NULL, 0, NULL, 0 }
    };
    const char *sock = NULL, *gpu = NULL, *gpus = NULL, *ranks = NULL;
    int json = 0, off = 0, c, rc = ES_CTL_EXIT_FAIL, reply_rc = 0;
    int ts = v->verb == ES_VERB_TIMESLICE;
    char tsarg[ES_PROTO_ARG_MAX + 2];
    double timeout = v->timeout_s;
    long rank = -1;
    char *text = NULL;
    optind = 1;
    opterr = 0;
    while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        switch (c) {
        case 's': sock = optarg; break;
        case 'j':
            if (!v->json)
                return usage_error(v->help, "%s takes no --json", v->name);
            json = 1;
            break;
        case 'g':
            if (!v->gpu_opt)
                return usage_error(v->help, "%s takes no --gpu", v->name);
            gpu = optarg;
            break;
        case 'G':
            if (!v->gpus_opt)
                return usage_error(v->help, "%s takes no --gpus", v->name);
            gpus = optarg;
            break;
        case 't':
            if (es_ctl_parse_seconds(optarg, 0.1, 86400, &timeout) < 0)
                return usage_error(v->help, "bad --timeout \"%s\" (seconds, 0.1 to 86400)", optarg);
            break;
        case 'r':
            if (!ts)
                return usage_error(v->help, "%s takes no --ranks", v->name);
            ranks = optarg;
            break;
        case 'o':
            if (!ts)
                return usage_error(v->help, "%s takes no --off", v->name);
            off = 1;
            break;
        case 'h': fputs(v->help, stdout); return ES_CTL_EXIT_OK;
        default:
            return usage_error(v->help, "unknown or incomplete option \"%s\"", argv[optind - 1]);
        }
    }
    int npos = argc - optind;
    const char *arg = "";
    if (v->rank_arg) {
        if (npos != 1)
            return usage_error(v->help, "%s takes one RANK", v->name);
        if (es_ctl_parse_long(argv[optind], 0, ES_CTL_MAX_ESTS - 1, &rank) < 0)
            return usage_error(v->help, "bad RANK \"%s\"", argv[optind]);
    } else if (ts && off) {
        if (npos != 0 || ranks)
            return usage_error(v->help, "--off takes no GPU and no --ranks", NULL);
        arg = "off";
    } else if (v->gpu_pos) {
        if (npos != 1)
            return usage_error(v->help, "%s takes one GPU", v->name);
        arg = argv[optind];
    } else if (npos != 0) {
        return usage_error(v->help, "unexpected argument \"%s\"", argv[optind]);
    }
    if (ts && !off) {
        if (ranks && (!ranks[0] || strchr(ranks, ' ')))
            return usage_error(v->help, "bad --ranks \"%s\"", ranks);
        if (snprintf(tsarg, sizeof(tsarg), "%s%s%s", arg, ranks ? " " : "", ranks ? ranks : "") >
            ES_PROTO_ARG_MAX)
            return usage_error(v->help, "argument too long", NULL);
        arg = tsarg;
    }
    if (v->gpu_opt) {
        if (!gpu)
            return usage_error(v->help, "%s needs --gpu G", v->name);
        arg = gpu;
    }
    if (v->gpus_opt) {
        if (!gpus)
            return usage_error(v->help, "%s needs --gpus SPEC", v->name);
        arg = gpus;
    }
    if (strlen(arg) > ES_PROTO_ARG_MAX)
        return usage_error(v->help, "argument too long", NULL);
    for (const char *p = arg; *p; p++)
        if (*p < 0x20 || *p >= 0x7f)
            return usage_error(v->help, "argument with a non-printable character", NULL);

    char target[4200], err[2300];
    if (es_ctl_resolve_socket(sock, target, sizeof(target), err, sizeof(err)) < 0) {
        es_ctl_err("%s", err);
        goto out;
    }
    int r = es_ctl_request(target, v->verb, (int32_t)rank, arg, json ? ES_REQ_JSON : 0,
                           (int)(timeout * 1000), &reply_rc, &text, err, sizeof(err));
    if (r < 0) {
        es_ctl_err("%s", err);
        goto out;
    }
    size_t tl = strlen(text);
    FILE *o = reply_rc == 0 ? stdout : stderr;
    if (reply_rc != 0)
        fputs("easyscale-ctl: ", o);
    fputs(text, o);
    if (tl && text[tl - 1] != '\n')
        fputc('\n', o);
    rc = reply_rc;
out:
    free(text);
    return rc;
}

static int gpus_main(int argc, char **argv)
{
    int json = 0, n = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--json") == 0)
            json = 1;
        else if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            fputs(usage_gpus, stdout);
            return ES_CTL_EXIT_OK;
        } else
            return usage_error(usage_gpus, "unexpected argument \"%s\"", argv[i]);
    }
    es_ctl_gpu_t g[ES_CTL_MAX_GPUS];
    char err[512];
    if (es_ctl_gpus_probe(g, ES_CTL_MAX_GPUS, &n, err, sizeof(err)) < 0) {
        es_ctl_err("%s", err);
        return ES_CTL_EXIT_FAIL;
    }
    es_ctl_buf_t b = { 0 };
    if (json)
        es_ctl_buf_printf(&b, "{\"gpus\":[");
    else
        es_ctl_buf_printf(&b, "%-4s %-40s %-6s %-10s %-5s %-9s %s\n", "gpu", "uuid", "model",
                          "memory", "SMs", "clock", "name");
    for (int i = 0; i < n; i++) {
        if (json) {
            es_ctl_buf_printf(&b, "%s{\"gpu\":%d,\"uuid\":", i ? "," : "", g[i].ordinal);
            es_ctl_buf_json_str(&b, g[i].uuid);
            es_ctl_buf_printf(&b, ",\"model\":");
            es_ctl_buf_json_str(&b, g[i].model);
            es_ctl_buf_printf(&b, ",\"name\":");
            es_ctl_buf_json_str(&b, g[i].name);
            es_ctl_buf_printf(&b, ",\"memory\":%llu,\"sms\":%d,\"clock_khz\":%d,\"cc\":\"%d.%d\"}",
                              (unsigned long long)g[i].mem, g[i].sms, g[i].clock_khz,
                              g[i].cc_major, g[i].cc_minor);
        } else {
            es_ctl_buf_printf(&b, "%-4d %-40s %-6s %6.1f GiB %-5d %4d MHz  %s\n", g[i].ordinal,
                              g[i].uuid, g[i].model[0] ? g[i].model : "?",
                              (double)g[i].mem / (double)(1ull << 30), g[i].sms,
                              g[i].clock_khz / 1000, g[i].name);
        }
    }
    if (json)
        es_ctl_buf_printf(&b, "]}\n");
    if (b.p)
        fputs(b.p, stdout);
    es_ctl_buf_free(&b);
    return ES_CTL_EXIT_OK;
}

/* ---- the subcommands ------------------------------------------------------------------ */

/* The verbs' mains: one request to the job's daemon each. */
static int status_main(int argc, char **argv)
{
    return verb_main(&verbs[V_STATUS], argc, argv);
}
static int scale_main(int argc, char **argv)
{
    return verb_main(&verbs[V_SCALE], argc, argv);
}
static int preempt_main(int argc, char **argv)
{
    return verb_main(&verbs[V_PREEMPT], argc, argv);
}
static int grant_main(int argc, char **argv)
{
    return verb_main(&verbs[V_GRANT], argc, argv);
}
static int swap_out_main(int argc, char **argv)
{
    return verb_main(&verbs[V_SWAP_OUT], argc, argv);
}
static int swap_in_main(int argc, char **argv)
{
    return verb_main(&verbs[V_SWAP_IN], argc, argv);
}
static int migrate_main(int argc, char **argv)
{
    return verb_main(&verbs[V_MIGRATE], argc, argv);
}
static int timeslice_main(int argc, char **argv)
{
    return verb_main(&verbs[V_TIMESLICE], argc, argv);
}

/* Each subcommand: its name, its main (argv[0] is the name), and its line
 * in the usage (synopsis and what it does), in the usage's order. */
static const struct {
    const char *name;
    int (*main)(int argc, char **argv);
    const char *help;
} subcommands[] = {
    { "run", es_ctl_run_main,
      "run --ests N [--gpus SPEC] ... -- CMD ARGS...   start a job and wait for it" },
    { "status", status_main,
      "status [--json]                 the job, its ESTs and its GPUs" },
    { "scale", scale_main,
      "scale --gpus SPEC               run the job on these GPUs" },
    { "preempt", preempt_main,
      "preempt GPU                     take a GPU from the job" },
    { "grant", grant_main,
      "grant GPU                       give a GPU to the job" },
    { "swap-out", swap_out_main,
      "swap-out RANK                   park an EST in host memory" },
    { "swap-in", swap_in_main,
      "swap-in RANK --gpu G            bring a parked EST back onto a GPU" },
    { "migrate", migrate_main,
      "migrate RANK --gpu G            move an EST to another GPU" },
    { "timeslice", timeslice_main,
      "timeslice GPU [--ranks LIST] | --off   ESTs take turns on a GPU / stop" },
    { "gpus", gpus_main,
      "gpus [--json]                   the GPUs the controller sees" },
    { "daemon", es_ctl_daemon_main,
      "daemon --socket PATH            serve a job (run starts it; also to restart one)" },
    { "verify", es_ctl_verify_main,
      "verify [OPTIONS] [-- CMD ARGS...]  run a job on many placements, compare checksums" },
    { "diff", es_ctl_diff_main,
      "diff RUN_A RUN_B                the first collective where two runs' digests differ" },
};

static void show_usage(FILE *f)
{
    fputs(usage_head, f);
    for (size_t i = 0; i < sizeof(subcommands) / sizeof(subcommands[0]); i++)
        fprintf(f, "  %s\n", subcommands[i].help);
    fputs(usage_foot, f);
}

int main(int argc, char **argv)
{
    static char *hargv[3];
    if (argc < 2) {
        show_usage(stderr);
        return ES_CTL_EXIT_USAGE;
    }
    const char *cmd = argv[1];
    if (strcmp(cmd, "--help") == 0 || strcmp(cmd, "-h") == 0 || strcmp(cmd, "help") == 0) {
        if (argc <= 2 || strcmp(cmd, "help") != 0) {
            show_usage(stdout);
            return ES_CTL_EXIT_OK;
        }
        /* help COMMAND: COMMAND --help */
        hargv[0] = argv[2];
        hargv[1] = "--help";
        argv = hargv;
        argc = 2;
        cmd = argv[0];
    } else {
        argv++;
        argc--;
    }
    for (size_t i = 0; i < sizeof(subcommands) / sizeof(subcommands[0]); i++)
        if (strcmp(cmd, subcommands[i].name) == 0)
            return subcommands[i].main(argc, argv);
    es_ctl_err("unknown command \"%s\"", cmd);
    show_usage(stderr);
    return ES_CTL_EXIT_USAGE;
}
