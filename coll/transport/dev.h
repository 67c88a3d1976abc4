/* What the device transport (dev.c) offers the other transport built on
 * its staging, the NCCL carrier (nccl.c): private to coll/transport/.
 *
 * The staging of a communicator under dev.c: one VMM buffer per rank on
 * its GPU, mapped by every rank (same GPU, or a peer GPU with peer
 * access): two sets of { in (C bytes), out (C bytes) }, p2p[to][2] slots
 * of Cp bytes, then `extra` bytes the caller asked for (its own use).
 * Ordering between the ranks: steps as stream memory operations on the
 * segment's words (es_devtp_order), watched by the engine's watchdog
 * thread, which also asks the owner's check hook for failures of its own
 * (an NCCL communicator's asynchronous error) and calls its on_fail hook
 * once when the communicator fails (from the watchdog thread; it may abort
 * work that waits outside the steps, such as NCCL calls on the streams).
 */
#ifndef ES_COLL_TRANSPORT_DEV_H
#define ES_COLL_TRANSPORT_DEV_H

#include "coll/coll_int.h"

/* The set-up of dev.c with `extra` bytes at the end of every rank's
 * buffer (collective; the returns of es_coll_transport_t.setup). */
int es_devtp_setup(es_comm_t *c, size_t extra);
/* The owner's state and its hooks (set after a set-up, cleared before its
 * teardown; they run in the watchdog thread and never after a call here
 * returned). on_fail: at most once, when the communicator failed. check
 * (optional): at every look while it lives, a failure of what the owner
 * carries (ncclSuccess: none; never waits): the watchdog fails the
 * communicator with it (a dead peer named where there is one). */
void es_devtp_set_ext(es_comm_t *c, void *ext, void (*on_fail)(es_comm_t *c),
                      ncclResult_t (*check)(es_comm_t *c));
void *es_devtp_ext(const es_comm_t *c);
void es_devtp_teardown(es_comm_t *c);
CUresult es_devtp_order(es_comm_t *c, const es_step_t *st, CUstream s);
CUresult es_devtp_p2p(es_comm_t *c, const es_p2p_t *ops, int n, CUstream s);

/* Rank r's staging, as mapped here. */
CUdeviceptr es_devtp_in(es_comm_t *c, int r, int set);
CUdeviceptr es_devtp_out(es_comm_t *c, int r, int set);
CUdeviceptr es_devtp_extra(es_comm_t *c, int r);

/* A device-to-device copy on s (nothing for n == 0 or dst == src). */
CUresult es_devtp_dtod(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s);
/* Copies count elements of my input to dst, scaled by my PreMulSum scalar
 * when rop is ES_RO_PREMUL. */
CUresult es_devtp_stage(CUdeviceptr dst, const void *src, size_t count, int dtype, int rop,
                        const es_premul_t *pm, CUstream s);
/* A step of one data barrier (target; 0: none), with the progress mark
 * when done. */
CUresult es_devtp_barrier(es_comm_t *c, uint64_t target, int done, CUstream s);
/* Marks on s a stretch of work that waits for other ranks outside the
 * steps (NCCL calls): begun (returns its mark in *pos) and ended. The
 * watchdog treats it as a step: a peer's death or EASYSCALE_COLL_TIMEOUT
 * while the stream is inside fails the communicator. */
CUresult es_devtp_wait_begin(es_comm_t *c, CUstream s, uint64_t *pos);
CUresult es_devtp_wait_end(es_comm_t *c, CUstream s, uint64_t pos);

#endif
