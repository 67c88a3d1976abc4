/* Collective digests (EASYSCALE_DIGEST=DIR): per EST, one record per
 * collective call (call index, all-reduces before it, operation, reduction,
 * type, count, communicator rank, a hash of the input before the call and
 * of the output after it) appended to DIR/rank-RRRRR.esd in the format of
 * wire/digest.h, which `easyscale-ctl diff` compares.
 *
 * The hashes are computed on the device by the shim's kernel
 * (kernels/digest.h) on the operation's stream: the input's before the
 * operation's work, the output's after it, into a slot of device memory
 * that is then copied to pinned host memory; a host function enqueued on
 * the stream after the copy writes the record (one write(2), O_APPEND). So
 * the host never reads device memory, nothing waits in the calling thread,
 * and each hash is one pass over its buffer. Any failure turns the digests
 * off for the process with one warning; the collectives never fail because
 * of them.
 *
 * Called by the collective engine with the operations' context current,
 * under the communicator's lock; takes the digests' own lock (an opt-in
 * diagnostic path, off by default, costs a lock per batch). */
#ifndef ES_COLL_DIGEST_H
#define ES_COLL_DIGEST_H

#include <cuda.h>
#include <nccl.h>
#include <stddef.h>
#include <stdint.h>

#define ES_DIGEST_BATCH_MAX 128 /* operations of one batch (a group) recorded */

/* One operation as the digest records it. */
typedef struct es_digest_op {
    uint32_t op;          /* ES_DIGEST_* (wire/digest.h) */
    uint32_t redop;       /* ncclRedOp_t */
    uint32_t dtype;       /* ncclDataType_t */
    uint64_t count;       /* as the application gave it */
    CUdeviceptr in;       /* hashed before the operation (in_bytes 0: nothing) */
    size_t in_bytes;
    CUdeviceptr out;      /* hashed after it (out_bytes 0: nothing) */
    size_t out_bytes;
} es_digest_op_t;

typedef struct es_digest_batch {
    int n;
    int parked;  /* >= 0: the virtual device of a parked EST (hashed on the host) */
    int slot[ES_DIGEST_BATCH_MAX];
} es_digest_batch_t;

/* Whether digests are being written (EASYSCALE_DIGEST set, not turned off
 * by a failure). One load. */
int es_digest_enabled(void);

/* Fills d for a collective of NCCL's arguments: kind ES_DIGEST_*, the
 * buffers the operation reads and writes on this rank (broadcast: the input
 * at the root only; reduce: the output at the root only; all-gather: the
 * output is nranks * count; reduce-scatter: the input is nranks * count;
 * send: input only; recv: output only). Returns 0, or -EINVAL for an
 * unknown kind or datatype. */
int es_digest_op_init(es_digest_op_t *d, uint32_t kind, const void *send, void *recv,
                       size_t count, int dtype, int redop, int root, int rank, int nranks);

/* Before the operations of a batch on stream s: reserves their records
 * (call indices in this order) and enqueues their input hashes. comm
 * identifies the communicator (its index in the digest is the order in
 * which communicators first appear); virtual_coll: served by the shim's
 * virtual collectives (else NCCL's own; the file's header says which). */
void es_digest_begin(es_digest_batch_t *b, const void *comm, int rank, int nranks,
                     const es_digest_op_t *ops, int n, int virtual_coll, CUstream s);

/* After the batch's work on s: enqueues the output hashes, the copy of the
 * hashes to the host and the writing of the records. */
void es_digest_end(es_digest_batch_t *b, CUstream s);

/* The same for a time-sliced EST whose collective takes place while it is
 * parked (docs/MOVING.md, section 6): its thread makes no driver call, so
 * the buffers are read from its host copies (es_swap_park_read) and hashed
 * on the host with the kernel's formula; the records are written at
 * es_digest_end_parked. The values equal the device's for the same bytes. */
void es_digest_begin_parked(es_digest_batch_t *b, int vdev, const void *comm, int rank,
                            int nranks, const es_digest_op_t *ops, int n);
void es_digest_end_parked(es_digest_batch_t *b);

/* The digest hash of nbytes of host memory (the kernel's formula; for
 * tests and the parked path). */
uint64_t es_digest_host_hash(const void *p, size_t nbytes);

/* The batch's operations were not enqueued after all: its records are
 * dropped (call indices stay used). */
void es_digest_cancel(es_digest_batch_t *b);

/* NCCL's own collectives (the shim's pass-through path): whether the
 * wrapper of the list entry idx (ES_IDX_nccl*) digests (all-reduce,
 * broadcast, reduce, all-gather, reduce-scatter, send, recv), and the call
 * itself with its digest: the wrapper's arguments after idx. Calls inside
 * a group (es_digest_nccl_group, +1 at ncclGroupStart, -1 at ncclGroupEnd,
 * per thread) are passed through without a record: NCCL runs them at
 * ncclGroupEnd. */
int es_digest_nccl_digested(int idx);
ncclResult_t es_digest_nccl_pass(int idx, ...);
void es_digest_nccl_group(int delta);

#endif
