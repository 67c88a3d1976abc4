/* Private to the files of a communicator across hosts: xhost.c (the
 * levels above a host over NCCL, on the GPUs, and what both ways share),
 * xhost_mem.c (the same levels in host memory, for time-sliced ESTs) and
 * xsock.c (the links between the hosts' leaders that xhost_mem.c uses).
 * Nothing else includes it. */
#ifndef ES_COLL_XHOST_INT_H
#define ES_COLL_XHOST_INT_H

#include "coll/coll_int.h"
#include "wire/xhost.h"

#define ES_XH_REAL_ID_BYTES 104 /* what of the leaders' id the unique id carries */
_Static_assert(ES_XH_REAL_ID_BYTES <= sizeof(((es_coll_id_t *)0)->pad), "the id's room");
_Static_assert(sizeof(es_xw_addr_t) <= sizeof(((es_coll_id_t *)0)->pad), "the id's room");

typedef struct es_xs es_xs_t;

struct es_xhost {
    int rank, nranks;       /* global */
    int host, nhosts, k;    /* this host, the hosts, ranks per host */
    int lrank;              /* local rank (the engine's) */
    /* this rank's carrier across hosts: a real NCCL communicator of the
     * ranks of its local rank s on every host (stripe s; s = 0: the
     * hosts' leaders), and its id */
    ncclUniqueId cc_id;
    ncclComm_t cc;
    CUdeviceptr tmp;        /* scratch: three chunks (the partial, the folded input, avg) */
    size_t tmp_bytes;
    CUdeviceptr out;        /* reduce, reduce-scatter: the whole result (every rank) */
    size_t out_bytes;
    CUdeviceptr pre;        /* PreMulSum: this rank's input scaled (every rank) */
    size_t pre_bytes;
    int live;               /* counted in the moves' gate (the NCCL way only) */
    /* in host memory (ES_COLL_ID_MAGIC_XM) instead: no NCCL, no stripes */
    int mem;
    es_xw_addr_t addr;      /* host 0's leader's, from the id */
    es_xs_t *xs;            /* leaders: the links (host 0: to every host; others: to host 0) */
    uint64_t nop;           /* operations run so far (every rank alike): the messages' tags */
    char *hb[3];            /* host buffers of an operation, kept (fresh pages each time cost
                             * more than the copies) */
    size_t hb_bytes;
};

/* An operation as run or kept in a group: with its PreMulSum operator
 * resolved at the call. */
typedef struct es_xh_op {
    es_coll_op_t o;
    int premul;             /* o.op is a PreMulSum operator: pm */
    es_premul_t pm;
} es_xh_op_t;

/* ---- xhost_mem.c ------------------------------------------------------------------ */

/* The leaders' links of c (x->mem), made while the EST is parked when it
 * is time-sliced (the other hosts' leaders may wait for their turns). */
ncclResult_t es_xhm_connect(es_comm_t *c);
/* Frees the operations' host buffers (the communicator's end). */
void es_xhost_free_buffers(es_xhost_t *x);

/* ---- xsock.c ---------------------------------------------------------------------- */

/* A listener for a new unique id (rank 0's ncclGetUniqueId): *a says
 * where, with a random secret. 0 or -errno (message set). */
int es_xs_listen(es_xw_addr_t *a);
/* The leaders' links of the id whose address is a: host 0 takes the
 * listener this process made for it and waits for every other host's
 * leader; host h > 0 connects to it. Bounded by timeout_ms. 0 and *out,
 * or -errno (message set). */
int es_xs_join(es_xs_t **out, const es_xw_addr_t *a, int host, int nhosts, int k,
               int timeout_ms);
void es_xs_close(es_xs_t *s);
/* One message of n bytes to or from the leader of host peer (host h > 0:
 * peer 0 only), tagged; a message with another tag or length is refused
 * (-EPROTO). 0 or -errno (message set: the host named). */
int es_xs_send(es_xs_t *s, int peer, uint64_t tag, const void *buf, size_t n, int timeout_ms);
int es_xs_recv(es_xs_t *s, int peer, uint64_t tag, void *buf, size_t n, int timeout_ms);

#endif
