/* easyscale-ctl run's schedule and progress (run_int.h): parses --schedule
 * (its events, and the steps the ESTs wait at), asks the daemon for the
 * job's progress and shows it, sends each event once it is due, one at a
 * time and without blocking (an event whose answer a dying daemon took is
 * sent again to the next daemon), and releases the step the ESTs wait at
 * once its events are done. Called by run.c (the schedule's parsing) and
 * the event loop (run_loop.c: a round of progress and of the schedule);
 * calls run_out.c (messages, the progress line). */
#include "controller/run_int.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>

/* ---- schedule ---------------------------------------------------------------------- */

/* The steps the ESTs wait at: each step event's, ascending (a step event
 * before one of a smaller step could never be done at its step). */
static int schedule_holds(const char *path, char *err, size_t errlen)
{
    size_t o = 0;
    const event_t *last = NULL;
    R.hold_steps[0] = '\0';
    for (int i = 0; i < R.nev; i++) {
        const event_t *e = &R.ev[i];
        if (!e->by_step)
            continue;
        if (last && e->step < last->step) {
            snprintf(err, errlen, "%s: step events must be in ascending order (\"%s\" comes "
                     "after \"%s\")", path, e->text, last->text);
            return -EINVAL;
        }
        if (!last || e->step != last->step) {
            int w = snprintf(R.hold_steps + o, sizeof(R.hold_steps) - o, "%s%llu", o ? "," : "",
                             (unsigned long long)e->step);
            if (w < 0 || (size_t)w >= sizeof(R.hold_steps) - o) {
                snprintf(err, errlen, "%s: too many distinct steps", path);
                return -EINVAL;
            }
            o += (size_t)w;
        }
        last = e;
    }
    return 0;
}

/* A verb of the schedule: its protocol verb and how many tokens its line
 * has. Returns 0 or -EINVAL. */
static int schedule_verb(char **tok, int nt, uint32_t *verb, int *want)
{
    static const struct {
        const char *name;
        uint32_t verb;
        int want;
    } verbs[] = {
        { "scale", ES_VERB_SCALE, 4 },       { "preempt", ES_VERB_PREEMPT, 4 },
        { "grant", ES_VERB_GRANT, 4 },       { "swap-out", ES_VERB_SWAP_OUT, 4 },
        { "swap-in", ES_VERB_SWAP_IN, 5 },   { "migrate", ES_VERB_MIGRATE, 5 },
    };
    if (strcmp(tok[2], "timeslice") == 0) {
        *verb = ES_VERB_TIMESLICE;
        *want = nt == 5 && strcmp(tok[3], "off") != 0 ? 5 : 4;
        return 0;
    }
    for (size_t i = 0; i < sizeof(verbs) / sizeof(verbs[0]); i++)
        if (strcmp(tok[2], verbs[i].name) == 0) {
            *verb = verbs[i].verb;
            *want = verbs[i].want;
            return 0;
        }
    return -EINVAL;
}

/* One event from a line's tokens ('step N|time SECONDS VERB ARGS').
 * Returns 0 or -EINVAL. */
static int schedule_event(char **tok, int nt, event_t *e)
{
    int want;
    long v;
    memset(e, 0, sizeof(*e));
    e->rank = -1;
    if (nt < 3)
        return -EINVAL;
    if (strcmp(tok[0], "step") == 0) {
        e->by_step = 1;
        if (es_ctl_parse_long(tok[1], 0, LONG_MAX, &v) < 0)
            return -EINVAL;
        e->step = (uint64_t)v;
    } else if (strcmp(tok[0], "time") != 0 || es_ctl_parse_seconds(tok[1], 0, 1e7, &e->time_s) < 0) {
        return -EINVAL;
    }
    if (schedule_verb(tok, nt, &e->verb, &want) < 0 || nt != want)
        return -EINVAL;
    if (e->verb == ES_VERB_TIMESLICE) {
        /* "GPU", "GPU RANKS" or "off": the daemon checks GPU and RANKS */
        if (strlen(tok[3]) + (nt == 5 ? 1 + strlen(tok[4]) : 0) > ES_PROTO_ARG_MAX)
            return -EINVAL;
        snprintf(e->arg, sizeof(e->arg), "%s%s%s", tok[3], nt == 5 ? " " : "",
                 nt == 5 ? tok[4] : "");
    } else if (e->verb == ES_VERB_SWAP_OUT || e->verb == ES_VERB_SWAP_IN ||
               e->verb == ES_VERB_MIGRATE) {
        if (es_ctl_parse_long(tok[3], 0, R.world - 1, &v) < 0) /* the job's ranks, every host's */
            return -EINVAL;
        e->rank = (int32_t)v;
        if (want == 5)
            snprintf(e->arg, sizeof(e->arg), "%s", tok[4]);
    } else {
        if (strlen(tok[3]) > ES_PROTO_ARG_MAX)
            return -EINVAL;
        snprintf(e->arg, sizeof(e->arg), "%s", tok[3]);
    }
    size_t o = 0;
    for (int k = 0; k < nt && o < sizeof(e->text); k++) {
        int w = snprintf(e->text + o, sizeof(e->text) - o, "%s%s", k ? " " : "", tok[k]);
        if (w > 0)
            o += (size_t)w;
    }
    return 0;
}

int run_parse_schedule(const char *path, char *err, size_t errlen)
{
    FILE *f = fopen(path, "re");
    char line[1024];
    int lineno = 0, rc = 0;
    if (!f) {
        snprintf(err, errlen, "cannot read the schedule %s: %s", path, strerror(errno));
        return -errno;
    }
    while (fgets(line, sizeof(line), f)) {
        lineno++;
        char *hash = strchr(line, '#');
        if (hash)
            *hash = '\0';
        char *tok[8], *save = NULL;
        int nt = 0;
        for (char *t = strtok_r(line, " \t\r\n", &save); t; t = strtok_r(NULL, " \t\r\n", &save)) {
            if (nt == 8) {
                nt = 9;
                break;
            }
            tok[nt++] = t;
        }
        if (nt == 0)
            continue;
        if (R.nev >= MAX_EVENTS) {
            snprintf(err, errlen, "%s:%d: more than %d events", path, lineno, MAX_EVENTS);
            rc = -EINVAL;
            goto out;
        }
        if (schedule_event(tok, nt, &R.ev[R.nev]) < 0) {
            snprintf(err, errlen, "%s:%d: expected 'step N|time SECONDS' then scale SPEC, "
                     "preempt GPU, grant GPU, swap-out RANK, swap-in RANK GPU, migrate RANK GPU, "
                     "timeslice GPU [RANKS] or timeslice off (RANK < %d)",
                     path, lineno, R.world);
            rc = -EINVAL;
            goto out;
        }
        R.nev++;
    }
    rc = schedule_holds(path, err, errlen);
out:
    fclose(f);
    return rc;
}

/* ---- requests to the daemon without blocking ----------------------------------------- */

/* A request to the job's daemon (R.sock; over TCP with R.token). */
static int ac_start(es_ctl_areq_t *a, uint32_t verb, int32_t rank, const char *arg, uint32_t flags,
                    int timeout_ms)
{
    return es_ctl_areq_start(a, R.sock, R.token[0] ? R.token : NULL, verb, rank, arg, flags,
                             timeout_ms);
}

/* ---- progress and schedule ----------------------------------------------------------- */

static void progress_update(const char *t, size_t len)
{
    char buf[2048];
    unsigned long long mn, mx;
    int reg, n, unresp, held;
    if (len >= sizeof(buf))
        len = sizeof(buf) - 1;
    memcpy(buf, t, len);
    buf[len] = '\0';
    char *pl = strstr(buf, "\nplacement");
    if (R.prog_gen != R.daemon_gen ||
        sscanf(buf, "steps %llu %llu %d %d %d %d", &mn, &mx, &reg, &n, &unresp, &held) != 6 ||
        !pl)
        return;
    R.daemon_served = 1;
    if (reg == n)
        R.all_registered = 1;
    R.step_max = mx;
    char *nl = strchr(pl + 1, '\n');
    if (nl)
        *nl = '\0';
    const char *place = pl + strlen("\nplacement");
    while (*place == ' ')
        place++;
    int64_t now = es_ctl_now_ms();
    if (!R.have_progress || mn < R.last_rate_step) {
        R.last_rate_step = mn;
        R.last_rate_ms = now;
    } else if (now - R.last_rate_ms >= 1000) {
        R.rate = (double)(mn - R.last_rate_step) * 1000.0 / (double)(now - R.last_rate_ms);
        R.last_rate_step = mn;
        R.last_rate_ms = now;
    }
    int changed = R.have_progress && strcmp(place, R.placement) != 0;
    R.have_progress = 1;
    R.step_min = mn;
    snprintf(R.placement, sizeof(R.placement), "%s", place);
    if (snprintf(R.line, sizeof(R.line), "step %llu (%.1f steps/s) | %d/%d ESTs%s | %s", mn,
                 R.rate, reg, n, unresp ? " | some unresponsive" : "", R.placement) < 0)
        R.line[0] = '\0';
    if (R.progress_mode == 1) {
        run_progress_clear();
        run_progress_show();
    } else if (R.progress_mode == 2 &&
               (changed || (R.progress_every > 0 && now - R.last_plain_ms >= R.progress_every * 1000))) {
        R.last_plain_ms = now;
        run_say("%s", R.line);
    }
}

static int event_due(const event_t *e, int64_t now)
{
    if (!R.all_registered)
        return 0;
    if (e->by_step)
        return R.have_progress && R.step_min >= e->step;
    return now - R.start_ms >= (int64_t)(e->time_s * 1000);
}

/* What the schedule's request in flight is. */
enum { SCHED_NONE = 0, SCHED_EVENT, SCHED_RELEASE };
static int g_sched_kind;
static unsigned g_sched_gen; /* the daemon generation it went to */

/* An event's answer, or none: the next event, and the release of its step
 * when it was the step's last event. */
static void event_done(event_t *e, int r, int rrc, const char *t, size_t tl)
{
    if (r == 1) {
        char txt[4096];
        size_t l = tl < sizeof(txt) - 1 ? tl : sizeof(txt) - 1;
        memcpy(txt, t, l);
        txt[l] = '\0';
        while (l && txt[l - 1] == '\n')
            txt[--l] = '\0';
        run_say("schedule: %s: %s", e->text, txt);
        if (rrc != 0) {
            R.ev_failed++;
        } else if (e->by_step && R.step_max > e->step) {
            run_say("schedule: %s: not at its step: an EST was at step %llu (its wait at step %llu "
                    "timed out, see --hold-timeout)", e->text, (unsigned long long)R.step_max,
                    (unsigned long long)e->step);
            R.ev_failed++;
        }
    } else {
        run_say("schedule: %s: no answer from the controller (%s)", e->text, es_proto_strerror(r));
        R.ev_failed++;
    }
    R.next_ev++;
    const event_t *n = R.next_ev < R.nev ? &R.ev[R.next_ev] : NULL;
    if (e->by_step && !(n && n->by_step && n->step == e->step)) {
        R.rel_step = e->step + 1;
        R.rel_sent = 0;
    }
}

/* The answer to the request in flight. Returns 1 when an event ended. */
static int schedule_answer(es_ctl_areq_t *a)
{
    int rrc = 0;
    const char *t = NULL;
    size_t tl = 0;
    int r = es_ctl_areq_poll(a, &rrc, &t, &tl);
    if (r == 0)
        return 0;
    es_ctl_areq_close(a);
    if (g_sched_kind == SCHED_RELEASE) {
        if (r == 1 && rrc == 0)
            R.rel_sent = g_sched_gen == R.daemon_gen;
        else if (r == 1)
            run_say("schedule: release of step %llu refused (%.*s)",
                    (unsigned long long)(R.rel_step - 1), (int)tl, t); /* again next round */
        g_sched_kind = SCHED_NONE;
        return 0;
    }
    g_sched_kind = SCHED_NONE;
    event_t *e = &R.ev[R.next_ev];
    if (r < 0 && r != -ETIMEDOUT && e->tries < EVENT_TRIES) {
        /* the daemon died with it: the restarted one gets it as a desired state */
        e->tries++;
        run_say("schedule: %s: no answer from the controller (%s); sending it again once the "
                "ESTs have registered with the next one", e->text, es_proto_strerror(r));
        if (R.daemon_gen == g_sched_gen)
            R.all_registered = 0; /* the daemon may not be reaped yet: wait for its successor */
        return 0;
    }
    event_done(e, r, rrc, t, tl);
    return 1;
}

/* One round of the schedule: the answer in flight, else the release of a
 * step whose events are done, else the next event when it is due. Returns
 * 1 when an event ended. */
int run_schedule_round(es_ctl_areq_t *a, int running, int move_timeout_ms)
{
    if (a->fd >= 0)
        return schedule_answer(a);
    if (!running || R.daemon <= 0 || !R.all_registered)
        return 0;
    char arg[32];
    if (R.rel_step && !R.rel_sent) {
        snprintf(arg, sizeof(arg), "%llu", (unsigned long long)(R.rel_step - 1));
        if (ac_start(a, ES_VERB_RELEASE, -1, arg, 0, 10000) < 0) {
            es_ctl_areq_close(a); /* the daemon restarting: again next round */
            return 0;
        }
        g_sched_kind = SCHED_RELEASE;
        g_sched_gen = R.daemon_gen;
        return 0;
    }
    if (R.next_ev >= R.nev || !event_due(&R.ev[R.next_ev], es_ctl_now_ms()))
        return 0;
    event_t *e = &R.ev[R.next_ev];
    if (ac_start(a, e->verb, e->rank, e->arg, e->tries ? ES_REQ_AGAIN : 0,
                 move_timeout_ms + 30000) < 0) {
        es_ctl_areq_close(a);
        return 0;
    }
    g_sched_kind = SCHED_EVENT;
    g_sched_gen = R.daemon_gen;
    return 0;
}

/* The progress request: its answer, or the next one when it is time. */
void run_loop_progress(run_loop_t *l, int64_t now)
{
    if (l->prog.fd >= 0) {
        int rrc;
        const char *t;
        size_t tl;
        int r = es_ctl_areq_poll(&l->prog, &rrc, &t, &tl);
        if (r == 1)
            progress_update(t, tl);
        if (r != 0)
            es_ctl_areq_close(&l->prog);
    } else if (now >= l->next_progress && R.daemon > 0 && l->live > 0) {
        /* a pending scheduled step is watched more closely */
        l->next_progress = now + (R.next_ev < R.nev ? 100 : 1000);
        R.prog_gen = R.daemon_gen;
        ac_start(&l->prog, ES_VERB_PROGRESS, -1, NULL, 0, 5000);
    }
}
