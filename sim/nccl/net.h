/* simcuda NCCL between hosts: the socket transport.
 *
 * Bootstrap (as NCCL's): ncclGetUniqueId picks the interface
 * (NCCL_SOCKET_IFNAME), listens there and serves the rendezvous from a
 * thread of its own (the root); the id carries the root's IPv4 address and
 * port and a random magic. With NCCL_COMM_ID=host:port every rank uses that
 * address and rank 0 listens there. Every rank connects to the root and
 * sends (rank, host identity, its own listening address, its device facts);
 * the root answers every rank with the whole table and a fresh
 * communicator nonce.
 *
 * Ranks of one host (same host identity, sim_nccl_host_identity) keep the
 * shared-memory transport among themselves; between hosts each pair of
 * ranks has one TCP connection, driven by a proxy thread per rank
 * (non-blocking sockets, poll, heartbeats): messages are queued by
 * sim_nccl_net_send (never blocks) and taken in order by
 * sim_nccl_net_recv (bounded wait). Only host memory is read or written
 * here (the host-pinned buffers the stream copies to and from). */
#ifndef SIM_NCCL_NET_H
#define SIM_NCCL_NET_H

#include "sim/nccl/simnccl.h"

#include <stddef.h>
#include <stdint.h>

/* What each rank tells the others through the root. */
typedef struct sim_nccl_peer {
    int32_t rank, dev_ordinal, sm_count, cc_major, cc_minor;
    uint32_t addr;        /* its listening address (IPv4, network order) */
    uint16_t port;        /* network order */
    uint16_t pad0;
    char bus_id[32];
    uint8_t uuid[16];
    char model[16];
    char host[128];       /* host identity */
} sim_nccl_peer_t;
_Static_assert(sizeof(sim_nccl_peer_t) == 220, "sim_nccl_peer_t layout");

/* The root's answer: the same on every rank. */
typedef struct sim_nccl_boot {
    uint64_t nonce;       /* this communicator's, random */
    int32_t tuning[4];    /* rank 0's */
    uint64_t slot, p2p;   /* rank 0's staging sizes */
    int32_t nranks, pad0;
    sim_nccl_peer_t peer[SIM_NCCL_MAX_RANKS];
} sim_nccl_boot_t;

/* What decides that two processes are on one host: everything the
 * shared-memory transport relies on must be shared (boot id of the
 * kernel, network namespace (abstract unix sockets), pid namespace
 * (liveness by pid), the filesystem of /dev/shm (shm_open)). */
void sim_nccl_host_identity(char *buf, size_t len);

/* The interface NCCL_SOCKET_IFNAME selects (prefix list, '^' excludes, '='
 * exact; unset: the first up interface with an IPv4 address that is not
 * loopback nor docker*, else docker*, else loopback). Returns 0 (*addr in
 * network order, its name in ifname), -ENODEV (nothing matches) or
 * -EINVAL (bad NCCL_SOCKET_IFNAME), with a message in err. */
int sim_nccl_net_ifaddr(uint32_t *addr, char *ifname, size_t iflen, char *err, size_t errlen);

/* Fills the id's bootstrap part for ncclGetUniqueId: NCCL_COMM_ID's
 * address, or a root listening on the selected interface (its thread
 * serves one communicator, or gives up after init_timeout_ms). Returns 0,
 * -ENODEV (no interface at all, NCCL_SOCKET_IFNAME unset: the id is left
 * without bootstrap, for ranks of this host only) or another negative
 * errno with a message in err. */
int sim_nccl_net_make_id(sim_nccl_id_t *id, int init_timeout_ms, char *err, size_t errlen);

/* A listening TCP socket on addr (port 0: any); *port in network order. */
int sim_nccl_net_listen(uint32_t addr, uint16_t want_port, int *fd, uint16_t *port);

/* The rank's side of the rendezvous (rank 0 with NCCL_COMM_ID starts the
 * root first). Returns 0 with *out filled, -EEXIST (rank claimed twice),
 * -EINVAL (ranks disagree), -ETIMEDOUT, or another negative errno, with a
 * message in err. */
int sim_nccl_net_bootstrap(const sim_nccl_id_t *id, int rank, int nranks,
                           const sim_nccl_peer_t *me, const int tuning[4], uint64_t slot,
                           uint64_t p2p, int timeout_ms, sim_nccl_boot_t *out, char *err,
                           size_t errlen);

typedef struct sim_nccl_net sim_nccl_net_t;

/* Connects this rank to every rank of another host (host_of[r]: host index
 * of rank r), on listen_fd (taken over) and the peers' listening addresses,
 * and starts the proxy thread. Failures of a peer after this point mark
 * seg failed (SIM_FAIL_NET) and record the peer in its header. */
int sim_nccl_net_start(sim_nccl_net_t **out, const sim_nccl_boot_t *b, int me,
                       const int *host_of, int listen_fd, int timeout_ms, sim_nccl_seg_t *seg,
                       char *err, size_t errlen);

/* Queues len bytes (copied) for peer; never waits. 0 or -ECONNABORTED. */
int sim_nccl_net_send(sim_nccl_net_t *n, int peer, const void *buf, size_t len);

/* Takes the next message of peer into buf (it must be len bytes): waits
 * at most the timeout; returns 0, -ECONNABORTED (*why: SIM_FAIL_*),
 * -ECANCELED (local abort), -EPROTO (size mismatch) or -ETIMEDOUT (the
 * peer is then recorded as unreachable). */
int sim_nccl_net_recv(sim_nccl_net_t *n, int peer, void *buf, size_t len, int *why);

/* The first failure seen ("peer rank R (A.B.C.D:P) unreachable: ..."), or
 * NULL. */
const char *sim_nccl_net_failure(sim_nccl_net_t *n);

/* Stops the proxy and closes every socket; graceful: tells the peers this
 * rank leaves (a clean destroy) and sends what is queued first (bounded). */
void sim_nccl_net_stop(sim_nccl_net_t *n, int graceful);

#endif
