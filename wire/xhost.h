/* What the shims of two hosts speak between the hosts' leaders of a
 * communicator across hosts whose levels above a host run in host memory
 * (time-slicing: coll/xsock.c, coll/xhost_mem.c).
 *
 * The unique id rank 0 makes carries an es_xw_addr_t (where host 0's
 * leader listens, and a random secret); every other host's leader
 * connects there and sends an es_xw_hello_t, answered by an es_xw_ack_t;
 * after that every message is an es_xw_msg_t followed by its bytes. Every
 * structure is fixed-size, little-endian (the hosts are), and starts with
 * a magic, a version and its size; a reader refuses anything else. */
#ifndef ES_WIRE_XHOST_H
#define ES_WIRE_XHOST_H

#include <stdint.h>

#define ES_XW_MAGIC 0x48584545u /* "EEXH" */
#define ES_XW_VERSION 1

/* In the unique id: host 0's leader's listening socket. */
typedef struct es_xw_addr {
    uint32_t magic;       /* ES_XW_MAGIC */
    uint16_t version;     /* ES_XW_VERSION */
    uint16_t size;        /* sizeof(es_xw_addr_t) */
    uint32_t ipv4;        /* network order */
    uint16_t port;        /* network order */
    uint16_t pad;
    uint64_t secret;      /* random: a connection that does not know it is refused */
} es_xw_addr_t;
_Static_assert(sizeof(es_xw_addr_t) == 24, "es_xw_addr_t layout");

/* A leader of host `host` to host 0's leader, first thing. */
typedef struct es_xw_hello {
    uint32_t magic;
    uint16_t version;
    uint16_t size;        /* sizeof(es_xw_hello_t) */
    uint64_t secret;      /* the id's */
    int32_t host, nhosts; /* GROUP_RANK, GROUP_WORLD_SIZE */
    int32_t k, pad;       /* LOCAL_WORLD_SIZE */
} es_xw_hello_t;
_Static_assert(sizeof(es_xw_hello_t) == 32, "es_xw_hello_t layout");

/* Host 0's answer: status 0, or a negative errno (the hello did not fit:
 * another job, another layout, a host twice). */
typedef struct es_xw_ack {
    uint32_t magic;
    uint16_t version;
    uint16_t size;        /* sizeof(es_xw_ack_t) */
    int32_t status, pad;
} es_xw_ack_t;
_Static_assert(sizeof(es_xw_ack_t) == 16, "es_xw_ack_t layout");

/* Before every message's bytes: which message it is (the operation's
 * number on the communicator, its part, the host whose data it carries)
 * and how long. The receiver knows both and refuses a message it did not
 * expect (the hosts issued different collectives). */
typedef struct es_xw_msg {
    uint32_t magic;
    uint16_t version;
    uint16_t size;        /* sizeof(es_xw_msg_t) */
    uint64_t tag;         /* operation << 16 | part << 8 | host */
    uint64_t bytes;
} es_xw_msg_t;
_Static_assert(sizeof(es_xw_msg_t) == 24, "es_xw_msg_t layout");

#endif
