/* simcuda stream memory operations: cuStreamWaitValue32/64,
 * cuStreamWriteValue32/64 and cuStreamBatchMemOp (the v2 API of CUDA 11.7+,
 * which NVIDIA's driver serves on every platform since CUDA 12).
 *
 * Semantics (cuda.h, "Stream Memory Operations"):
 * - the address is a device address: device memory (cuMemAlloc, a VMM
 *   mapping) or pinned / registered host memory (its device pointer,
 *   cuMemHostGetDevicePointer, is the host address here as on every UVA
 *   system); anything else (pageable memory, 0) is CUDA_ERROR_INVALID_VALUE,
 *   so is a 32-bit address not 4-byte aligned or a 64-bit one not 8-byte
 *   aligned;
 * - waits: CU_STREAM_WAIT_VALUE_GEQ (cyclic: (int32_t)(*addr - value) >= 0,
 *   int64_t for 64 bits), EQ, AND ((*addr & value) != 0), NOR
 *   (~(*addr | value) != 0); CU_STREAM_WAIT_VALUE_FLUSH and
 *   CU_STREAM_MEM_OP_FLUSH_REMOTE_WRITES are CUDA_ERROR_NOT_SUPPORTED, as on
 *   a device that reports CU_DEVICE_ATTRIBUTE_CAN_FLUSH_REMOTE_WRITES 0 (an
 *   x86 machine); any other flag bit is CUDA_ERROR_INVALID_VALUE;
 * - writes: flags 0 (a write ordered after the stream's earlier work, a
 *   system-scope fence before it); CU_STREAM_WRITE_VALUE_NO_MEMORY_BARRIER,
 *   which the v2 API does not support, is CUDA_ERROR_INVALID_VALUE;
 * - cuStreamBatchMemOp: 1..255 operations (count >= 256, a NULL array, or
 *   flags != 0: CUDA_ERROR_INVALID_VALUE; count 0 enqueues nothing), the
 *   four above plus CU_STREAM_MEM_OP_BARRIER (flags SYS or GPU), checked
 *   all before any is enqueued, then enqueued in array order.
 *
 * Execution: each operation is a stream operation (SIM_OP_MEMOP) run by the
 * stream's worker after the stream's earlier work completed (device work
 * posted to a server included), so a wait blocks its stream only, never the
 * thread that enqueued it, nor another stream. Host memory is read and
 * written in place with atomics (shared mappings: another process's write
 * releases the wait); a write wakes futex waiters of the word, and a wait
 * sleeps on the word's futex at most a millisecond at a time, so plain host
 * stores are seen too. Device memory is accessed in the process without
 * isolation, and with isolation through the device's server (a 4- or 8-byte
 * copy), a wait then polling with a growing pause (10 us to 1 ms). A fault
 * (memory freed meanwhile, a device that cannot reach it) is
 * CUDA_ERROR_ILLEGAL_ADDRESS, sticky like a kernel's; after a sticky error
 * a pending wait ends (the context is unusable, as on a GPU).
 *
 * Capture: the operations are captured like copies (one graph node each)
 * and run again at each cuGraphLaunch. */
#include "sim/driver/internal.h"
#include "sim/driver/capture.h"

#include <errno.h>
#include <limits.h>
#include <linux/futex.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

/* ---- checks at enqueue ---------------------------------------------------------------- */

/* Where the word lies: 1 host memory the process reaches (pinned,
 * registered), 0 device memory, -1 not a device address. */
static int word_place(CUdeviceptr addr, size_t len)
{
    uintptr_t base;
    size_t size;
    sim_ctx_t *c;
    int kind;
    if (sim_mem_lookup((uintptr_t)addr, &kind, &base, &size, &c) >= 0) {
        if (kind == SIM_R_DEVICE && (uintptr_t)addr - base > size - len)
            return -1;
        return 0;
    }
    sim_range_t rg;
    if (sim_range_find((uintptr_t)addr, &rg) &&
        (rg.kind == SIM_R_HOST || rg.kind == SIM_R_REGISTERED) &&
        (uintptr_t)addr - rg.base <= rg.size - len)
        return 1;
    return -1;
}

/* Checks one operation and describes it in *mo. */
static CUresult memop_fill(sim_memop_t *mo, int kind, CUdeviceptr addr, uint64_t value,
                           unsigned flags)
{
    size_t len = 0;
    memset(mo, 0, sizeof(*mo));
    switch (kind) {
    case CU_STREAM_MEM_OP_WAIT_VALUE_32:
    case CU_STREAM_MEM_OP_WAIT_VALUE_64:
        if (flags & CU_STREAM_WAIT_VALUE_FLUSH)
            return CUDA_ERROR_NOT_SUPPORTED;
        if (flags > CU_STREAM_WAIT_VALUE_NOR)
            return CUDA_ERROR_INVALID_VALUE;
        len = kind == CU_STREAM_MEM_OP_WAIT_VALUE_32 ? 4 : 8;
        break;
    case CU_STREAM_MEM_OP_WRITE_VALUE_32:
    case CU_STREAM_MEM_OP_WRITE_VALUE_64:
        if (flags != 0)
            return CUDA_ERROR_INVALID_VALUE;
        len = kind == CU_STREAM_MEM_OP_WRITE_VALUE_32 ? 4 : 8;
        break;
    case CU_STREAM_MEM_OP_BARRIER:
        if (flags != CU_STREAM_MEMORY_BARRIER_TYPE_SYS && flags != CU_STREAM_MEMORY_BARRIER_TYPE_GPU)
            return CUDA_ERROR_INVALID_VALUE;
        break;
    case CU_STREAM_MEM_OP_FLUSH_REMOTE_WRITES:
        return CUDA_ERROR_NOT_SUPPORTED;
    default:
        return CUDA_ERROR_INVALID_VALUE;
    }
    if (len) {
        if (!addr || addr % len)
            return CUDA_ERROR_INVALID_VALUE;
        int place = word_place(addr, len);
        if (place < 0)
            return CUDA_ERROR_INVALID_VALUE;
        mo->host = place;
    }
    if (len == 4)
        value = (uint32_t)value;
    mo->kind = kind;
    mo->addr = addr;
    mo->value = value;
    mo->flags = flags;
    return CUDA_SUCCESS;
}

static CUresult memop_one(CUstream h, int kind, CUdeviceptr addr, uint64_t value, unsigned flags)
{
    sim_stream_t *s;
    CUresult r = sim_stream_resolve(h, &s);
    if (r != CUDA_SUCCESS)
        return r;
    sim_memop_t mo;
    r = memop_fill(&mo, kind, addr, value, flags);
    if (r != CUDA_SUCCESS)
        return r;
    sim_op_t *op = sim_op_alloc(s);
    op->type = SIM_OP_MEMOP;
    op->u.mo = mo;
    return sim_enqueue(s, op);
}

/* ---- execution on the stream's worker -------------------------------------------------- */

static int is_wait(int kind)
{
    return kind == CU_STREAM_MEM_OP_WAIT_VALUE_32 || kind == CU_STREAM_MEM_OP_WAIT_VALUE_64;
}

static int is_64(int kind)
{
    return kind == CU_STREAM_MEM_OP_WAIT_VALUE_64 || kind == CU_STREAM_MEM_OP_WRITE_VALUE_64;
}

/* Is the wait's condition true of the word's value cur? */
static int cond_true(int bits64, unsigned how, uint64_t cur, uint64_t value)
{
    if (!bits64) {
        cur = (uint32_t)cur;
        value = (uint32_t)value;
    }
    switch (how) {
    case CU_STREAM_WAIT_VALUE_GEQ:
        return bits64 ? (int64_t)(cur - value) >= 0 : (int32_t)(uint32_t)(cur - value) >= 0;
    case CU_STREAM_WAIT_VALUE_EQ:
        return cur == value;
    case CU_STREAM_WAIT_VALUE_AND:
        return (cur & value) != 0;
    default: /* NOR */
        return bits64 ? ~(cur | value) != 0 : (uint32_t)~(cur | value) != 0;
    }
}

static uint64_t host_load(const sim_op_t *op)
{
    if (is_64(op->u.mo.kind))
        return __atomic_load_n((uint64_t *)(uintptr_t)op->u.mo.addr, __ATOMIC_ACQUIRE);
    return __atomic_load_n((uint32_t *)(uintptr_t)op->u.mo.addr, __ATOMIC_ACQUIRE);
}

/* Host memory: the whole operation, under the fault guard (sim_guarded). */
static void host_run(void *arg)
{
    sim_op_t *op = arg;
    int kind = op->u.mo.kind;
    uint32_t *word = (uint32_t *)(uintptr_t)op->u.mo.addr; /* the futex: low half */
    if (!is_wait(kind)) {
        if (is_64(kind))
            __atomic_store_n((uint64_t *)(uintptr_t)op->u.mo.addr, op->u.mo.value, __ATOMIC_SEQ_CST);
        else
            __atomic_store_n(word, (uint32_t)op->u.mo.value, __ATOMIC_SEQ_CST);
        syscall(SYS_futex, word, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
        return;
    }
    for (int spin = 0;; spin++) {
        uint64_t cur = host_load(op);
        if (cond_true(is_64(kind), op->u.mo.flags, cur, op->u.mo.value) || SIM_STICKY())
            return;
        if (spin < 64) {
            __builtin_ia32_pause();
            continue;
        }
        struct timespec to = {0, 1000000};
        syscall(SYS_futex, word, FUTEX_WAIT, (uint32_t)cur, &to, NULL, 0);
    }
}

/* Device memory with isolation: through the stream's device server. */
static CUresult dev_run(sim_stream_t *s, sim_op_t *op)
{
    int kind = op->u.mo.kind;
    size_t len = is_64(kind) ? 8 : 4;
    void *addr = (void *)(uintptr_t)op->u.mo.addr;
    _Alignas(8) unsigned char buf[8];
    if (!is_wait(kind)) {
        uint32_t v32 = (uint32_t)op->u.mo.value;
        if (len == 8)
            memcpy(buf, &op->u.mo.value, 8);
        else
            memcpy(buf, &v32, 4);
        __atomic_thread_fence(__ATOMIC_SEQ_CST);
        return sim_dc_copy(s, addr, buf, len, 0);
    }
    long pause_ns = 10000;
    for (;;) {
        CUresult r = sim_dc_copy(s, buf, addr, len, 0);
        if (r != CUDA_SUCCESS)
            return r;
        uint64_t cur = 0;
        if (len == 8) {
            memcpy(&cur, buf, 8);
        } else {
            uint32_t c32;
            memcpy(&c32, buf, 4);
            cur = c32;
        }
        if (cond_true(len == 8, op->u.mo.flags, cur, op->u.mo.value) || SIM_STICKY())
            return CUDA_SUCCESS;
        struct timespec ts = {0, pause_ns};
        nanosleep(&ts, NULL);
        if (pause_ns < 1000000)
            pause_ns *= 2;
    }
}

CUresult sim_memop_run(sim_stream_t *s, sim_op_t *op)
{
    if (op->u.mo.kind == CU_STREAM_MEM_OP_BARRIER) {
        __atomic_thread_fence(__ATOMIC_SEQ_CST);
        return CUDA_SUCCESS;
    }
    int wait = is_wait(op->u.mo.kind);
    if (wait && sim_chaos_on)
        sim_chaos_waiting(s, NULL, 1);
    CUresult r;
    if (op->u.mo.host || !sim_isolation)
        r = sim_guarded(host_run, op);
    else
        r = dev_run(s, op);
    if (wait && sim_chaos_on)
        sim_chaos_waiting(s, NULL, 0);
    return r;
}

/* ---- API -------------------------------------------------------------------------------- */
#define PT(h) ((h) == NULL ? CU_STREAM_PER_THREAD : (h))

CUresult cuStreamWaitValue32_v2(CUstream stream, CUdeviceptr addr, cuuint32_t value,
                                unsigned int flags)
{
    return memop_one(stream, CU_STREAM_MEM_OP_WAIT_VALUE_32, addr, value, flags);
}
CUresult cuStreamWaitValue32_v2_ptsz(CUstream stream, CUdeviceptr addr, cuuint32_t value,
                                     unsigned int flags)
{
    return cuStreamWaitValue32_v2(PT(stream), addr, value, flags);
}

CUresult cuStreamWaitValue64_v2(CUstream stream, CUdeviceptr addr, cuuint64_t value,
                                unsigned int flags)
{
    return memop_one(stream, CU_STREAM_MEM_OP_WAIT_VALUE_64, addr, value, flags);
}
CUresult cuStreamWaitValue64_v2_ptsz(CUstream stream, CUdeviceptr addr, cuuint64_t value,
                                     unsigned int flags)
{
    return cuStreamWaitValue64_v2(PT(stream), addr, value, flags);
}

CUresult cuStreamWriteValue32_v2(CUstream stream, CUdeviceptr addr, cuuint32_t value,
                                 unsigned int flags)
{
    return memop_one(stream, CU_STREAM_MEM_OP_WRITE_VALUE_32, addr, value, flags);
}
CUresult cuStreamWriteValue32_v2_ptsz(CUstream stream, CUdeviceptr addr, cuuint32_t value,
                                      unsigned int flags)
{
    return cuStreamWriteValue32_v2(PT(stream), addr, value, flags);
}

CUresult cuStreamWriteValue64_v2(CUstream stream, CUdeviceptr addr, cuuint64_t value,
                                 unsigned int flags)
{
    return memop_one(stream, CU_STREAM_MEM_OP_WRITE_VALUE_64, addr, value, flags);
}
CUresult cuStreamWriteValue64_v2_ptsz(CUstream stream, CUdeviceptr addr, cuuint64_t value,
                                      unsigned int flags)
{
    return cuStreamWriteValue64_v2(PT(stream), addr, value, flags);
}

CUresult cuStreamBatchMemOp_v2(CUstream stream, unsigned int count,
                               CUstreamBatchMemOpParams *paramArray, unsigned int flags)
{
    sim_stream_t *s;
    CUresult r = sim_stream_resolve(stream, &s);
    if (r != CUDA_SUCCESS)
        return r;
    if (flags != 0 || count >= 256 || (count && !paramArray))
        return CUDA_ERROR_INVALID_VALUE;
    sim_memop_t tmp[255];
    for (unsigned i = 0; i < count; i++) {
        const CUstreamBatchMemOpParams *p = &paramArray[i];
        int kind = p->operation;
        switch (kind) {
        case CU_STREAM_MEM_OP_WAIT_VALUE_32:
        case CU_STREAM_MEM_OP_WAIT_VALUE_64:
            r = memop_fill(&tmp[i], kind, p->waitValue.address,
                           kind == CU_STREAM_MEM_OP_WAIT_VALUE_32 ? p->waitValue.value
                                                                  : p->waitValue.value64,
                           p->waitValue.flags);
            break;
        case CU_STREAM_MEM_OP_WRITE_VALUE_32:
        case CU_STREAM_MEM_OP_WRITE_VALUE_64:
            r = memop_fill(&tmp[i], kind, p->writeValue.address,
                           kind == CU_STREAM_MEM_OP_WRITE_VALUE_32 ? p->writeValue.value
                                                                   : p->writeValue.value64,
                           p->writeValue.flags);
            break;
        case CU_STREAM_MEM_OP_BARRIER:
            r = memop_fill(&tmp[i], kind, 0, 0, p->memoryBarrier.flags);
            break;
        case CU_STREAM_MEM_OP_FLUSH_REMOTE_WRITES:
            r = p->flushRemoteWrites.flags ? CUDA_ERROR_INVALID_VALUE : CUDA_ERROR_NOT_SUPPORTED;
            break;
        default:
            r = CUDA_ERROR_INVALID_VALUE;
            break;
        }
        if (r != CUDA_SUCCESS)
            return r;
    }
    for (unsigned i = 0; i < count && r == CUDA_SUCCESS; i++) {
        sim_op_t *op = sim_op_alloc(s);
        op->type = SIM_OP_MEMOP;
        op->u.mo = tmp[i];
        r = sim_enqueue(s, op);
    }
    return r;
}
CUresult cuStreamBatchMemOp_v2_ptsz(CUstream stream, unsigned int count,
                                    CUstreamBatchMemOpParams *paramArray, unsigned int flags)
{
    return cuStreamBatchMemOp_v2(PT(stream), count, paramArray, flags);
}
