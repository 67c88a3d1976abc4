/* A client of nccl.h (and cuda.h) across simulated hosts: run once per host
 * by scripts/simhosts (2 hosts x 2 GPUs), it forks one rank per GPU of its
 * host (rank = 2 * SIMHOST_INDEX + GPU) and runs a 4-rank communicator.
 * The expected values of reductions come from simcuda NCCL's reference
 * (sim/nccl/reduce.c: the plan's fold order over the ring), the only thing
 * it uses besides NVIDIA's headers.
 *
 *   net_client results   allreduce (sum: float, double, int32, half;
 *                            plan pinned and default), broadcast, allgather,
 *                            reduce-scatter, send/recv; the id from
 *                            ncclGetUniqueId on host 0, handed to host 1 by
 *                            this program over TCP. Also the negative
 *                            control: the float allreduce's bits differ from
 *                            the reference over the ring of one host.
 *   net_client cut       NCCL_COMM_ID on host 0's address; allreduces
 *                            in a loop; rank 0 cuts host 1's link after 3;
 *                            every rank must fail, naming a peer.
 *   net_client kill      as cut, but rank 3 exits (no destroy) after 3
 *                            allreduces: the others must fail.
 *   net_client init      init only (the negative control on the
 *                            interface: run with NCCL_SOCKET_IFNAME=lo).
 *
 * Prints "rank R: PASS <what>" / "rank R: FAIL <what>: ..." lines; exits 0
 * when every rank of this host passed (cut: when every rank failed as it
 * must, it prints "rank R: FAILED-AS-EXPECTED ..." and the exit status is
 * still non-zero, 3, as the application's would be). */
#include "sim/nccl/simnccl.h"

#include <arpa/inet.h>
#include <cuda.h>
#include <errno.h>
#include <nccl.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define NRANKS 4
#define ID_PORT 29417
#define COMM_PORT 29418

static int g_rank;

#define SAY(...)                        \
    do {                                \
        printf("rank %d: ", g_rank);    \
        printf(__VA_ARGS__);            \
        printf("\n");                   \
        fflush(stdout);                 \
    } while (0)
#define CU(call)                                                           \
    do {                                                                   \
        CUresult r_ = (call);                                              \
        if (r_ != CUDA_SUCCESS) {                                          \
            SAY("FAIL %s: CUDA error %d (line %d)", #call, (int)r_, __LINE__); \
            return 1;                                                      \
        }                                                                  \
    } while (0)
#define NC(call)                                                                    \
    do {                                                                            \
        ncclResult_t r_ = (call);                                                   \
        if (r_ != ncclSuccess) {                                                    \
            SAY("FAIL %s: %s: %s (line %d)", #call, ncclGetErrorString(r_),          \
                ncclGetLastError(NULL), __LINE__);                                  \
            return 1;                                                               \
        }                                                                           \
    } while (0)

/* ---- the id from host 0 to host 1: this application's own exchange ------------- */

static const char *host_addr(int h)
{
    static char buf[64];
    const char *a = getenv("SIMHOST_ADDRS");
    for (int i = 0; a && i < h; i++) {
        a = strchr(a, ',');
        if (a)
            a++;
    }
    if (!a)
        return NULL;
    size_t l = strcspn(a, ",");
    snprintf(buf, sizeof(buf), "%.*s", (int)l, a);
    return buf;
}

static int serve_id(const ncclUniqueId *id, int clients)
{
    int s = socket(AF_INET, SOCK_STREAM, 0), one = 1;
    setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(ID_PORT)};
    if (inet_pton(AF_INET, host_addr(0), &a.sin_addr) != 1 ||
        bind(s, (struct sockaddr *)&a, sizeof(a)) != 0 || listen(s, 8) != 0)
        return -1;
    for (int i = 0; i < clients; i++) {
        struct pollfd p = {s, POLLIN, 0};
        if (poll(&p, 1, 30000) != 1)
            return -1;
        int c = accept(s, NULL, NULL);
        if (c < 0 || write(c, id, sizeof(*id)) != (ssize_t)sizeof(*id))
            return -1;
        close(c);
    }
    close(s);
    return 0;
}

static int fetch_id(ncclUniqueId *id)
{
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(ID_PORT)};
    if (inet_pton(AF_INET, host_addr(0), &a.sin_addr) != 1)
        return -1;
    for (int tries = 0; tries < 300; tries++) {
        int s = socket(AF_INET, SOCK_STREAM, 0);
        if (connect(s, (struct sockaddr *)&a, sizeof(a)) == 0) {
            size_t got = 0;
            while (got < sizeof(*id)) {
                ssize_t k = read(s, (char *)id + got, sizeof(*id) - got);
                if (k <= 0)
                    break;
                got += (size_t)k;
            }
            close(s);
            return got == sizeof(*id) ? 0 : -1;
        }
        close(s);
        usleep(100000);
    }
    return -1;
}

/* ---- data and the reference ----------------------------------------------------- */

static uint32_t mix(uint32_t x)
{
    x ^= x >> 16;
    x *= 0x7feb352dU;
    x ^= x >> 15;
    x *= 0x846ca68bU;
    x ^= x >> 16;
    return x;
}

/* Values of many magnitudes: the sum's bits depend on the order. */
static double gen(int dtype, int rank, size_t i)
{
    uint32_t h = mix((uint32_t)(i * 4 + (size_t)rank) + 0x9e37u);
    if (dtype == ncclInt32)
        return (double)((int)(h % 20001) - 10000);
    double m = (double)(h & 0xffff) / 65536.0 + 0.5;
    int e = (int)((h >> 16) % 24) - 8;
    if (dtype == ncclFloat16)
        e = (int)((h >> 16) % 10) - 4;
    return (h >> 31 ? -m : m) * (double)(1 << (e + 8)) / 256.0;
}

static void put(int dtype, void *buf, size_t i, double v)
{
    switch (dtype) {
    case ncclFloat32: ((float *)buf)[i] = (float)v; break;
    case ncclFloat64: ((double *)buf)[i] = v; break;
    case ncclInt32: ((int32_t *)buf)[i] = (int32_t)v; break;
    case ncclFloat16: ((uint16_t *)buf)[i] = sim_f16_double_to_half(v); break;
    default: break;
    }
}

/* The reference: every element folded in the plan's order over `ring`. */
static void reference(const sim_nccl_tuning_t *t, int dtype, size_t count, const int *ring,
                      void *out)
{
    size_t es = sim_nccl_type_size(dtype);
    int pos[NRANKS];
    for (int p = 0; p < NRANKS; p++)
        pos[ring[p]] = p;
    char *in[NRANKS];
    for (int r = 0; r < NRANKS; r++) {
        in[r] = malloc(count * es);
        for (size_t i = 0; i < count; i++)
            put(dtype, in[r], i, gen(dtype, r, i));
    }
    sim_nccl_plan_t p;
    sim_nccl_plan(&p, t, SIM_COLL_ALLREDUCE, NRANKS, count, dtype, 0);
    p.pos_of = pos;
    for (size_t e = 0; e < count;) {
        int start, dir;
        size_t end;
        sim_nccl_plan_segment(&p, e, &start, &dir, &end);
        const void *ins[NRANKS];
        for (int k = 0; k < NRANKS; k++) {
            int ps = ((start + dir * k) % NRANKS + NRANKS) % NRANKS;
            ins[k] = in[ring[ps]] + e * es;
        }
        sim_nccl_reduce(dtype, SIM_OP_SUM, NRANKS, (char *)out + e * es, NULL, ins, NRANKS,
                        end - e);
        e = end;
    }
    for (int r = 0; r < NRANKS; r++)
        free(in[r]);
}

/* ---- the checks ---------------------------------------------------------------------- */

typedef struct env {
    ncclComm_t comm;
    CUstream st;
    int rank;
} env_t;

static int allreduce_case(env_t *E, const char *what, int dtype, size_t count,
                          const sim_nccl_tuning_t *t, int negative)
{
    int rank = E->rank;
    size_t es = sim_nccl_type_size(dtype), bytes = count * es;
    char *h = malloc(bytes), *got = malloc(bytes), *want = malloc(bytes);
    for (size_t i = 0; i < count; i++)
        put(dtype, h, i, gen(dtype, rank, i));
    CUdeviceptr d;
    CU(cuMemAlloc(&d, bytes));
    CU(cuMemcpyHtoD(d, h, bytes));
    NC(ncclAllReduce((void *)d, (void *)d, count, (ncclDataType_t)dtype, ncclSum, E->comm,
                     (cudaStream_t)E->st));
    CU(cuStreamSynchronize(E->st));
    ncclResult_t ae;
    NC(ncclCommGetAsyncError(E->comm, &ae));
    if (ae != ncclSuccess) {
        SAY("FAIL %s: async error %s: %s", what, ncclGetErrorString(ae),
            ncclGetLastError(E->comm));
        return 1;
    }
    CU(cuMemcpyDtoH(got, d, bytes));
    cuMemFree(d);
    /* 2 hosts x 2 GPUs: the ring runs through host 0's GPUs, then host 1's:
     * ranks 0, 1, 2, 3. */
    int ring[NRANKS] = {0, 1, 2, 3};
    reference(t, dtype, count, ring, want);
    size_t bad = 0, first = 0;
    for (size_t i = 0; i < count; i++)
        if (memcmp(got + i * es, want + i * es, es) != 0 && !bad++)
            first = i;
    if (bad) {
        SAY("FAIL %s: %zu of %zu elements differ from the plan's reference (first %zu)", what,
            bad, count, first);
        return 1;
    }
    SAY("PASS %s", what);
    if (negative) {
        /* One host's ring over the same GPUs would sort them by bus id
         * alone (host 0's GPU 0, host 1's GPU 0, ...): ranks 0, 2, 1, 3. The
         * check above must be able to tell. */
        int ring1[NRANKS] = {0, 2, 1, 3};
        reference(t, dtype, count, ring1, want);
        size_t diff = 0;
        for (size_t i = 0; i < count; i++)
            diff += memcmp(got + i * es, want + i * es, es) != 0;
        if (!diff) {
            SAY("FAIL negative_control: the result also matches the ring 0,2,1,3");
            return 1;
        }
        SAY("PASS negative_control (%zu of %zu elements differ from the ring 0,2,1,3)", diff,
            count);
    }
    free(h);
    free(got);
    free(want);
    return 0;
}

static int check_ints(env_t *E, const char *what, CUdeviceptr d, size_t n,
                      int32_t (*expect)(int rank, size_t i))
{
    int rank = E->rank;
    int32_t *h = malloc(n * 4);
    CU(cuMemcpyDtoH(h, d, n * 4));
    for (size_t i = 0; i < n; i++)
        if (h[i] != expect(rank, i)) {
            SAY("FAIL %s: element %zu is %d, expected %d", what, i, h[i], expect(rank, i));
            return 1;
        }
    free(h);
    SAY("PASS %s", what);
    return 0;
}

static int32_t val(int r, size_t i)
{
    return (int32_t)(r * 1000003 + (int)i * 7);
}
#define BC_N 70001
static int32_t bc_expect(int rank, size_t i)
{
    (void)rank;
    return val(3, i);
}
#define AG_N 50001
static int32_t ag_expect(int rank, size_t i)
{
    (void)rank;
    return val((int)(i / AG_N), i % AG_N);
}
#define P2P_N 100003
static int32_t p2p_expect(int rank, size_t i)
{
    return val((rank + NRANKS - 1) % NRANKS, i);
}
#define RS_N 30001
static int32_t rs_expect(int rank, size_t i)
{
    int64_t s = 0;
    for (int r = 0; r < NRANKS; r++)
        s += val(r, (size_t)rank * RS_N + i);
    return (int32_t)s;
}

static int fill(CUdeviceptr d, int rank, size_t n)
{
    int32_t *h = malloc(n * 4);
    for (size_t i = 0; i < n; i++)
        h[i] = val(rank, i);
    CU(cuMemcpyHtoD(d, h, n * 4));
    free(h);
    return 0;
}

static int run_results(env_t *E)
{
    int rank = E->rank, fails = 0;
    /* NCCL_ALGO=Ring NCCL_PROTO=Simple NCCL_MIN/MAX_CTAS=2 (the test's
     * environment): the plan is fixed by size; a100: 108 SMs -> 6 base. */
    sim_nccl_tuning_t pinned = {1 << SIM_ALGO_RING, 1 << SIM_PROTO_SIMPLE, 2, 2, 6};
    fails += allreduce_case(E, "allreduce_sum_float", ncclFloat32, 300007, &pinned, 1);
    fails += allreduce_case(E, "allreduce_sum_double", ncclFloat64, 100003, &pinned, 0);
    fails += allreduce_case(E, "allreduce_sum_int32", ncclInt32, 100003, &pinned, 0);
    fails += allreduce_case(E, "allreduce_sum_half", ncclFloat16, 65537, &pinned, 0);
    CUdeviceptr a, b;
    CU(cuMemAlloc(&a, (size_t)NRANKS * 4 * P2P_N));
    CU(cuMemAlloc(&b, (size_t)NRANKS * 4 * P2P_N));
    /* broadcast from rank 3 (host 1) */
    CU(fill(a, rank, BC_N) ? CUDA_ERROR_UNKNOWN : CUDA_SUCCESS);
    NC(ncclBroadcast((void *)a, (void *)b, BC_N, ncclInt32, 3, E->comm, (cudaStream_t)E->st));
    CU(cuStreamSynchronize(E->st));
    fails += check_ints(E, "broadcast", b, BC_N, bc_expect);
    /* allgather */
    CU(fill(a, rank, AG_N) ? CUDA_ERROR_UNKNOWN : CUDA_SUCCESS);
    NC(ncclAllGather((void *)a, (void *)b, AG_N, ncclInt32, E->comm, (cudaStream_t)E->st));
    CU(cuStreamSynchronize(E->st));
    fails += check_ints(E, "allgather", b, (size_t)NRANKS * AG_N, ag_expect);
    /* reduce-scatter (integers: any order gives the same) */
    CU(fill(a, rank, (size_t)NRANKS * RS_N) ? CUDA_ERROR_UNKNOWN : CUDA_SUCCESS);
    NC(ncclReduceScatter((void *)a, (void *)b, RS_N, ncclInt32, ncclSum, E->comm,
                         (cudaStream_t)E->st));
    CU(cuStreamSynchronize(E->st));
    fails += check_ints(E, "reduce_scatter", b, RS_N, rs_expect);
    /* send/recv around the ring: 1 -> 2 and 3 -> 0 cross hosts */
    CU(fill(a, rank, P2P_N) ? CUDA_ERROR_UNKNOWN : CUDA_SUCCESS);
    NC(ncclGroupStart());
    NC(ncclSend((void *)a, P2P_N, ncclInt32, (rank + 1) % NRANKS, E->comm, (cudaStream_t)E->st));
    NC(ncclRecv((void *)b, P2P_N, ncclInt32, (rank + NRANKS - 1) % NRANKS, E->comm,
                (cudaStream_t)E->st));
    NC(ncclGroupEnd());
    CU(cuStreamSynchronize(E->st));
    fails += check_ints(E, "send_recv", b, P2P_N, p2p_expect);
    cuMemFree(a);
    cuMemFree(b);
    /* default plan (nothing pinned in the communicator's environment is
     * read again: rank 0's at init) is covered by the pinned cases; a small
     * float allreduce takes the tree (a chain in ring order) */
    ncclResult_t ae;
    NC(ncclCommGetAsyncError(E->comm, &ae));
    if (ae != ncclSuccess) {
        SAY("FAIL async error %s: %s", ncclGetErrorString(ae), ncclGetLastError(E->comm));
        fails++;
    }
    return fails;
}

static int run_cut(env_t *E, int kill)
{
    int rank = E->rank;
    size_t n = 1 << 18;
    CUdeviceptr d;
    CU(cuMemAlloc(&d, n * 4));
    CU(cuMemsetD32(d, 1, n));
    for (int it = 0; it < 400; it++) {
        ncclResult_t r = ncclAllReduce((void *)d, (void *)d, n, ncclInt32, ncclMax, E->comm,
                                       (cudaStream_t)E->st);
        if (r == ncclSuccess)
            CU(cuStreamSynchronize(E->st));
        ncclResult_t ae = r;
        if (r == ncclSuccess)
            NC(ncclCommGetAsyncError(E->comm, &ae));
        if (ae != ncclSuccess) {
            SAY("FAILED-AS-EXPECTED after %d allreduces: %s: %s", it, ncclGetErrorString(ae),
                ncclGetLastError(E->comm));
            ncclCommAbort(E->comm);
            E->comm = NULL;
            return 3;
        }
        if (it == 3 && kill && rank == 3) {
            SAY("exits now, without a word");
            _exit(5);
        }
        if (it == 3 && rank == 0 && !kill) {
            const char *cut = getenv("SIMHOST_CUT_CMD");
            char cmd[1024];
            snprintf(cmd, sizeof(cmd), "%s 1", cut ? cut : "false");
            int rc = system(cmd);
            SAY("cut host 1's link (%s): %d", cmd, rc);
        }
    }
    SAY("FAIL cut: 400 allreduces and no failure");
    return 4;
}

static int rank_main(int mode, int rank, int gpu, ncclUniqueId id)
{
    g_rank = rank;
    env_t E = {NULL, NULL, rank};
    CUdevice dev;
    CUcontext ctx;
    CU(cuInit(0));
    CU(cuDeviceGet(&dev, gpu));
    CU(cuDevicePrimaryCtxRetain(&ctx, dev));
    CU(cuCtxSetCurrent(ctx));
    CU(cuStreamCreate(&E.st, CU_STREAM_NON_BLOCKING));
    ncclResult_t r = ncclCommInitRank(&E.comm, NRANKS, id, rank);
    if (r != ncclSuccess) {
        SAY("%s ncclCommInitRank: %s: %s", mode == 2 ? "FAILED-AS-EXPECTED" : "FAIL",
            ncclGetErrorString(r), ncclGetLastError(NULL));
        return 3;
    }
    if (mode == 2) {
        SAY("FAIL init succeeded");
        ncclCommDestroy(E.comm);
        return 4;
    }
    int rc = mode == 0 ? run_results(&E) : run_cut(&E, mode == 3);
    if (E.comm) {
        if (rc == 0)
            NC(ncclCommDestroy(E.comm));
        else
            ncclCommAbort(E.comm);
    }
    if (rc == 0)
        SAY("PASS all");
    return rc;
}

int main(int argc, char **argv)
{
    int mode = argc > 1 && strcmp(argv[1], "cut") == 0    ? 1
               : argc > 1 && strcmp(argv[1], "init") == 0 ? 2
               : argc > 1 && strcmp(argv[1], "kill") == 0 ? 3
               : argc > 1 && strcmp(argv[1], "results") == 0 ? 0 : -1;
    const char *hi = getenv("SIMHOST_INDEX"), *ifname = getenv("SIMHOST_IFNAME");
    if (mode < 0 || !hi || !ifname || !host_addr(0)) {
        fprintf(stderr, "usage: net_client results|cut|kill|init, under scripts/simhosts "
                        "--hosts 2 (SIMHOST_INDEX, SIMHOST_ADDRS, SIMHOST_IFNAME)\n");
        return 2;
    }
    int host = atoi(hi);
    if (!getenv("NCCL_SOCKET_IFNAME"))
        setenv("NCCL_SOCKET_IFNAME", ifname, 1);
    /* on a GPU machine: device memory out of this process */
    setenv("SIMCUDA_ISOLATION", "1", 1);
    ncclUniqueId id;
    g_rank = -1 - host;
    if (mode == 1 || mode == 3) {
        char cid[96];
        snprintf(cid, sizeof(cid), "%s:%d", host_addr(0), COMM_PORT);
        setenv("NCCL_COMM_ID", cid, 1);
    }
    if (mode == 1 || mode == 3 || host == 0) {
        ncclResult_t r = ncclGetUniqueId(&id);
        if (r != ncclSuccess) {
            printf("host %d: FAIL ncclGetUniqueId: %s\n", host, ncclGetErrorString(r));
            return 1;
        }
    }
    pid_t server = -1;
    if (mode != 1 && mode != 3 && host == 0) {
        /* hand the id to host 1 (this application's business, as a
         * launcher's store would) */
        server = fork();
        if (server == 0)
            _exit(serve_id(&id, 1) == 0 ? 0 : 1);
    } else if (mode != 1 && mode != 3 && fetch_id(&id) != 0) {
        printf("host %d: FAIL cannot fetch the id from host 0\n", host);
        return 1;
    }
    fflush(stdout);
    pid_t pids[2];
    for (int g = 0; g < 2; g++) {
        pids[g] = fork();
        if (pids[g] == 0)
            _exit(rank_main(mode, 2 * host + g, g, id));
    }
    int worst = 0;
    for (int g = 0; g < 2; g++) {
        int st = 0;
        waitpid(pids[g], &st, 0);
        int code = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
        printf("host %d: rank %d exited %d\n", host, 2 * host + g, code);
        if (code > worst)
            worst = code;
    }
    if (server > 0) {
        int st = 0;
        waitpid(server, &st, 0);
    }
    fflush(stdout);
    return worst;
}
