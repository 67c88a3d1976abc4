/* easyscale-ctl daemon: the operation in flight (one at a time): the MOVE
 * commands to the ESTs, their answers, the operation's end (the job's new
 * GPUs, the reply to the command waiting for it) and, when the ESTs refuse
 * a move because of their collectives' staging, a hold of the whole job
 * to make it at. Started by daemon_ops.c (dmn_op_start), checked by the
 * tick (dmn_op_check); calls daemon.c's sends and daemon_state.c. */
#include "controller/daemon_int.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static const char *const op_names[] = { "?",        "place",     "migrate",
                                        "swap-out", "swap-in",   "time-slice",
                                        "end time-slicing", "hold offer", "hold" };
_Static_assert(sizeof(op_names) / sizeof(op_names[0]) == ES_MOVE_NOPS, "a name per move op");

static double sec(uint64_t ns)
{
    return (double)ns / 1e9;
}

/* ---- operations ------------------------------------------------------------------ */

static void op_send(const int *targets, const uint32_t *ops, uint64_t step);
static void op_reply(int rc, es_ctl_buf_t *b);

/* ---- a hold of the whole job ---------------------------------------------------------
 * A move the ESTs refuse with -EXDEV (their collectives' staging is device
 * memory every EST of the job maps: docs/COLLECTIVES.md section 4) is made
 * at a hold of every EST, which the ESTs, each at its own pace, agree on in
 * two rounds: HOLD_OFFER (each stops before its next counting collective
 * and answers its index), HOLD_AT the greatest of them (each goes on to
 * that collective and holds there, its staging taken down); once every EST
 * says it is held, the refused moves again, then RELEASE. A round that
 * fails withdraws the hold, and the request fails with the reason. */

/* The operation failed only because of the staging: every EST asked
 * refused with -EXDEV, none moved. */
static int rdv_wanted(void)
{
    int n = 0;
    for (int r = 0; r < D.job.nests; r++) {
        const est_t *e = &D.ests[r];
        if (!e->pending)
            continue;
        if (!e->answered || e->result != -EXDEV)
            return 0;
        n++;
    }
    return n > 0;
}

/* Sends op (HOLD_OFFER, or HOLD_AT step) to every EST of the job; 0, or
 * -ENOTCONN (naming the EST in why) when one is not connected. */
static int rdv_send(int phase, uint32_t op, uint64_t step, char *why, size_t len)
{
    int targets[ES_CTL_MAX_ESTS];
    uint32_t ops[ES_CTL_MAX_ESTS];
    for (int r = 0; r < D.job.nests; r++) {
        if (!D.ests[r].seen || D.ests[r].conn < 0) {
            snprintf(why, len, "EST %d is not connected", r);
            return -ENOTCONN;
        }
        targets[r] = D.ests[r].gpu;
        ops[r] = op;
    }
    D.rdv.phase = phase;
    D.op.deadline_ms = es_ctl_now_ms() + D.job.move_timeout_ms;
    op_send(targets, ops, step);
    return 0;
}

/* Every EST goes on: the offers withdrawn and, once the collective was
 * chosen, the hold released (an EST may be waiting there already). */
static void rdv_release(void)
{
    es_proto_msg_t m = { .type = ES_MSG_MOVE };
    m.u.move.op = ES_MOVE_HOLD_AT;
    m.u.move.epoch = D.op.epoch;
    m.u.move.step = UINT64_MAX;
    es_proto_msg_t rel = { .type = ES_MSG_RELEASE };
    int chosen = D.rdv.phase != RDV_OFFER;
    if (chosen && D.rdv.step + 1 > D.released)
        D.released = D.rdv.step + 1;
    rel.u.release.step = D.released ? D.released - 1 : 0;
    for (int r = 0; r < D.job.nests; r++) {
        est_t *e = &D.ests[r];
        e->pending = e->answered = 0;
        if (!e->seen || e->conn < 0)
            continue;
        if (D.rdv.phase != RDV_MOVE)
            dmn_conn_send(e->conn, &m);
        if (chosen)
            dmn_conn_send(e->conn, &rel);
    }
    D.rdv.phase = RDV_NONE;
}

static void rdv_fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void rdv_fail(const char *fmt, ...)
{
    char why[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof(why), fmt, ap);
    va_end(ap);
    rdv_release();
    es_ctl_buf_t b = { 0 };
    es_ctl_buf_printf(&b, "%s: failed: the ESTs' collectives' staging is device memory, and "
                      "no hold of every EST could be set: %s; nothing moved\n", D.op.what, why);
    es_ctl_log("%s", b.p);
    op_reply(1, &b);
    es_ctl_buf_free(&b);
    memset(&D.op, 0, sizeof(D.op));
    D.op.cli = -1;
}

static void rdv_begin(void)
{
    char why[128];
    for (int r = 0; r < D.job.nests; r++) {
        est_t *e = &D.ests[r];
        D.rdv.targets[r] = e->pending ? e->target : -2;
        D.rdv.ops[r] = e->op;
        e->pending = e->answered = 0;
    }
    es_ctl_log("%s: refused while the collectives' staging is device memory: a hold of "
               "every EST first", D.op.what);
    if (rdv_send(RDV_OFFER, ES_MOVE_HOLD_OFFER, 0, why, sizeof(why)) < 0)
        rdv_fail("%s", why);
}

/* Every EST answered the round (or the time is up). */
static void rdv_answers(int64_t now)
{
    uint64_t at = 0;
    for (int r = 0; r < D.job.nests; r++) {
        est_t *e = &D.ests[r];
        if (!e->pending)
            continue;
        if (!e->answered || e->result != 0) {
            rdv_fail("EST %d: %s", r, e->answered ? e->reason : "no answer in time");
            return;
        }
        if (e->offer > at)
            at = e->offer;
        e->pending = e->answered = 0;
    }
    char why[128];
    if (D.rdv.phase == RDV_OFFER) {
        D.rdv.step = at;
        es_ctl_log("%s: every EST holds at collective %llu", D.op.what,
                   (unsigned long long)at);
        if (rdv_send(RDV_AT, ES_MOVE_HOLD_AT, at, why, sizeof(why)) < 0)
            rdv_fail("%s", why);
        return;
    }
    D.rdv.phase = RDV_HELD;
    D.rdv.deadline_ms = now + D.job.move_timeout_ms;
}

/* Waiting for every EST to say it is held at the collective. */
static void rdv_held(int64_t now)
{
    int there = 0;
    for (int r = 0; r < D.job.nests; r++)
        there += D.ests[r].held == D.rdv.step + 1;
    if (there < D.job.nests) {
        if (now >= D.rdv.deadline_ms)
            rdv_fail("%d of %d ESTs reached collective %llu within %.0f s", there,
                     D.job.nests, (unsigned long long)D.rdv.step,
                     D.job.move_timeout_ms / 1000.0);
        return;
    }
    D.rdv.phase = RDV_MOVE;
    D.op.epoch = ++D.job.epoch;
    D.op.deadline_ms = now + D.job.move_timeout_ms;
    es_ctl_log("%s: every EST held at collective %llu: epoch %llu", D.op.what,
               (unsigned long long)D.rdv.step, (unsigned long long)D.op.epoch);
    dmn_persist();
    op_send(D.rdv.targets, D.rdv.ops, 0);
}

static void op_reply(int rc, es_ctl_buf_t *b)
{
    if (D.op.cli >= 0 && D.conns[D.op.cli] && D.conns[D.op.cli]->id == D.op.cli_id)
        dmn_reply_text(D.op.cli, D.op.cli_seq, rc, b);
}

/* Finishes the operation when every EST answered or the time is up. */
void dmn_op_check(int64_t now)
{
    if (!D.op.active)
        return;
    int open = 0;
    for (int r = 0; r < D.job.nests; r++)
        if (D.ests[r].pending && !D.ests[r].answered)
            open++;
    if (open && now < D.op.deadline_ms)
        return;
    if (D.rdv.phase == RDV_OFFER || D.rdv.phase == RDV_AT) {
        rdv_answers(now);
        return;
    }
    if (D.rdv.phase == RDV_HELD) {
        rdv_held(now);
        return;
    }
    if (D.rdv.phase == RDV_NONE && rdv_wanted()) {
        rdv_begin();
        return;
    }
    es_ctl_buf_t b = { 0 };
    int failed = 0, moved = 0;
    uint64_t occupied = 0;
    for (int r = 0; r < D.job.nests; r++) {
        est_t *e = &D.ests[r];
        if (!e->pending)
            continue;
        char from[16], to[16];
        dmn_gpu_label(e->from, from, sizeof(from));
        dmn_gpu_label(e->target, to, sizeof(to));
        if (!e->answered) {
            e->result = -ETIMEDOUT;
            snprintf(e->reason, sizeof(e->reason), "no answer within %.0f s",
                     D.job.move_timeout_ms / 1000.0);
        }
        moved++;
        if (e->result == 0)
            es_ctl_buf_printf(&b, "  rank %d: %s %s -> %s: ok in %.3f s (%.1f MiB)\n", r,
                              op_names[e->op], from, to, sec(e->total_ns),
                              (double)e->bytes / (1 << 20));
        else {
            failed++;
            es_ctl_buf_printf(&b, "  rank %d: %s %s -> %s: failed: %s\n", r, op_names[e->op],
                              from, to, e->reason);
        }
        if (e->op == ES_MOVE_TS_JOIN)
            e->ts = e->result == 0;
        else if (e->op == ES_MOVE_TS_LEAVE && e->result == 0)
            e->ts = 0;
        e->pending = e->answered = 0;
    }
    if (D.op.verb == ES_VERB_TIMESLICE) {
        int members = 0;
        for (int r = 0; r < D.job.nests; r++)
            members += D.ests[r].ts;
        D.ts.active = members > 0; /* ended when every member left */
    }
    for (int r = 0; r < D.job.nests; r++)
        if (D.ests[r].gpu >= 0)
            occupied |= 1ull << D.ests[r].gpu;
    char slots[512];
    double took = (now - D.op.start_ms) / 1000.0;
    es_ctl_buf_t head = { 0 };
    /* the GPUs the operation changed; the others as they are now (another
     * node's, learnt while it ran, stay the job's) */
    uint64_t changed = D.op.old_slots ^ D.op.new_slots;
    if (!failed) {
        D.job.slots = (D.job.slots & ~changed) | (D.op.new_slots & changed);
        dmn_mask_label(D.job.slots, slots, sizeof(slots));
        es_ctl_buf_printf(&head, "%s: done in %.3f s (%d EST%s moved); the job runs on GPUs %s\n",
                          D.op.what, took, moved, moved == 1 ? "" : "s", slots);
    } else {
        /* Consistent: every EST is on one of the job's GPUs. */
        D.job.slots = (D.job.slots & ~changed) | (D.op.old_slots & changed) | occupied;
        dmn_mask_label(D.job.slots, slots, sizeof(slots));
        es_ctl_buf_printf(&head, "%s: failed after %.3f s (%d of %d move%s failed); the job "
                          "runs on GPUs %s\n", D.op.what, took, failed, moved,
                          moved == 1 ? "" : "s", slots);
    }
    es_ctl_buf_printf(&head, "%s", b.p ? b.p : "");
    if (D.rdv.phase == RDV_MOVE) {
        es_ctl_buf_printf(&head, "  (at a hold of every EST at collective %llu: the "
                          "collectives' staging is device memory)\n",
                          (unsigned long long)D.rdv.step);
        rdv_release();
    }
    es_ctl_log("%s", head.p ? head.p : "");
    dmn_persist();
    op_reply(failed ? 1 : 0, &head);
    es_ctl_buf_free(&b);
    es_ctl_buf_free(&head);
    memset(&D.op, 0, sizeof(D.op));
    D.op.cli = -1;
}

/* Starts an operation: a MOVE ops[r] to targets[r] (a GPU index, -1 host)
 * for every EST r whose target is not -2; the answers finish it
 * (dmn_op_check). */
void dmn_op_start(int cli, uint32_t seq, uint32_t verb, uint64_t new_slots, const int *targets,
                  const uint32_t *ops, const char *what)
{
    int64_t now = es_ctl_now_ms();
    memset(&D.op, 0, sizeof(D.op));
    D.op.active = 1;
    D.op.cli = cli;
    D.op.cli_seq = seq;
    D.op.cli_id = cli >= 0 && D.conns[cli] ? D.conns[cli]->id : 0;
    D.op.verb = verb;
    D.op.epoch = ++D.job.epoch;
    D.op.start_ms = now;
    D.op.deadline_ms = now + D.job.move_timeout_ms;
    D.op.old_slots = D.job.slots;
    D.op.new_slots = new_slots;
    snprintf(D.op.what, sizeof(D.op.what), "%s", what);
    if (cli >= 0 && D.conns[cli])
        D.conns[cli]->waiting = 1;
    es_ctl_log("%s: epoch %llu", what, (unsigned long long)D.op.epoch);
    dmn_persist();
    op_send(targets, ops, 0);
    dmn_op_check(now);
}

/* Sends MOVE ops[r] (step: HOLD_AT's) to every EST r whose target is not
 * -2, in D.op's epoch; their answers are pending. */
static void op_send(const int *targets, const uint32_t *ops, uint64_t step)
{
    for (int r = 0; r < D.job.nests; r++) {
        if (targets[r] == -2)
            continue;
        est_t *e = &D.ests[r];
        e->pending = 1;
        e->answered = 0;
        e->op = ops[r];
        e->from = e->gpu;
        e->target = targets[r];
        e->reason[0] = '\0';
        e->total_ns = e->bytes = 0;
        es_proto_msg_t m = { .type = ES_MSG_MOVE };
        m.u.move.op = ops[r];
        m.u.move.epoch = D.op.epoch;
        if (targets[r] >= 0)
            snprintf(m.u.move.slot, sizeof(m.u.move.slot), "%s", D.job.gpus[targets[r]].uuid);
        if (ops[r] == ES_MOVE_TS_JOIN) {
            m.u.move.nranks = (uint32_t)D.ts.n;
            for (int k = 0; k < D.ts.n; k++)
                m.u.move.ranks[k] = (uint32_t)D.ts.ranks[k];
        }
        if (ops[r] == ES_MOVE_HOLD_AT)
            m.u.move.step = step;
        dmn_conn_send(e->conn, &m);
    }
}
