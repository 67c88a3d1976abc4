/* easyscale-ctl run's event loop (run_int.h): waits for the ESTs' output,
 * a signal or the daemon's answers, then takes a round of each: the
 * children (run_ests.c), the node link of a job across hosts (this node's
 * reports, and the job's state from node 0's daemon: here, with the
 * link's start), progress and the schedule (run_sched.c); it ends once
 * every EST has ended and its output is drained, and reports how the job
 * went. Called by run.c (its steps); calls run_ests.c, run_sched.c and
 * run_out.c (the ESTs' output, messages). */
#include "controller/run_int.h"

#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

/* ---- run's event loop ---------------------------------------------------------------------- */

static int node_linger(run_loop_t *l, int64_t now);

/* The ESTs' open pipes into l->pf. Returns how many. */
static int loop_pipes(run_loop_t *l)
{
    int k = 0;
    for (int r = 0; r < R.n; r++)
        for (int s = 0; s < 2; s++)
            if (R.e[r].out[s].fd >= 0) {
                l->pf[k] = (struct pollfd){ .fd = R.e[r].out[s].fd, .events = POLLIN };
                l->who[k++] = r * 2 + s;
            }
    return k;
}

/* What the ESTs left running writes no more: the rest of each pipe is
 * shown and the pipe closed. */
static void cut_pipes(void)
{
    for (int r = 0; r < R.n; r++)
        for (int s = 0; s < 2; s++)
            if (R.e[r].out[s].fd >= 0) {
                outpipe_t *o = &R.e[r].out[s];
                if (o->len)
                    run_emit_line(r, o->to, o->buf, o->len);
                o->len = 0;
                close(o->fd);
                o->fd = -1;
            }
}

/* Waits (at most 250 ms) for output, a signal or an answer, and takes
 * the output. Returns 1, or 0 when the loop ends: every EST has ended
 * and its pipes are closed (or cut off after 2 s), or poll failed. */
static int loop_wait(run_loop_t *l)
{
    int k = loop_pipes(l);
    /* every EST has ended: what they left running (a background child
     * holding the pipe) gets 2 s to finish writing, then is cut off */
    if (l->live == 0 && k > 0 && !l->drain_until)
        l->drain_until = es_ctl_now_ms() + 2000;
    if (l->live == 0 && k > 0 && es_ctl_now_ms() > l->drain_until) {
        cut_pipes();
        k = 0;
    }
    if (l->live == 0 && k == 0 && !node_linger(l, es_ctl_now_ms()))
        return 0;
    l->pf[k] = (struct pollfd){ .fd = run_selfpipe[0], .events = POLLIN };
    l->who[k++] = -1;
    if (l->prog.fd >= 0) {
        l->pf[k] = (struct pollfd){ .fd = l->prog.fd, .events = POLLIN };
        l->who[k++] = -2;
    }
    if (l->sched.fd >= 0) {
        l->pf[k] = (struct pollfd){ .fd = l->sched.fd, .events = POLLIN };
        l->who[k++] = -3;
    }
    if (R.nnodes > 1 && es_ctl_nlink_fd(&R.nlink) >= 0) {
        l->pf[k] = (struct pollfd){ .fd = es_ctl_nlink_fd(&R.nlink), .events = POLLIN };
        l->who[k++] = -4;
    }
    int np = poll(l->pf, (nfds_t)k, 250);
    if (np < 0 && errno != EINTR)
        return 0;
    for (int j = 0; np > 0 && j < k; j++) {
        if (!l->pf[j].revents)
            continue;
        if (l->who[j] >= 0) {
            int r = l->who[j] / 2;
            run_pipe_input(r, &R.e[r].out[l->who[j] % 2]);
        } else if (l->who[j] == -1) {
            char sink[64];
            while (read(run_selfpipe[0], sink, sizeof(sink)) > 0)
                ;
        }
    }
    return 1;
}

/* A job across hosts: this node's link to the daemon (node 0: over its own
 * socket; it restarts the daemon, so its link never gives up), reporting
 * this host's GPUs as "model:MiB,..." (at most 100 characters: with the
 * host name and a GPU's description a report fits the protocol's 255),
 * and, from node 1 on, each GPU in turn (the daemon moves the node's ESTs
 * between them). */
void run_start_node_link(run_ctx_t *x)
{
    char gpus[101] = "";
    size_t o = 0;
    for (int g = 0; g < x->job.ngpus; g++) {
        const es_ctl_gpu_t *d = &x->job.gpus[g];
        if (!(x->job.slots & (1ull << g)))
            continue;
        int k = snprintf(gpus + o, sizeof(gpus) - o, "%s%s:%llu", o ? "," : "",
                         d->model[0] ? d->model : "gpu", (unsigned long long)(d->mem >> 20));
        if (k < 0 || (size_t)k >= sizeof(gpus) - o) {
            gpus[o] = '\0'; /* the list ends at its last whole GPU */
            break;
        }
        o += (size_t)k;
    }
    es_ctl_nlink_init(&R.nlink, R.sock, R.token, R.node, R.host, gpus[0] ? gpus : "-",
                      R.node > 0 ? x->job.hb_timeout_ms : 0, es_ctl_now_ms());
    for (int g = 0; R.node > 0 && g < x->job.ngpus; g++)
        (void)es_ctl_nlink_add_gpu(&R.nlink, g, x->job.ngpus, &x->job.gpus[g],
                                   !!(x->job.slots & (1ull << g)));
}

/* A job across hosts: this node's state into its reports (a failed EST,
 * a stop, every EST done), and the job's from the answers: when it failed
 * elsewhere (or node 0 cannot be reached) the ESTs here are stopped. */
static void loop_node(run_loop_t *l, int64_t now)
{
    es_ctl_nlink_t *nl = &R.nlink;
    char why[200];
    if (l->failed_rank >= 0 && nl->state != ES_NODE_FAILED) {
        int r = l->failed_rank, st = l->fail_status;
        if (WIFSIGNALED(st))
            snprintf(why, sizeof(why), "EST %d (pid %d) was killed by signal %d", R.base + r,
                     (int)R.e[r].pid, WTERMSIG(st));
        else
            snprintf(why, sizeof(why), "EST %d (pid %d) exited with status %d", R.base + r,
                     (int)R.e[r].pid, WEXITSTATUS(st));
        es_ctl_nlink_set(nl, ES_NODE_FAILED, why);
    } else if (l->failed_rank == -2 && nl->state != ES_NODE_FAILED) {
        es_ctl_nlink_set(nl, ES_NODE_FAILED, "its run was stopped by a signal");
    } else if (l->failed_rank == -3 && l->live == 0 && nl->state == ES_NODE_RUNNING) {
        /* its ESTs stopped for the job's failure elsewhere: this node ended too */
        es_ctl_nlink_set(nl, ES_NODE_FAILED, "its ESTs were stopped (the job failed elsewhere)");
    } else if (l->live == 0 && l->failed_rank == -1 && nl->state == ES_NODE_RUNNING) {
        es_ctl_nlink_set(nl, ES_NODE_DONE, NULL);
    }
    if (!es_ctl_nlink_step(nl, now) || nl->job != ES_NODE_FAILED || l->failed_rank != -1)
        return;
    l->failed_rank = -3; /* the job failed elsewhere */
    if (l->live > 0 && !l->stopping) {
        run_say("the job failed: %s; stopping the ESTs", nl->job_reason);
        l->stopping = 1;
        l->stop_at = now + STOP_GRACE_MS;
        run_stop_ests(SIGTERM);
    }
}

/* Whether the loop goes on after this node's ESTs ended (a job across
 * hosts): node R until its last report is answered (or the link is given
 * up); node 0, whose daemon tells the others, until every node ended (the
 * daemon fails a silent one), or the daemon has not answered for the
 * heartbeat timeout. */
static int node_linger(run_loop_t *l, int64_t now)
{
    es_ctl_nlink_t *nl = &R.nlink;
    if (R.nnodes <= 1 || nl->lost)
        return 0;
    loop_node(l, now);
    if (R.node > 0)
        return !nl->told && !nl->lost;
    if (nl->told && nl->ended >= nl->n)
        return 0;
    return now - nl->last_ok_ms <= R.hb_timeout_ms;
}

/* The loop: output, children, progress, schedule, until every EST has
 * ended. Returns 0 or -ENOMEM. */
int run_loop(run_ctx_t *x, run_loop_t *l)
{
    *l = (run_loop_t){ .prog = { .fd = -1 }, .sched = { .fd = -1 }, .live = R.n,
                       .failed_rank = -1 };
    l->pf = calloc((size_t)(2 * R.n + 4), sizeof(*l->pf));
    l->who = calloc((size_t)(2 * R.n + 4), sizeof(int));
    if (!l->pf || !l->who) {
        es_ctl_err("out of memory");
        free(l->pf);
        free(l->who);
        return -ENOMEM;
    }
    while (loop_wait(l)) {
        int64_t now = es_ctl_now_ms();
        run_loop_children(l, now);
        if (R.nnodes > 1)
            loop_node(l, now);
        run_loop_progress(l, now);
        if (run_schedule_round(&l->sched, l->live > 0 && !l->stopping, x->job.move_timeout_ms))
            l->next_progress = 0; /* show the new placement soon */
    }
    free(l->pf);
    free(l->who);
    es_ctl_areq_close(&l->prog);
    es_ctl_areq_close(&l->sched);
    es_ctl_areq_free(&l->prog);
    es_ctl_areq_free(&l->sched);
    run_progress_clear();
    return 0;
}

/* The job's end: how it went, and the exit status into x->rc. */
void run_report(run_ctx_t *x, const run_loop_t *l)
{
    double took = (es_ctl_now_ms() - R.start_ms) / 1000.0;
    int fr = l->failed_rank, st = l->fail_status;
    if (fr == -3) {
        es_ctl_err("the job failed after %.1f s: %s", took, R.nlink.job_reason);
    } else if (fr == -2) {
        es_ctl_err("the job was stopped after %.1f s", took);
    } else if (fr >= 0) {
        if (WIFSIGNALED(st))
            es_ctl_err("the job failed after %.1f s: EST %d (pid %d) was killed by signal %d",
                       took, R.base + fr, (int)R.e[fr].pid, WTERMSIG(st));
        else
            es_ctl_err("the job failed after %.1f s: EST %d (pid %d) exited with status %d", took,
                       R.base + fr, (int)R.e[fr].pid, WEXITSTATUS(st));
    } else {
        if (R.next_ev < R.nev) {
            es_ctl_err("schedule: %d of %d events did not happen (the job ended first)",
                       R.nev - R.next_ev, R.nev);
            R.ev_failed += R.nev - R.next_ev;
        }
        if (R.ev_failed) {
            es_ctl_err("the ESTs completed in %.1f s, but %d scheduled event%s failed", took,
                       R.ev_failed, R.ev_failed == 1 ? "" : "s");
        } else {
            if (R.nnodes > 1)
                es_ctl_err("the job completed in %.1f s: the %d ESTs of this host (node %d of "
                           "%d, %d ESTs in all) exited with status 0", took, R.n, R.node,
                           R.nnodes, R.world);
            else
                es_ctl_err("the job completed in %.1f s: %d EST%s exited with status 0", took,
                           R.n, R.n == 1 ? "" : "s");
            x->rc = ES_CTL_EXIT_OK;
        }
    }
}
