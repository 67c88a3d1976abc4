/* easyscale-ctl daemon: the ESTs' messages: a registration (the rank taken
 * or refused; a restarted daemon re-learns pids, slots, steps, epochs and
 * the rotation from them), heartbeats (steps, memory and where it is, the
 * measured step time per GPU model) and the answers to MOVE commands
 * (daemon_hold.c reads them). Called by daemon.c's frames. */
#include "controller/daemon_int.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

void dmn_handle_register(int i, const es_proto_msg_t *m)
{
    conn_t *c = D.conns[i];
    int r = (int)m->u.reg.rank;
    if ((int)m->u.reg.world != D.job.nests || r < 0 || r >= D.job.nests) {
        es_ctl_log("refusing a registration: rank %u of %u, but the job has %d ESTs",
                   m->u.reg.rank, m->u.reg.world, D.job.nests);
        dmn_send_error(i, -EINVAL, "this job has %d ESTs; this process says rank %u of %u",
                       D.job.nests, m->u.reg.rank, m->u.reg.world);
        return;
    }
    pid_t pid = c->tcp ? (pid_t)m->u.reg.pid : c->peer_pid;
    est_t *e = &D.ests[r];
    if (e->conn >= 0 && e->conn != i && e->pid == pid && !c->tcp) {
        /* The same process again. After an exec its old connection is
         * closed already (close-on-exec, before the new image could
         * connect): take in what is left on it, and its end. */
        int old = e->conn;
        for (int k = 0; k < 64 && D.conns[old] && e->conn == old; k++) {
            uint8_t peek;
            ssize_t n = recv(D.conns[old]->fd, &peek, 1, MSG_PEEK | MSG_DONTWAIT);
            if (n < 0)
                break; /* nothing pending: alive */
            dmn_conn_input(old);
        }
    }
    if (e->conn >= 0 && e->conn != i) {
        es_ctl_log("refusing a second registration of rank %d (pid %d; held by pid %d)", r,
                   (int)pid, (int)e->pid);
        dmn_send_error(i, -EEXIST, "rank %d is held by pid %d of this job", r, (int)e->pid);
        return;
    }
    e->seen = 1;
    e->conn = i;
    e->pid = pid;
    snprintf(e->host, sizeof(e->host), "%s", m->u.reg.host);
    snprintf(e->slot, sizeof(e->slot), "%s", m->u.reg.slot);
    e->gpu = dmn_est_gpu(r);
    e->step = m->u.reg.step;
    e->mem = m->u.reg.mem_bytes;
    e->epoch = m->u.reg.epoch;
    e->state = strcmp(e->slot, "host") == 0 ? ES_EST_SWAPPED_OUT : ES_EST_RUNNING;
    e->last_ms = es_ctl_now_ms();
    e->unresponsive = 0;
    /* a rotation re-learned (a restarted daemon): its members say so */
    e->ts = (m->u.reg.flags & ES_REG_TIME_SLICED) && e->gpu >= 0;
    if (e->ts && !dmn_ts_member(r) && D.ts.n < ES_PROTO_TS_MAX) {
        int k = D.ts.n++;
        for (; k > 0 && D.ts.ranks[k - 1] > r; k--)
            D.ts.ranks[k] = D.ts.ranks[k - 1];
        D.ts.ranks[k] = r;
        D.ts.gpu = e->gpu;
        D.ts.active = 1;
    }
    if (e->epoch > D.job.epoch) /* a restart before the job file caught up */
        D.job.epoch = e->epoch;
    c->kind = CONN_EST;
    c->rank = r;
    c->deadline = 0;
    es_proto_msg_t w = { .type = ES_MSG_WELCOME, .seq = m->seq };
    w.u.welcome.epoch = D.job.epoch;
    w.u.welcome.daemon_pid = (uint32_t)getpid();
    dmn_conn_send(i, &w);
    e->held = 0; /* heartbeats say again */
    if (D.released) { /* a release it may have missed while it reconnected */
        es_proto_msg_t rel = { .type = ES_MSG_RELEASE };
        rel.u.release.step = D.released - 1;
        dmn_conn_send(i, &rel);
    }
    int reg = 0;
    for (int k = 0; k < D.job.nests; k++)
        reg += D.ests[k].conn >= 0;
    if (reg == D.job.nests && !D.all_logged) {
        D.all_logged = 1;
        es_ctl_log("all %d ESTs registered (epoch %llu)", D.job.nests,
                   (unsigned long long)D.job.epoch);
        dmn_persist();
    }
}

void dmn_handle_heartbeat(int i, const es_proto_msg_t *m)
{
    est_t *e = &D.ests[D.conns[i]->rank];
    int64_t now = es_ctl_now_ms();
    if (e->unresponsive)
        es_ctl_log("EST %d (pid %d) answers again", D.conns[i]->rank, (int)e->pid);
    e->unresponsive = 0;
    e->step = m->u.hb.step;
    e->step_time_ns = m->u.hb.step_time_ns;
    e->wait_ns = m->u.hb.wait_ns;
    e->mem = m->u.hb.mem_bytes;
    e->epoch = m->u.hb.epoch;
    e->state = m->u.hb.state;
    e->held = m->u.hb.held;
    e->yields = m->u.hb.yields;
    e->swaps_out = m->u.hb.swaps_out;
    e->swaps_in = m->u.hb.swaps_in;
    e->bytes_out = m->u.hb.bytes_out;
    e->bytes_in = m->u.hb.bytes_in;
    e->where = m->u.hb.where;
    e->last_ms = now;
    /* Per-EST compute time on this model: the step less the time waited
     * in collectives, shared by the ESTs of the GPU. Only when the shim
     * measures the wait. */
    if (e->gpu >= 0 && m->u.hb.wait_ns && m->u.hb.step_time_ns > m->u.hb.wait_ns) {
        int k = dmn_on_gpu(e->gpu);
        uint64_t sample = (m->u.hb.step_time_ns - m->u.hb.wait_ns) / (uint64_t)(k ? k : 1);
        uint64_t *ms = dmn_measured_for(D.job.gpus[e->gpu].model, 1);
        if (ms && sample)
            *ms = *ms ? (*ms * 7 + sample) / 8 : sample;
    }
}

void dmn_handle_ack(int i, const es_proto_msg_t *m)
{
    int r = D.conns[i]->rank;
    est_t *e = &D.ests[r];
    snprintf(e->slot, sizeof(e->slot), "%s", m->u.ack.slot);
    e->gpu = dmn_est_gpu(r);
    e->state = strcmp(e->slot, "host") == 0 ? ES_EST_SWAPPED_OUT : ES_EST_RUNNING;
    e->last_ms = es_ctl_now_ms();
    if (m->u.ack.result == 0 && m->u.ack.epoch > e->epoch)
        e->epoch = m->u.ack.epoch;
    if (!D.op.active || !e->pending || e->answered || m->u.ack.epoch != D.op.epoch) {
        es_ctl_log("EST %d: answer for epoch %llu (none expected): %s", r,
                   (unsigned long long)m->u.ack.epoch,
                   m->u.ack.result ? m->u.ack.reason : "ok");
        return;
    }
    e->answered = 1;
    e->result = m->u.ack.result;
    if (e->op == ES_MOVE_HOLD_OFFER)
        e->offer = m->u.ack.step;
    /* the rotation as the ESTs answer (status shows it at once) */
    if (e->op == ES_MOVE_TS_JOIN && e->result == 0)
        e->ts = 1;
    else if (e->op == ES_MOVE_TS_LEAVE && e->result == 0)
        e->ts = 0;
    e->total_ns = m->u.ack.total_ns;
    e->bytes = m->u.ack.bytes;
    snprintf(e->reason, sizeof(e->reason), "%s",
             m->u.ack.reason[0] ? m->u.ack.reason : strerror(-m->u.ack.result));
}
