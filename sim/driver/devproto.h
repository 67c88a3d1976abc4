/* simcuda device servers: what a client process (libcuda.so.1) and the
 * server of one of its simulated GPUs (build/sim/simcuda-gpu) share. Not a
 * public API: only sim/driver/ sources include it.
 *
 * - The address window: both processes reserve the same range of virtual
 *   addresses (PROT_NONE) before anything else; device memory, pinned host
 *   memory, staging buffers and VMM reservations are placed inside it, so a
 *   pointer means the same thing in the client and in every server.
 * - The control socket (SOCK_SEQPACKET, the server's fd 3): one sim_ctl_t
 *   per message, file descriptors attached with SCM_RIGHTS. The client sends
 *   a request and waits for the reply (same op, err 0 or -errno). The server
 *   exits when the socket reaches end of file: its client is gone.
 * - Channels: one shared page set per (client stream, server), a
 *   sim_chan_t. The client's stream worker writes one operation, bumps
 *   `req` and wakes the server's thread for that channel (futex); the server
 *   runs it and bumps `done`. One operation at a time per channel, so stream
 *   order is kept by the client's worker.
 */
#ifndef SIM_DRIVER_DEVPROTO_H
#define SIM_DRIVER_DEVPROTO_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

/* ---- the address window ----------------------------------------------------------- */
#define SIM_WIN_SIZE (1ULL << 44) /* 16 TiB of addresses, nothing committed */
/* Its top: a device server's parking zone (devserver.c), never handed out
 * by the client. */
#define SIM_WIN_PARK (1ULL << 40)
/* Candidate bases, tried in order with MAP_FIXED_NOREPLACE. All lie above
 * AddressSanitizer's shadow (which ends below 0x10007fff8000) and away from
 * its allocator (0x600000000000 + 4 TiB), PIE executables (0x55..), the
 * usual mmap area (0x7f..) and a device server's own mappings (the legacy
 * bottom-up layout, upwards from 0x2aaaaaaab000: devserver.c). */
#define SIM_WIN_BASES {0x300000000000ULL, 0x400000000000ULL, 0x110000000000ULL, \
                       0x500000000000ULL, 0x700000000000ULL}
/* Size of the sparse files that back device and pinned host memory (only
 * pages written take memory). */
#define SIM_BACKING_FILE_SIZE (1ULL << 40)

/* ---- control messages ----------------------------------------------------------- */
#define SIM_CTL_MAGIC 0x4c544353u /* "SCTL" */
#define SIM_CTL_VERSION 1

enum sim_ctl_op {
    SIM_CTL_HELLO = 1,    /* server -> client when ready: err 0, id = pid */
    SIM_CTL_BACKING,      /* fd attached: backing `id` from now on */
    SIM_CTL_BACKING_DROP, /* forget backing `id` (close its fd) */
    SIM_CTL_MAP,          /* map [va, va+len) from backing `id` at `off`, `prot` */
    SIM_CTL_UNMAP,        /* [va, va+len) back to a reservation */
    SIM_CTL_CHAN,         /* fd attached: channel `id`, start its thread */
    SIM_CTL_PING,         /* reply only (liveness) */
};

typedef struct sim_ctl {
    uint32_t magic;
    uint16_t version;
    uint16_t size;   /* sizeof(sim_ctl_t) */
    uint32_t op;
    int32_t err;     /* replies: 0 or -errno */
    uint64_t va, len, off;
    uint32_t id;
    uint32_t prot;   /* PROT_* bits */
} sim_ctl_t;
_Static_assert(sizeof(sim_ctl_t) == 48, "sim_ctl_t layout");
_Static_assert(offsetof(sim_ctl_t, va) == 16, "sim_ctl_t layout");

/* ---- channels -----------------------------------------------------------------
 * A ring of SIM_CHAN_SLOTS operations. The client writes slot (req % SLOTS)
 * and bumps `req`; the server runs slots in order, writes each one's result
 * and bumps `done`. The client never has more than SLOTS operations posted
 * and reads a slot's result before reusing it. Each side sleeps on its
 * futex word only after saying so (srv_sleeping / cli_waiting), so the
 * other side makes the wake-up system call only when someone sleeps. */
#define SIM_CHAN_MAGIC 0x4e414843554d4953ULL /* "SIMUCHAN" */
#define SIM_CHAN_VERSION 2
#define SIM_CHAN_SLOTS 8
#define SIM_CHAN_DATA (64u << 10) /* kernel name + parameter layout + values */
#define SIM_CHAN_MAX_PARAMS 4096

enum sim_chan_op {
    SIM_CHOP_COPY = 1, /* memmove(dst, src, n) */
    SIM_CHOP_COPY2D,   /* height rows of width bytes */
    SIM_CHOP_SET,      /* 2D memset of 1-, 2- or 4-byte elements */
    SIM_CHOP_KERNEL,   /* data: name NUL, u32 offsets[nparams], parameter bytes */
};

/* Results: 0, or one of these (mapped to CUresult by the client). */
enum sim_chan_result {
    SIM_CHRES_OK = 0,
    SIM_CHRES_FAULT = 1,     /* the operation touched memory this GPU cannot reach */
    SIM_CHRES_FAILED = 2,    /* the kernel's twin returned non-zero */
    SIM_CHRES_NO_TWIN = 3,   /* no simcuda_twin_NAME in this server's libraries */
    SIM_CHRES_BAD = 4,       /* malformed request */
    SIM_CHRES_SKIPPED = 5,   /* not run: an earlier operation of the channel failed */
};

typedef struct sim_slot {
    uint32_t op;
    int32_t result;
    uint64_t cpu_ns;          /* server thread CPU time the operation took */
    union {
        struct { uint64_t dst, src, n; } copy;
        struct { uint64_t dst, src, dpitch, spitch, width, height; } copy2d;
        struct { uint64_t dst, pitch, width, height; uint32_t val, elem; } set;
        struct {
            uint32_t grid[3], block[3];
            uint32_t shared_bytes;
            int32_t device, sm_count, cc_major, cc_minor;
            uint32_t nparams;
            uint64_t nondet_seed;
            uint32_t name_len;   /* without the NUL */
            uint32_t param_bytes;
        } k;
        unsigned char raw[112];
    } a;
    _Alignas(16) unsigned char data[SIM_CHAN_DATA];
} sim_slot_t;
_Static_assert(offsetof(sim_slot_t, a) == 16, "sim_slot_t layout");
_Static_assert(offsetof(sim_slot_t, data) == 128, "sim_slot_t layout");
_Static_assert(sizeof(sim_slot_t) == 128 + SIM_CHAN_DATA, "sim_slot_t layout");

typedef struct sim_chan {
    uint64_t magic;
    uint32_t version;
    uint32_t size;               /* sizeof(sim_chan_t) */
    _Atomic uint32_t req;        /* futex word: operations posted */
    _Atomic uint32_t done;       /* futex word: operations completed */
    _Atomic uint32_t srv_sleeping;
    _Atomic uint32_t cli_waiting;
    uint32_t failed;             /* server: an operation failed, skip the rest */
    uint32_t pad[7];
    sim_slot_t slot[SIM_CHAN_SLOTS];
} sim_chan_t;
_Static_assert(offsetof(sim_chan_t, req) == 16, "sim_chan_t layout");
_Static_assert(offsetof(sim_chan_t, slot) == 64, "sim_chan_t layout");
_Static_assert(sizeof(sim_chan_t) == 64 + SIM_CHAN_SLOTS * sizeof(sim_slot_t), "sim_chan_t layout");

#endif
