/* The shim's configuration: the EASYSCALE_* variables, parsed strictly once
 * by the constructor (shim/config.c) into es_cfg, which never changes
 * afterwards (read it without locks, from any thread). */
#ifndef ES_SHIM_CONFIG_H
#define ES_SHIM_CONFIG_H

#include <stddef.h>
#include <stdint.h>

enum es_determinism { ES_DET_OFF = 0, ES_DET_D1 = 1, ES_DET_D2 = 2 };
enum es_log_level { ES_LOG_ERROR = 0, ES_LOG_WARN = 1, ES_LOG_INFO = 2, ES_LOG_DEBUG = 3 };
enum es_audit_mode { ES_AUDIT_MODE_OFF = 0, ES_AUDIT_MODE_WARN = 1, ES_AUDIT_MODE_STRICT = 2 };
/* EASYSCALE_COLLECTIVES: plain NCCL, or the shim's virtual collectives
 * (coll/coll.h) and virtual devices (device/vdev.h). */
enum es_coll_mode { ES_COLL_NCCL = 0, ES_COLL_VIRTUAL = 1 };
/* EASYSCALE_COLL_TRANSPORT: how the ESTs of a communicator move data. */
enum es_coll_transport { ES_COLL_TP_AUTO = 0, ES_COLL_TP_DEVICE = 1, ES_COLL_TP_HOST = 2,
                         ES_COLL_TP_NCCL = 3 };
/* EASYSCALE_D2_GEMM: d2's GEMM kernels (kernels/gemm.h, docs/D2-GEMM.md):
 * the int8 GEMM (integer tensor cores) or the fp32 fma chains. */
enum es_d2_gemm { ES_D2_GEMM_INT8 = 0, ES_D2_GEMM_FMA = 1 };

#define ES_CFG_HOLD_MAX 256 /* steps in EASYSCALE_HOLD_STEPS */

typedef struct es_config {
    int determinism;         /* enum es_determinism */
    int log_level;           /* enum es_log_level */
    int log_fd;              /* 2 or EASYSCALE_LOG_FILE opened for append */
    int stats;               /* count calls per wrapped function (log=debug) */
    int audit;               /* enum es_audit_mode (EASYSCALE_AUDIT) */
    char canonical[128];     /* EASYSCALE_CANONICAL_DEVICE as given ("" unset) */
    int d2_gemm;             /* enum es_d2_gemm (EASYSCALE_D2_GEMM; used in d2) */
    /* moving ESTs (docs/MOVING.md) */
    int move;                /* enum es_move_mode (EASYSCALE_MOVE) */
    int move_timeout_s;      /* EASYSCALE_MOVE_TIMEOUT */
    int move_signal;         /* EASYSCALE_MOVE_SIGNAL (0: none) */
    int swap_streams;        /* EASYSCALE_SWAP_STREAMS */
    int swap_sums;           /* EASYSCALE_SWAP_CHECKSUMS */
    int runtime_virtual;     /* EASYSCALE_RUNTIME_HANDLES: 0 real (default), 1 virtual */
    int time_slice;          /* EASYSCALE_TIME_SLICE: 0 off, 1 on, 2 overlap (two residents) */
    size_t ts_keep;          /* EASYSCALE_TIME_SLICE_KEEP, bytes (0: none) */
    int xhost_host;          /* EASYSCALE_XHOST: 1 host (implied by EASYSCALE_TIME_SLICE), 0 nccl */
    int collectives;         /* enum es_coll_mode (EASYSCALE_COLLECTIVES; default: virtual
                                at d1/d2, nccl at off) */
    int coll_transport;      /* enum es_coll_transport (EASYSCALE_COLL_TRANSPORT) */
    int coll_timeout_s;      /* EASYSCALE_COLL_TIMEOUT, seconds (default 30) */
    size_t coll_chunk;       /* EASYSCALE_COLL_CHUNK, bytes (0: the engine's default) */
    char slot[64];           /* EASYSCALE_SLOT as given ("" unset): syntax checked here,
                                the device itself by device/vdev.c after cuInit */
    /* Control channel (shim/control.c); all unset unless EASYSCALE_CONTROL
     * is set. */
    char control[128];       /* unix socket path, or "tcp:HOST:PORT" ("" off) */
    char token[72];          /* EASYSCALE_TOKEN (required with tcp) */
    int heartbeat_ms;        /* EASYSCALE_HEARTBEAT_MS */
    int rank, world;         /* RANK, WORLD_SIZE (required with a control channel) */
    /* Scheduled holds (shim/step.h): the steps at which the ESTs wait for
     * the controller's scheduled events (easyscale-ctl run sets them). */
    uint64_t hold[ES_CFG_HOLD_MAX]; /* EASYSCALE_HOLD_STEPS, strictly ascending */
    int nhold;
    int hold_timeout_s;      /* EASYSCALE_HOLD_TIMEOUT (default 600) */
    char digest[512];        /* EASYSCALE_DIGEST: collective digests' directory ("" off) */
} es_config_t;

/* off: handles real, no moves; on: virtual handles, memory registry, moves;
 * nomem: for negative controls only, moves that leave device memory behind
 * (a run that is moved then breaks); nolib: likewise, moves that leave the
 * cuBLAS, cuBLASLt and cuDNN handles on the old GPU (intercept/virtual/libh.h). */
enum es_move_mode { ES_MOVE_OFF = 0, ES_MOVE_ON = 1, ES_MOVE_NOMEM = 2, ES_MOVE_NOLIB = 3 };

extern es_config_t es_cfg;

/* Parses the EASYSCALE_* variables into *cfg. Returns 0, or -EINVAL with a
 * one-line explanation in msg. Pure: reads only the environment. */
int es_config_parse(es_config_t *cfg, char *msg, size_t msglen);

#endif
