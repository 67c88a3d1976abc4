#!/usr/bin/env python3
"""Data-parallel trainer over the CUDA driver API, cuBLAS, cuDNN and NCCL.

A framework-free stand-in for a PyTorch DDP job, written with the Python
standard library only (ctypes). It loads libcuda.so.1, libcublas.so.13,
libcudnn.so.9 and libnccl.so.2 by soname, so the library path decides
between NVIDIA's libraries and simcuda's, and trains a small convolutional
network on a synthetic shape-classification task drawn from --seed:

  conv 3x3 (cuDNN, algorithm from the library's heuristic) + bias + ReLU
  -> 2x2 max pooling (cuDNN) -> fully connected 288->32 (cuBLAS) + bias +
  ReLU + dropout (each rank draws its mask on the device from a Philox
  counter-based generator, counter = (step, position in the global batch))
  -> fully connected 32->6 (cuBLAS) + bias + a learned per-bucket bias row
  picked by a hashed input feature -> softmax cross-entropy; SGD with
  momentum and weight decay.

Habits of a framework, each a source of nondeterminism the EasyScale shim has
to remove: a copy stream prefetching inputs (synchronised with events), a
communication stream for bucketed gradient all-reduce, bias-gradient
reductions sized from the device's SM count, a float-atomic scatter-add for
the bucket table's gradient (default; --deterministic-kernels selects an
ordered kernel), and the first algorithm cuDNN's heuristic returns
(--cudnn-deterministic keeps only results marked deterministic, like
torch.backends.cudnn.deterministic).

Data parallel like torchrun + DDP: RANK, WORLD_SIZE, LOCAL_RANK from the
environment; device LOCAL_RANK % deviceCount; rank 0 creates the NCCL
unique id and hands it to the other ranks in one of two ways:
  - a rendezvous directory (--rdzv, default $ES_RDZV_DIR) on a file system
    all ranks share: the id is a file written atomically (tmp + rename;
    rank 0 removes it once all ranks have joined). When given, it wins.
  - otherwise TCP at MASTER_ADDR:MASTER_PORT, as torchrun sets them (no
    shared directory needed: ranks on several hosts). Rank 0 listens there
    (SO_REUSEADDR) from the start, and once it has the id serves it from a
    thread while it goes on into ncclCommInitRank; every other rank
    connects (retrying every 0.1 s while refused), sends a hello (the 8
    bytes "ESRDZV1" and a zero, its rank and the world size as 32-bit
    little-endian) and reads the id's 128 bytes. Rank 0 closes a
    connection with a bad hello without counting it, and closes the
    listener once every other rank has the id. MASTER_PORT must be an
    integer in [1, 65535]. Either side gives up after --rdzv-timeout
    seconds with one line naming MASTER_ADDR:MASTER_PORT (rank 0 counts
    from the moment it has the id, the others from their start).
  With WORLD_SIZE > 1 and neither, the run stops with a line naming both.
Initial weights are broadcast from rank 0; gradients live in one flat
buffer and are all-reduced in fixed-size buckets; rank r reads shard r of
every global batch and draws that shard's part of the step's dropout mask,
so --batch alone defines the update: 1, 2 or 4 ranks take the same
mathematical step and differ only in float reduction order
(tests/examples: test_world_sizes_same_update).
Host-to-device copies go on the stream that consumes them (our streams are
non-blocking: they do not wait for the legacy stream).

Output: loss and accuracy every --log-every steps (rank 0), held-out
accuracy at the end (rank 0), and on every rank a final line
"checksum <sha256 of all parameters>"; the ranks compare their digests with
an NCCL all-gather and exit non-zero when they differ.

Kernels come from a fatbin built from examples/kernels.cu (--kernels PATH,
else $ES_BUILD/examples/kernels.fatbin, else build/examples/ in the repo).
"""

import argparse
import ctypes
import errno
import hashlib
import math
import os
import random
import socket
import struct
import sys
import threading
import time
from ctypes import byref, c_float, c_int, c_size_t, c_uint, c_uint64, c_void_p

PROG = "train.py"


class TrainError(Exception):
    """An expected failure: reported as one line, exit status 1."""


def say(msg, err=False):
    """One whole line in one write(2), so lines of several ranks sharing a
    pipe never interleave mid-line."""
    data = (msg + "\n").encode(errors="replace")
    fd = 2 if err else 1
    try:
        sys.stdout.flush()
        while data:
            n = os.write(fd, data)
            data = data[n:]
    except OSError:
        pass


# --------------------------------------------------------------------------
# Task: synthetic shapes on a 12x12 image with noise.

IMG = 12
CLASSES = 6
BUCKETS = 4
CONV_CH = 8
POOLED = CONV_CH * (IMG // 2) * (IMG // 2)  # 288
HIDDEN = 32
CLASS_NAMES = ("horizontal", "vertical", "diagonal", "antidiagonal", "square", "plus")
TEST_STREAM = 1 << 40  # held-out samples come from another index range


def make_sample(seed, index):
    """Image (list of IMG*IMG floats), label, bucket id for sample index."""
    rng = random.Random(seed * 0x9E3779B97F4A7C15 + index)
    px = [rng.uniform(-0.4, 0.4) for _ in range(IMG * IMG)]
    label = rng.randrange(CLASSES)
    amp = rng.uniform(0.7, 1.3)
    pts = []
    if label == 0 or label == 1:
        length = rng.randint(4, 8)
        a = rng.randrange(0, IMG - length + 1)
        b = rng.randrange(0, IMG)
        pts = [(b, a + i) if label == 0 else (a + i, b) for i in range(length)]
    elif label == 2 or label == 3:
        length = rng.randint(4, 7)
        r0 = rng.randrange(0, IMG - length + 1)
        c0 = rng.randrange(0, IMG - length + 1)
        if label == 2:
            pts = [(r0 + i, c0 + i) for i in range(length)]
        else:
            pts = [(r0 + length - 1 - i, c0 + i) for i in range(length)]
    elif label == 4:
        size = rng.randint(4, 6)
        r0 = rng.randrange(0, IMG - size + 1)
        c0 = rng.randrange(0, IMG - size + 1)
        for i in range(size):
            pts += [(r0, c0 + i), (r0 + size - 1, c0 + i), (r0 + i, c0), (r0 + i, c0 + size - 1)]
    else:
        arm = rng.randint(1, 3)
        rc = rng.randrange(arm, IMG - arm)
        cc = rng.randrange(arm, IMG - arm)
        for i in range(-arm, arm + 1):
            pts += [(rc + i, cc), (rc, cc + i)]
    for r, c in set(pts):
        px[r * IMG + c] += amp
    # Hashed input feature: the cell of the brightest pixel on a 4x4 grid.
    top = max(range(IMG * IMG), key=px.__getitem__)
    cell = (top // IMG) // 3 * 4 + (top % IMG) // 3
    bucket = (((cell * 2654435761) & 0xFFFFFFFF) >> 16) % BUCKETS
    return px, label, bucket


# --------------------------------------------------------------------------
# Dropout mask: the host-side reference of es_dropout_mask (examples/
# es_kmath.h), bit for bit; torch_ddp.py uses it so that its dropout is the
# device kernel's. Key (seed, constant), counter (global element index,
# step), Philox4x32-10, first output word, 24-bit uniform, kept when u >= p.

M32 = 0xFFFFFFFF


def philox_word0(c0, c1, k0, k1):
    c2 = c3 = 0
    for _ in range(10):
        p0 = 0xD2511F53 * c0
        p1 = 0xCD9E8D57 * c2
        c0, c1, c2, c3 = (p1 >> 32) ^ c1 ^ k0, p1 & M32, (p0 >> 32) ^ c3 ^ k1, p0 & M32
        k0 = (k0 + 0x9E3779B9) & M32
        k1 = (k1 + 0xBB67AE85) & M32
    return c0


def dropout_mask(seed, step, first_row, rows, cols, p):
    """Multipliers (0.0 or float32(1/(1-p))) for rows first_row.. of the
    global batch at this step, row-major, as the device draws them."""
    p32 = struct.unpack("<f", struct.pack("<f", p))[0]
    keep = struct.unpack("<f", struct.pack("<f", 1.0 / (1.0 - p)))[0]
    seed &= M32
    step &= M32
    base = first_row * cols
    out = []
    for i in range(rows * cols):
        u = (philox_word0((base + i) & M32, step, seed, 0x7F4A7C15) >> 8) * (1.0 / 16777216.0)
        out.append(keep if u >= p32 else 0.0)
    return out


# --------------------------------------------------------------------------
# Libraries.

class Lib:
    """A library loaded by soname whose functions return a status (0 = OK)."""

    def __init__(self, soname, names):
        self.soname = soname
        try:
            self.lib = ctypes.CDLL(soname)
        except OSError as e:
            raise TrainError(f"cannot load {soname}: {e}") from None
        self.fn = {}
        for name in names:
            try:
                f = getattr(self.lib, name)
            except AttributeError:
                raise TrainError(f"{soname} has no function {name}") from None
            f.restype = c_int
            self.fn[name] = f

    def errstr(self, rc):
        return str(rc)

    def __call__(self, name, *args):
        rc = self.fn[name](*args)
        if rc != 0:
            raise TrainError(f"{name} failed: {self.errstr(rc)}")


class Cuda(Lib):
    NAMES = ("cuInit", "cuDeviceGetCount", "cuDeviceGet", "cuDeviceGetAttribute",
             "cuDeviceGetName", "cuDevicePrimaryCtxRetain", "cuDevicePrimaryCtxRelease_v2",
             "cuCtxSetCurrent", "cuCtxSynchronize", "cuModuleLoadData",
             "cuModuleGetFunction", "cuModuleUnload", "cuMemAlloc_v2", "cuMemFree_v2",
             "cuMemAllocHost_v2", "cuMemFreeHost",
             "cuMemcpyDtoH_v2", "cuMemcpyHtoDAsync_v2",
             "cuMemsetD32Async", "cuStreamCreate", "cuStreamDestroy_v2",
             "cuStreamSynchronize", "cuStreamWaitEvent", "cuEventCreate", "cuEventRecord",
             "cuEventSynchronize", "cuEventDestroy_v2", "cuLaunchKernel", "cuGetErrorName")

    def __init__(self):
        super().__init__("libcuda.so.1", self.NAMES)

    def errstr(self, rc):
        s = ctypes.c_char_p()
        if self.fn["cuGetErrorName"](c_int(rc), byref(s)) == 0 and s.value:
            return f"{s.value.decode(errors='replace')} ({rc})"
        return f"CUresult {rc}"


class Cublas(Lib):
    NAMES = ("cublasCreate_v2", "cublasDestroy_v2", "cublasSetStream_v2", "cublasSgemm_v2")

    def __init__(self):
        super().__init__("libcublas.so.13", self.NAMES)

    def errstr(self, rc):
        try:
            f = self.lib.cublasGetStatusName
            f.restype = ctypes.c_char_p
            return f"{f(c_int(rc)).decode(errors='replace')} ({rc})"
        except (AttributeError, OSError):
            return f"cublasStatus {rc}"


class Cudnn(Lib):
    NAMES = ("cudnnCreate", "cudnnDestroy", "cudnnSetStream", "cudnnCreateTensorDescriptor",
             "cudnnSetTensor4dDescriptor", "cudnnCreateFilterDescriptor",
             "cudnnSetFilter4dDescriptor", "cudnnCreateConvolutionDescriptor",
             "cudnnSetConvolution2dDescriptor", "cudnnCreatePoolingDescriptor",
             "cudnnSetPooling2dDescriptor", "cudnnCreateActivationDescriptor",
             "cudnnSetActivationDescriptor", "cudnnGetConvolutionForwardAlgorithm_v7",
             "cudnnGetConvolutionBackwardFilterAlgorithm_v7",
             "cudnnGetConvolutionForwardWorkspaceSize",
             "cudnnGetConvolutionBackwardFilterWorkspaceSize", "cudnnConvolutionForward",
             "cudnnConvolutionBackwardFilter", "cudnnAddTensor", "cudnnActivationForward",
             "cudnnActivationBackward", "cudnnPoolingForward", "cudnnPoolingBackward")

    def __init__(self):
        super().__init__("libcudnn.so.9", self.NAMES)

    def errstr(self, rc):
        try:
            f = self.lib.cudnnGetErrorString
            f.restype = ctypes.c_char_p
            return f"{f(c_int(rc)).decode(errors='replace')} ({rc})"
        except (AttributeError, OSError):
            return f"cudnnStatus {rc}"


class Nccl(Lib):
    NAMES = ("ncclGetUniqueId", "ncclCommInitRank", "ncclCommDestroy", "ncclAllReduce",
             "ncclBroadcast", "ncclAllGather")

    def __init__(self):
        super().__init__("libnccl.so.2", self.NAMES)

    def errstr(self, rc):
        try:
            f = self.lib.ncclGetErrorString
            f.restype = ctypes.c_char_p
            return f"{f(c_int(rc)).decode(errors='replace')} ({rc})"
        except (AttributeError, OSError):
            return f"ncclResult {rc}"


class NcclUniqueId(ctypes.Structure):
    _fields_ = [("internal", ctypes.c_char * 128)]


class ConvPerf(ctypes.Structure):
    """cudnnConvolution{Fwd,BwdFilter}AlgoPerf_t (same layout)."""
    _fields_ = [("algo", c_int), ("status", c_int), ("time", c_float), ("memory", c_size_t),
                ("determinism", c_int), ("mathType", c_int), ("reserved", c_int * 3)]


# Enumerations (cuda.h, cublas_api.h, cudnn_*.h, nccl.h).
CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT = 16
CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR = 75
CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR = 76
CU_STREAM_NON_BLOCKING = 1
CU_EVENT_DISABLE_TIMING = 2
CUBLAS_OP_N, CUBLAS_OP_T = 0, 1
CUDNN_TENSOR_NCHW = 0
CUDNN_DATA_FLOAT = 0
CUDNN_CROSS_CORRELATION = 1
CUDNN_ACTIVATION_RELU = 1
CUDNN_NOT_PROPAGATE_NAN = 0
CUDNN_POOLING_MAX = 0
CUDNN_POOLING_MAX_DETERMINISTIC = 3
CUDNN_STATUS_SUCCESS = 0
CUDNN_DETERMINISTIC = 1
NCCL_UINT8, NCCL_FLOAT = 1, 7
NCCL_SUM = 0

ONE = c_float(1.0)
ZERO = c_float(0.0)
EW_BLOCK = 256       # elementwise kernels
RED_TREE = 128       # reduction kernels: virtual threads of their tree (power of two)
RED_PER_SM = 2       # partial sums per SM in the first reduction pass


def ptr(p):
    return c_void_p(p)


# --------------------------------------------------------------------------
# Device state.

class Device:
    def __init__(self, cuda, local_rank, kernels_path):
        self.cuda = cuda
        cuda("cuInit", c_uint(0))
        n = c_int()
        cuda("cuDeviceGetCount", byref(n))
        if n.value < 1:
            raise TrainError("no CUDA device")
        self.ordinal = local_rank % n.value
        self.count = n.value
        self.dev = c_int()
        cuda("cuDeviceGet", byref(self.dev), c_int(self.ordinal))
        name = ctypes.create_string_buffer(256)
        cuda("cuDeviceGetName", name, c_int(256), self.dev)
        self.name = name.value.decode(errors="replace")
        self.sm_count = self.attr(CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)
        self.cc = (self.attr(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR),
                   self.attr(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR))
        self.ctx = c_void_p()
        cuda("cuDevicePrimaryCtxRetain", byref(self.ctx), self.dev)
        cuda("cuCtxSetCurrent", self.ctx)
        try:
            with open(kernels_path, "rb") as f:
                image = f.read()
        except OSError as e:
            raise TrainError(f"cannot read kernels {kernels_path}: {e.strerror}") from None
        self.image = ctypes.create_string_buffer(image, len(image))
        self.module = c_void_p()
        cuda("cuModuleLoadData", byref(self.module), self.image)
        self.funcs = {}
        for k in ("es_bias_relu_dropout", "es_logits_bias", "es_softmax_xent",
                  "es_stats_accum", "es_table_grad_atomic", "es_table_grad_det",
                  "es_relu_dropout_bwd", "es_reduce_partial", "es_reduce_final",
                  "es_sgd_momentum"):
            f = c_void_p()
            cuda("cuModuleGetFunction", byref(f), self.module, k.encode())
            self.funcs[k] = f
        self.allocs = []
        self.host_allocs = []
        # Launch arguments stay referenced until the step that used them is
        # known to be done (the driver copies them, but cheap insurance).
        self.keep = [[], [], []]

    def attr(self, a):
        v = c_int()
        self.cuda("cuDeviceGetAttribute", byref(v), c_int(a), self.dev)
        return v.value

    def alloc(self, nbytes):
        p = c_uint64()
        self.cuda("cuMemAlloc_v2", byref(p), c_size_t(max(nbytes, 4)))
        self.allocs.append(p.value)
        return p.value

    def alloc_host(self, nbytes):
        """Page-locked host memory (so copies from it are truly
        asynchronous), as a writable ctypes buffer."""
        p = c_void_p()
        self.cuda("cuMemAllocHost_v2", byref(p), c_size_t(max(nbytes, 4)))
        self.host_allocs.append(p.value)
        return (ctypes.c_char * nbytes).from_address(p.value)

    def stream(self):
        s = c_void_p()
        self.cuda("cuStreamCreate", byref(s), c_uint(CU_STREAM_NON_BLOCKING))
        return s

    def event(self):
        e = c_void_p()
        self.cuda("cuEventCreate", byref(e), c_uint(CU_EVENT_DISABLE_TIMING))
        return e

    def launch(self, name, grid, block, args, stream, slot):
        params = (c_void_p * len(args))(*[ctypes.addressof(a) for a in args])
        self.keep[slot].append((args, params))
        gx, gy = grid if isinstance(grid, tuple) else (grid, 1)
        self.cuda("cuLaunchKernel", self.funcs[name], c_uint(gx), c_uint(gy), c_uint(1),
                  c_uint(block), c_uint(1), c_uint(1), c_uint(0), stream, params, None)

    def ew(self, name, n, args, stream, slot):
        """Elementwise launch: one thread per element."""
        if n > 0:
            self.launch(name, (n + EW_BLOCK - 1) // EW_BLOCK, EW_BLOCK, args, stream, slot)

    def memset0(self, p, nfloats, stream):
        self.cuda("cuMemsetD32Async", c_uint64(p), c_uint(0), c_size_t(nfloats), stream)


# --------------------------------------------------------------------------
# Parameters: one flat buffer, tensors 64-float aligned, fixed order.

PARAMS = (  # name, shape, fan_in for init, init kind
    ("conv.weight", (CONV_CH, 1, 3, 3), 9, "he"),
    ("conv.bias", (CONV_CH,), 9, "zero"),
    ("fc1.weight", (HIDDEN, POOLED), POOLED, "he"),
    ("fc1.bias", (HIDDEN,), POOLED, "zero"),
    ("fc2.weight", (CLASSES, HIDDEN), HIDDEN, "lecun"),
    ("fc2.bias", (CLASSES,), HIDDEN, "zero"),
    ("bucket.table", (BUCKETS, CLASSES), 1, "zero"),
)


class Layout:
    def __init__(self):
        self.off = {}
        self.size = {}
        self.order = []
        n = 0
        for name, shape, _, _ in PARAMS:
            k = 1
            for d in shape:
                k *= d
            self.off[name] = n
            self.size[name] = k
            self.order.append(name)
            n += (k + 63) // 64 * 64
        self.total = n

    def init_values(self, seed):
        rng = random.Random(seed * 1000003 + 17)
        vals = [0.0] * self.total
        for name, _, fan_in, kind in PARAMS:
            o, k = self.off[name], self.size[name]
            if kind == "zero":
                continue
            bound = math.sqrt(6.0 / fan_in) if kind == "he" else math.sqrt(3.0 / fan_in)
            for i in range(k):
                vals[o + i] = rng.uniform(-bound, bound)
        return (c_float * self.total)(*vals)

    def buckets(self, cap_floats):
        """DDP-style buckets: tensors in reverse order, a new bucket when the
        cap would be exceeded; each bucket a contiguous range of the flat
        buffer (start, count, names)."""
        out = []
        cur = []
        for name in reversed(self.order):
            if cur and self.span(cur + [name]) > cap_floats:
                out.append(cur)
                cur = []
            cur.append(name)
        if cur:
            out.append(cur)
        res = []
        for names in out:
            start = min(self.off[n] for n in names)
            res.append((start, self.span(names), tuple(names)))
        return res

    def even_buckets(self, n):
        """n buckets of (nearly) equal size, 64-float aligned, cut from the
        end of the flat buffer (the order gradients are produced in); a
        tensor may span several. Each: (start, count, names it covers)."""
        units = self.total // 64
        n = min(n, units)
        res = []
        hi = units
        for i in range(n):
            lo = units * (n - i - 1) // n
            a, b = lo * 64, hi * 64
            names = tuple(m for m in reversed(self.order)
                          if self.off[m] < b and self.off[m] + self.size[m] > a)
            res.append((a, b - a, names))
            hi = lo
        return res

    def span(self, names):
        lo = min(self.off[n] for n in names)
        hi = max(self.off[n] + (self.size[n] + 63) // 64 * 64 for n in names)
        return hi - lo


# --------------------------------------------------------------------------
# The trainer.

class Trainer:
    def __init__(self, args, rank, world, local_rank, tcp=None):
        self.args = args
        self.rank, self.world = rank, world
        self.tcp = tcp  # TcpRendezvous, or None: the rendezvous directory
        self.cuda = Cuda()
        self.cublas = Cublas()
        self.cudnn = Cudnn()
        self.nccl = Nccl()
        self.d = Device(self.cuda, local_rank, args.kernels)
        d = self.d
        self.b = args.batch // world
        self.compute = d.stream()
        self.copy = d.stream()
        self.comm = d.stream()
        self.lay = Layout()
        self.setup_libraries()
        self.setup_memory()
        self.setup_nccl()

    # ---- cuBLAS / cuDNN ------------------------------------------------
    def setup_libraries(self):
        cb, dn, b = self.cublas, self.cudnn, self.b
        self.blas = c_void_p()
        cb("cublasCreate_v2", byref(self.blas))
        cb("cublasSetStream_v2", self.blas, self.compute)
        self.dnn = c_void_p()
        dn("cudnnCreate", byref(self.dnn))
        dn("cudnnSetStream", self.dnn, self.compute)

        def tensor(n, c, h, w):
            t = c_void_p()
            dn("cudnnCreateTensorDescriptor", byref(t))
            dn("cudnnSetTensor4dDescriptor", t, c_int(CUDNN_TENSOR_NCHW),
               c_int(CUDNN_DATA_FLOAT), c_int(n), c_int(c), c_int(h), c_int(w))
            return t

        self.x_desc = tensor(b, 1, IMG, IMG)
        self.y_desc = tensor(b, CONV_CH, IMG, IMG)
        self.p_desc = tensor(b, CONV_CH, IMG // 2, IMG // 2)
        self.bias_desc = tensor(1, CONV_CH, 1, 1)
        self.w_desc = c_void_p()
        dn("cudnnCreateFilterDescriptor", byref(self.w_desc))
        dn("cudnnSetFilter4dDescriptor", self.w_desc, c_int(CUDNN_DATA_FLOAT),
           c_int(CUDNN_TENSOR_NCHW), c_int(CONV_CH), c_int(1), c_int(3), c_int(3))
        self.conv_desc = c_void_p()
        dn("cudnnCreateConvolutionDescriptor", byref(self.conv_desc))
        dn("cudnnSetConvolution2dDescriptor", self.conv_desc, c_int(1), c_int(1), c_int(1),
           c_int(1), c_int(1), c_int(1), c_int(CUDNN_CROSS_CORRELATION),
           c_int(CUDNN_DATA_FLOAT))
        self.pool_desc = c_void_p()
        dn("cudnnCreatePoolingDescriptor", byref(self.pool_desc))
        mode = CUDNN_POOLING_MAX_DETERMINISTIC if self.args.cudnn_deterministic else CUDNN_POOLING_MAX
        dn("cudnnSetPooling2dDescriptor", self.pool_desc, c_int(mode),
           c_int(CUDNN_NOT_PROPAGATE_NAN), c_int(2), c_int(2), c_int(0), c_int(0), c_int(2),
           c_int(2))
        self.act_desc = c_void_p()
        dn("cudnnCreateActivationDescriptor", byref(self.act_desc))
        dn("cudnnSetActivationDescriptor", self.act_desc, c_int(CUDNN_ACTIVATION_RELU),
           c_int(CUDNN_NOT_PROPAGATE_NAN), ctypes.c_double(0.0))

        # Algorithms: the heuristic's first usable result (benchmark=False);
        # with --cudnn-deterministic the first one marked deterministic.
        self.fwd_algo = self.pick_algo("cudnnGetConvolutionForwardAlgorithm_v7",
                                       (self.x_desc, self.w_desc, self.conv_desc, self.y_desc))
        self.bwf_algo = self.pick_algo("cudnnGetConvolutionBackwardFilterAlgorithm_v7",
                                       (self.x_desc, self.y_desc, self.conv_desc, self.w_desc))
        ws1, ws2 = c_size_t(), c_size_t()
        dn("cudnnGetConvolutionForwardWorkspaceSize", self.dnn, self.x_desc, self.w_desc,
           self.conv_desc, self.y_desc, c_int(self.fwd_algo), byref(ws1))
        dn("cudnnGetConvolutionBackwardFilterWorkspaceSize", self.dnn, self.x_desc,
           self.y_desc, self.conv_desc, self.w_desc, c_int(self.bwf_algo), byref(ws2))
        self.ws_size = max(ws1.value, ws2.value)
        self.ws = self.d.alloc(self.ws_size) if self.ws_size else 0

    def pick_algo(self, fname, descs):
        perf = (ConvPerf * 16)()
        got = c_int()
        self.cudnn(fname, self.dnn, *descs, c_int(16), byref(got), perf)
        for i in range(min(got.value, 16)):
            p = perf[i]
            if p.status != CUDNN_STATUS_SUCCESS:
                continue
            if self.args.cudnn_deterministic and p.determinism != CUDNN_DETERMINISTIC:
                continue
            return p.algo
        what = "deterministic " if self.args.cudnn_deterministic else ""
        raise TrainError(f"{fname} returned no usable {what}algorithm")

    # ---- memory ----------------------------------------------------------
    def setup_memory(self):
        d, b, lay = self.d, self.b, self.lay
        f = 4
        self.params = d.alloc(lay.total * f)
        self.grads = d.alloc(lay.total * f)
        self.momentum = d.alloc(lay.total * f)
        self.P = {n: self.params + lay.off[n] * f for n in lay.order}
        self.G = {n: self.grads + lay.off[n] * f for n in lay.order}
        # Input slots: images, labels, bucket ids in one block per slot.
        self.in_img = b * IMG * IMG * f
        self.in_bytes = self.in_img + 2 * b * 4
        self.slots = [d.alloc(self.in_bytes) for _ in range(2)]
        # Pinned, double-buffered: a copy from one buffer runs on the copy
        # stream while the other is refilled (prefetch waits on ev_copied
        # before refilling).
        self.host = [d.alloc_host(self.in_bytes) for _ in range(2)]
        self.ev_copied = [d.event() for _ in range(2)]
        self.ev_consumed = [d.event() for _ in range(2)]
        self.ev_done = [d.event() for _ in range(3)]
        self.ev_grad = d.event()
        self.ev_comm = d.event()
        self.copy_pending = [False, False]
        # Activations.
        self.a1 = d.alloc(b * CONV_CH * IMG * IMG * f)      # conv + bias + relu
        self.da1 = d.alloc(b * CONV_CH * IMG * IMG * f)
        self.dy1 = d.alloc(b * CONV_CH * IMG * IMG * f)
        self.p1 = d.alloc(b * POOLED * f)
        self.dp1 = d.alloc(b * POOLED * f)
        self.h = d.alloc(b * HIDDEN * f)
        self.mask = d.alloc(b * HIDDEN * f)
        self.dh = d.alloc(b * HIDDEN * f)
        self.z = d.alloc(b * CLASSES * f)
        self.dz = d.alloc(b * CLASSES * f)
        self.loss = d.alloc(b * f)
        self.correct = d.alloc(b * f)
        self.stats = d.alloc(4 * f)
        # Ballast (--ballast-mib): device memory the step rewrites, so that an
        # EST's footprint (what a swap moves) is that of a larger model.
        self.ballast = d.alloc(self.args.ballast_mib << 20) if self.args.ballast_mib else 0
        self.nparts = d.sm_count * RED_PER_SM
        self.partial = d.alloc(self.nparts * max(CONV_CH, HIDDEN, CLASSES) * f)
        # Initial values: rank 0's are broadcast; the others start from their
        # own draw so a missing broadcast could not go unnoticed.
        init = lay.init_values(self.args.seed if self.rank == 0 else self.args.seed + 7919 * self.rank)
        # On the compute stream, which then broadcasts them: a synchronous
        # cuMemcpyHtoD from pageable memory may return before the data has
        # landed, and it does not order with our non-blocking streams.
        self.cuda("cuMemcpyHtoDAsync_v2", c_uint64(self.params), init, c_size_t(lay.total * f),
                  self.compute)
        d.memset0(self.momentum, lay.total, self.compute)
        d.memset0(self.stats, 4, self.compute)
        self.cuda("cuStreamSynchronize", self.compute)  # init is freed on return

    # ---- NCCL ------------------------------------------------------------
    def setup_nccl(self):
        uid = NcclUniqueId()
        if self.rank == 0:
            self.nccl("ncclGetUniqueId", byref(uid))
            if self.world > 1:
                raw = ctypes.string_at(ctypes.addressof(uid), 128)
                if self.tcp:
                    self.tcp.serve(raw)
                else:
                    publish_id(self.args.rdzv, raw)
        else:
            if self.tcp:
                raw = self.tcp.fetch()
            else:
                raw = wait_id(self.args.rdzv, self.args.rdzv_timeout)
            ctypes.memmove(ctypes.addressof(uid), raw, 128)
        self.comm_h = c_void_p()
        self.nccl("ncclCommInitRank", byref(self.comm_h), c_int(self.world), uid, c_int(self.rank))
        if self.rank == 0 and self.tcp:
            self.tcp.done()  # every rank has joined, so has the id: the listener is closed
        elif self.rank == 0 and self.world > 1:
            # Every rank has joined, so every rank has read the id: remove it,
            # so that a later job reusing the directory never reads a stale id.
            try:
                os.unlink(os.path.join(self.args.rdzv, RDZV_FILE))
            except OSError:
                pass
        if self.args.buckets:
            self.bucket_list = self.lay.even_buckets(self.args.buckets)
        else:
            self.bucket_list = self.lay.buckets(self.args.bucket_kb * 256)
        self.bucket_of = {}
        for i, (_, _, names) in enumerate(self.bucket_list):
            for n in names:
                self.bucket_of.setdefault(n, []).append(i)

    # ---- one step ----------------------------------------------------------
    def fill_host(self, slot, first_index):
        """Shard of the global batch starting at first_index for this rank."""
        b = self.b
        img, lab, ids = [], [], []
        for j in range(b):
            px, label, bucket = make_sample(self.args.seed, first_index + self.rank * b + j)
            img += px
            lab.append(label)
            ids.append(bucket)
        buf = self.host[slot]
        struct.pack_into(f"<{b * IMG * IMG}f", buf, 0, *img)
        struct.pack_into(f"<{b}i{b}i", buf, self.in_img, *lab, *ids)

    def prefetch(self, slot, first_index):
        cu = self.cuda
        if self.copy_pending[slot]:
            # The previous copy from this host buffer must be done before
            # the buffer is refilled.
            cu("cuEventSynchronize", self.ev_copied[slot])
        self.fill_host(slot, first_index)
        # The device slot may still be read by the step before last.
        cu("cuStreamWaitEvent", self.copy, self.ev_consumed[slot], c_uint(0))
        cu("cuMemcpyHtoDAsync_v2", c_uint64(self.slots[slot]), self.host[slot],
           c_size_t(self.in_bytes), self.copy)
        cu("cuEventRecord", self.ev_copied[slot], self.copy)
        self.copy_pending[slot] = True

    def forward(self, slot, step, train, ks):
        d, cb, dn, b = self.d, self.cublas, self.cudnn, self.b
        st = self.compute
        x = self.slots[slot]
        labels = x + self.in_img
        ids = labels + b * 4
        P = self.P
        dn("cudnnConvolutionForward", self.dnn, byref(ONE), self.x_desc, ptr(x), self.w_desc,
           ptr(P["conv.weight"]), self.conv_desc, c_int(self.fwd_algo), ptr(self.ws),
           c_size_t(self.ws_size), byref(ZERO), self.y_desc, ptr(self.a1))
        dn("cudnnAddTensor", self.dnn, byref(ONE), self.bias_desc, ptr(P["conv.bias"]),
           byref(ONE), self.y_desc, ptr(self.a1))
        dn("cudnnActivationForward", self.dnn, self.act_desc, byref(ONE), self.y_desc,
           ptr(self.a1), byref(ZERO), self.y_desc, ptr(self.a1))
        dn("cudnnPoolingForward", self.dnn, self.pool_desc, byref(ONE), self.y_desc,
           ptr(self.a1), byref(ZERO), self.p_desc, ptr(self.p1))
        # h[b, 32] = p1[b, 288] . W1^T (row-major views of column-major GEMMs)
        cb("cublasSgemm_v2", self.blas, c_int(CUBLAS_OP_T), c_int(CUBLAS_OP_N), c_int(HIDDEN),
           c_int(b), c_int(POOLED), byref(ONE), ptr(P["fc1.weight"]), c_int(POOLED),
           ptr(self.p1), c_int(POOLED), byref(ZERO), ptr(self.h), c_int(HIDDEN))
        p = self.args.dropout
        d.ew("es_bias_relu_dropout", b * HIDDEN,
             [c_uint64(self.h), c_uint64(P["fc1.bias"]), c_uint64(self.mask), c_int(b),
              c_int(HIDDEN), c_float(p), c_float(1.0 / (1.0 - p)),
              c_uint(self.args.seed & 0xFFFFFFFF), c_uint(self.rank * b), c_uint(step),
              c_int(1 if train else 0)], st, ks)
        cb("cublasSgemm_v2", self.blas, c_int(CUBLAS_OP_T), c_int(CUBLAS_OP_N), c_int(CLASSES),
           c_int(b), c_int(HIDDEN), byref(ONE), ptr(P["fc2.weight"]), c_int(HIDDEN),
           ptr(self.h), c_int(HIDDEN), byref(ZERO), ptr(self.z), c_int(CLASSES))
        d.ew("es_logits_bias", b * CLASSES,
             [c_uint64(self.z), c_uint64(P["fc2.bias"]), c_uint64(P["bucket.table"]),
              c_uint64(ids), c_int(b), c_int(CLASSES), c_int(BUCKETS)], st, ks)
        d.ew("es_softmax_xent", b,
             [c_uint64(self.z), c_uint64(labels), c_uint64(self.dz), c_uint64(self.loss),
              c_uint64(self.correct), c_int(b), c_int(CLASSES), c_float(1.0 / b)], st, ks)
        d.launch("es_stats_accum", 1, 1, [c_uint64(self.loss), c_uint64(self.correct), c_int(b),
                                          c_uint64(self.stats)], st, ks)

    def bias_grad(self, src, outer, channels, inner, out, ks):
        """Per-channel sum: SM-count-sized first pass, then a second pass."""
        d = self.d
        d.launch("es_reduce_partial", (self.nparts, channels), 1,
                 [c_uint64(src), c_uint64(self.partial), c_int(outer), c_int(channels),
                  c_int(inner), c_int(RED_TREE)], self.compute, ks)
        d.launch("es_reduce_final", channels, 1,
                 [c_uint64(self.partial), c_uint64(out), c_int(self.nparts), c_int(RED_TREE)],
                 self.compute, ks)

    def grad_ready(self, name, ks):
        """DDP's bucket hook: all-reduce a bucket on the communication stream
        as soon as its last gradient is produced."""
        ready = []
        for i in self.bucket_of[name]:
            self.pending[i] -= 1
            if not self.pending[i]:
                ready.append(i)
        if not ready:
            return
        cu = self.cuda
        cu("cuEventRecord", self.ev_grad, self.compute)
        cu("cuStreamWaitEvent", self.comm, self.ev_grad, c_uint(0))
        for i in ready:
            start, count, _ = self.bucket_list[i]
            p = self.grads + start * 4
            self.nccl("ncclAllReduce", ptr(p), ptr(p), c_size_t(count), c_int(NCCL_FLOAT),
                      c_int(NCCL_SUM), self.comm_h, self.comm)

    def backward(self, slot, ks):
        d, cb, dn, b = self.d, self.cublas, self.cudnn, self.b
        st = self.compute
        x = self.slots[slot]
        ids = x + self.in_img + b * 4
        P, G = self.P, self.G
        self.pending = [len(names) for _, _, names in self.bucket_list]
        d.memset0(self.grads, self.lay.total, st)
        if self.args.deterministic_kernels:
            d.ew("es_table_grad_det", BUCKETS * CLASSES,
                 [c_uint64(self.dz), c_uint64(ids), c_uint64(G["bucket.table"]), c_int(b),
                  c_int(CLASSES), c_int(BUCKETS)], st, ks)
        else:
            d.ew("es_table_grad_atomic", b * CLASSES,
                 [c_uint64(self.dz), c_uint64(ids), c_uint64(G["bucket.table"]), c_int(b),
                  c_int(CLASSES), c_int(BUCKETS)], st, ks)
        self.grad_ready("bucket.table", ks)
        self.bias_grad(self.dz, b, CLASSES, 1, G["fc2.bias"], ks)
        self.grad_ready("fc2.bias", ks)
        # dW2[6, 32] = dz^T . h
        cb("cublasSgemm_v2", self.blas, c_int(CUBLAS_OP_N), c_int(CUBLAS_OP_T), c_int(HIDDEN),
           c_int(CLASSES), c_int(b), byref(ONE), ptr(self.h), c_int(HIDDEN), ptr(self.dz),
           c_int(CLASSES), byref(ZERO), ptr(G["fc2.weight"]), c_int(HIDDEN))
        self.grad_ready("fc2.weight", ks)
        # dh[b, 32] = dz . W2
        cb("cublasSgemm_v2", self.blas, c_int(CUBLAS_OP_N), c_int(CUBLAS_OP_N), c_int(HIDDEN),
           c_int(b), c_int(CLASSES), byref(ONE), ptr(P["fc2.weight"]), c_int(HIDDEN),
           ptr(self.dz), c_int(CLASSES), byref(ZERO), ptr(self.dh), c_int(HIDDEN))
        d.ew("es_relu_dropout_bwd", b * HIDDEN,
             [c_uint64(self.dh), c_uint64(self.h), c_uint64(self.mask), c_int(b * HIDDEN)],
             st, ks)
        self.bias_grad(self.dh, b, HIDDEN, 1, G["fc1.bias"], ks)
        self.grad_ready("fc1.bias", ks)
        # dW1[32, 288] = dh^T . p1
        cb("cublasSgemm_v2", self.blas, c_int(CUBLAS_OP_N), c_int(CUBLAS_OP_T), c_int(POOLED),
           c_int(HIDDEN), c_int(b), byref(ONE), ptr(self.p1), c_int(POOLED), ptr(self.dh),
           c_int(HIDDEN), byref(ZERO), ptr(G["fc1.weight"]), c_int(POOLED))
        self.grad_ready("fc1.weight", ks)
        # dp1[b, 288] = dh . W1
        cb("cublasSgemm_v2", self.blas, c_int(CUBLAS_OP_N), c_int(CUBLAS_OP_N), c_int(POOLED),
           c_int(b), c_int(HIDDEN), byref(ONE), ptr(P["fc1.weight"]), c_int(POOLED),
           ptr(self.dh), c_int(HIDDEN), byref(ZERO), ptr(self.dp1), c_int(POOLED))
        dn("cudnnPoolingBackward", self.dnn, self.pool_desc, byref(ONE), self.p_desc,
           ptr(self.p1), self.p_desc, ptr(self.dp1), self.y_desc, ptr(self.a1), byref(ZERO),
           self.y_desc, ptr(self.da1))
        dn("cudnnActivationBackward", self.dnn, self.act_desc, byref(ONE), self.y_desc,
           ptr(self.a1), self.y_desc, ptr(self.da1), self.y_desc, ptr(self.a1), byref(ZERO),
           self.y_desc, ptr(self.dy1))
        self.bias_grad(self.dy1, b, CONV_CH, IMG * IMG, G["conv.bias"], ks)
        self.grad_ready("conv.bias", ks)
        dn("cudnnConvolutionBackwardFilter", self.dnn, byref(ONE), self.x_desc, ptr(x),
           self.y_desc, ptr(self.dy1), self.conv_desc, c_int(self.bwf_algo), ptr(self.ws),
           c_size_t(self.ws_size), byref(ZERO), self.w_desc, ptr(G["conv.weight"]))
        self.grad_ready("conv.weight", ks)
        # The optimizer waits for the last all-reduce.
        self.cuda("cuEventRecord", self.ev_comm, self.comm)
        self.cuda("cuStreamWaitEvent", st, self.ev_comm, c_uint(0))

    def optimizer(self, ks):
        a = self.args
        self.d.ew("es_sgd_momentum", self.lay.total,
                  [c_uint64(self.params), c_uint64(self.grads), c_uint64(self.momentum),
                   c_int(self.lay.total), c_float(a.lr), c_float(a.momentum),
                   c_float(a.weight_decay), c_float(1.0 / self.world)], self.compute, ks)

    def allreduce_host(self, values):
        """Sum a few floats over the ranks (reporting only)."""
        n = len(values)
        buf = self.d.alloc(n * 4)
        host = (c_float * n)(*values)
        cu = self.cuda
        cu("cuMemcpyHtoDAsync_v2", c_uint64(buf), host, c_size_t(n * 4), self.compute)
        self.nccl("ncclAllReduce", ptr(buf), ptr(buf), c_size_t(n), c_int(NCCL_FLOAT),
                  c_int(NCCL_SUM), self.comm_h, self.compute)
        cu("cuStreamSynchronize", self.compute)
        cu("cuMemcpyDtoH_v2", host, c_uint64(buf), c_size_t(n * 4))
        cu("cuMemFree_v2", c_uint64(buf))
        self.d.allocs.remove(buf)
        return list(host)

    def read_stats(self):
        cu = self.cuda
        host = (c_float * 4)()
        cu("cuStreamSynchronize", self.compute)
        cu("cuMemcpyDtoH_v2", host, c_uint64(self.stats), c_size_t(16))
        self.d.memset0(self.stats, 4, self.compute)
        return self.allreduce_host([host[0], host[1], host[2]])

    def train(self):
        a, cu, d = self.args, self.cuda, self.d
        # Weights from rank 0, as DDP does at construction.
        self.nccl("ncclBroadcast", ptr(self.params), ptr(self.params), c_size_t(self.lay.total),
                  c_int(NCCL_FLOAT), c_int(0), self.comm_h, self.compute)
        t0 = time.monotonic()
        gb = a.batch
        self.prefetch(0, 0)
        for step in range(a.steps):
            slot = step % 2
            ks = step % 3
            if step >= 2:
                # Bound the work in flight to two steps; release their args.
                cu("cuEventSynchronize", self.ev_done[(step - 2) % 3])
                d.keep[(step - 2) % 3] = []
            cu("cuStreamWaitEvent", self.compute, self.ev_copied[slot], c_uint(0))
            if self.ballast:
                cu("cuMemsetD32Async", c_uint64(self.ballast), c_uint(step + 1),
                   c_size_t(self.args.ballast_mib << 18), self.compute)
            self.forward(slot, step, True, ks)
            self.backward(slot, ks)
            cu("cuEventRecord", self.ev_consumed[slot], self.compute)
            if step + 1 < a.steps:
                self.prefetch(1 - slot, (step + 1) * gb)
            self.optimizer(ks)
            cu("cuEventRecord", self.ev_done[ks], self.compute)
            if (step + 1) % a.log_every == 0 or step + 1 == a.steps:
                loss, correct, count = self.read_stats()
                if self.rank == 0 and count > 0:
                    say(f"step {step + 1:5d}/{a.steps} loss {loss / count:.4f} "
                        f"acc {correct / count:.3f} ({time.monotonic() - t0:.1f} s)")
        cu("cuCtxSynchronize")
        for k in range(3):
            d.keep[k] = []
        self.train_time = time.monotonic() - t0

    def evaluate(self):
        """Held-out accuracy: each rank its shard of the test set."""
        a, cu, b = self.args, self.cuda, self.b
        chunks = a.test_samples // a.batch
        cu("cuStreamSynchronize", self.compute)
        self.d.memset0(self.stats, 4, self.compute)
        for c in range(chunks):
            slot = c % 2
            self.prefetch(slot, TEST_STREAM + c * a.batch)
            cu("cuStreamWaitEvent", self.compute, self.ev_copied[slot], c_uint(0))
            self.forward(slot, 0, False, 0)
            cu("cuEventRecord", self.ev_consumed[slot], self.compute)
            cu("cuStreamSynchronize", self.compute)
            self.d.keep[0] = []
        _, correct, count = self.read_stats()
        return correct, count

    def param_bytes(self):
        lay = self.lay
        host = ctypes.create_string_buffer(lay.total * 4)
        self.cuda("cuCtxSynchronize")
        self.cuda("cuMemcpyDtoH_v2", host, c_uint64(self.params), c_size_t(lay.total * 4))
        raw = host.raw
        return [(n, raw[lay.off[n] * 4:(lay.off[n] + lay.size[n]) * 4]) for n in lay.order]

    def compare_digest(self, digest):
        """All-gather every rank's digest; returns the list of hex digests."""
        n = self.world
        buf = self.d.alloc(32 * n)
        cu = self.cuda
        src = ctypes.create_string_buffer(digest, 32)
        cu("cuMemcpyHtoDAsync_v2", c_uint64(buf + 32 * self.rank), src, c_size_t(32),
           self.compute)
        self.nccl("ncclAllGather", ptr(buf + 32 * self.rank), ptr(buf), c_size_t(32),
                  c_int(NCCL_UINT8), self.comm_h, self.compute)
        cu("cuStreamSynchronize", self.compute)
        out = ctypes.create_string_buffer(32 * n)
        cu("cuMemcpyDtoH_v2", out, c_uint64(buf), c_size_t(32 * n))
        return [out.raw[32 * i:32 * (i + 1)].hex() for i in range(n)]

    def close(self):
        cu = self.cuda
        try:
            cu("cuCtxSynchronize")
            self.nccl("ncclCommDestroy", self.comm_h)
            self.cudnn("cudnnDestroy", self.dnn)
            self.cublas("cublasDestroy_v2", self.blas)
            for p in self.d.allocs:
                cu("cuMemFree_v2", c_uint64(p))
            for p in self.d.host_allocs:
                cu("cuMemFreeHost", c_void_p(p))
            cu("cuModuleUnload", self.d.module)
        except TrainError as e:
            say(f"{PROG}: rank {self.rank}: cleanup: {e}", err=True)


# --------------------------------------------------------------------------
# Rendezvous: rank 0 publishes the NCCL unique id in a file (--rdzv DIR), or
# serves it over TCP at MASTER_ADDR:MASTER_PORT (TcpRendezvous).

RDZV_FILE = "nccl-unique-id"


def publish_id(rdzv, raw):
    path = os.path.join(rdzv, RDZV_FILE)
    tmp = f"{path}.tmp.{os.getpid()}"
    try:
        with open(tmp, "wb") as f:
            f.write(raw)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except OSError as e:
        raise TrainError(f"cannot write rendezvous file {path}: {e.strerror}") from None


def wait_id(rdzv, timeout):
    path = os.path.join(rdzv, RDZV_FILE)
    deadline = time.monotonic() + timeout
    while True:
        try:
            with open(path, "rb") as f:
                raw = f.read()
            if len(raw) == 128:
                return raw
            raise TrainError(f"rendezvous file {path} has {len(raw)} bytes, expected 128")
        except FileNotFoundError:
            pass
        except OSError as e:
            raise TrainError(f"cannot read rendezvous file {path}: {e.strerror}") from None
        if time.monotonic() > deadline:
            raise TrainError(f"timed out after {timeout:g} s waiting for rank 0 in {rdzv}")
        time.sleep(0.01)


# TCP: each other rank connects to rank 0 and sends a hello (magic, its
# rank, the world size; 32-bit little-endian); rank 0 answers the id's 128
# bytes, or closes a connection whose hello is wrong without counting it.
RDZV_MAGIC = b"ESRDZV1\0"
RDZV_HELLO = struct.Struct("<8sii")
RDZV_RETRY_S = 0.1   # between a rank's connection attempts
RDZV_HELLO_S = 10.0  # the longest rank 0 waits for a connected rank's hello


def oserr(e):
    return e.strerror or str(e) or type(e).__name__


def recv_exact(s, n, deadline):
    """Up to n bytes (fewer: the peer closed first); socket.timeout at the
    deadline (time.monotonic())."""
    buf = b""
    while len(buf) < n:
        left = deadline - time.monotonic()
        if left <= 0:
            raise socket.timeout("timed out")
        s.settimeout(left)
        chunk = s.recv(n - len(buf))
        if not chunk:
            break
        buf += chunk
    return buf


def master_port():
    """MASTER_PORT, strictly: decimal digits only, in [1, 65535]."""
    v = os.environ.get("MASTER_PORT", "")
    if not (v.isascii() and v.isdigit()):
        raise TrainError(f"MASTER_PORT={v!r} is not a port number (an integer in [1, 65535])")
    n = int(v, 10)
    if not 1 <= n <= 65535:
        raise TrainError(f"MASTER_PORT={n} out of range [1, 65535]")
    return n


class TcpRendezvous:
    """The NCCL id over TCP at MASTER_ADDR:MASTER_PORT. Rank 0 listens from
    the start (listen(): an address in use fails before any device work,
    and ranks that connect early wait in the backlog), then serve() answers
    from a thread while rank 0 goes on into ncclCommInitRank, which waits
    for every rank; the thread closes the listener once every other rank
    has the id (done() waits for that). Past --rdzv-timeout the thread says
    which ranks are missing and ends the process: the main thread may be
    blocked in ncclCommInitRank, where nothing else reaches it. The other
    ranks call fetch()."""

    def __init__(self, addr, port, rank, world, timeout):
        self.addr, self.port = addr, port
        self.rank, self.world, self.timeout = rank, world, timeout
        self.where = f"[{addr}]:{port}" if ":" in addr else f"{addr}:{port}"
        self.sock = None
        self.thread = None

    def listen(self):
        try:
            infos = socket.getaddrinfo(self.addr, self.port, type=socket.SOCK_STREAM)
        except socket.gaierror as e:
            raise TrainError(f"cannot resolve MASTER_ADDR {self.addr!r}: {oserr(e)}") from None
        err = None
        for family, kind, proto, _, sa in infos:
            s = socket.socket(family, kind, proto)
            try:
                s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                s.bind(sa)
                s.listen(socket.SOMAXCONN)
            except OSError as e:
                s.close()
                err = e
                continue
            self.sock = s
            return
        hint = ""
        if err is not None and err.errno == errno.EADDRNOTAVAIL:
            hint = " (MASTER_ADDR must be an address of rank 0's host)"
        raise TrainError(f"cannot listen on {self.where} (MASTER_ADDR:MASTER_PORT) for the "
                         f"rendezvous: {oserr(err) if err else 'no address'}{hint}")

    def serve(self, raw):
        self.thread = threading.Thread(target=self._serve, args=(raw,), name="rdzv",
                                       daemon=True)
        self.thread.start()

    def done(self):
        if self.thread:
            self.thread.join()

    def _serve(self, raw):
        deadline = time.monotonic() + self.timeout
        want = set(range(1, self.world))
        said = set()
        try:
            while want:
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self.sock.settimeout(left)
                try:
                    conn, peer = self.sock.accept()
                except socket.timeout:
                    break
                except OSError:  # e.g. a connection aborted before accept
                    time.sleep(RDZV_RETRY_S)
                    continue
                with conn:
                    why = self._answer(conn, raw, want,
                                       min(deadline, time.monotonic() + RDZV_HELLO_S))
                if why and why not in said:  # each reason once: a rank retries
                    said.add(why)
                    say(f"{PROG}: rank 0: rendezvous on {self.where}: closed a connection "
                        f"from {peer[0]}: {why}", err=True)
        finally:
            self.sock.close()
        if want:
            missing = sorted(want)
            names = ", ".join(map(str, missing[:16])) + (", ..." if len(missing) > 16 else "")
            say(f"{PROG}: rank 0: timed out after {self.timeout:g} s serving the NCCL id on "
                f"{self.where} (MASTER_ADDR:MASTER_PORT): {len(missing)} of {self.world - 1} "
                f"ranks never got it (rank {names})", err=True)
            os._exit(1)

    def _answer(self, conn, raw, want, deadline):
        """Checks one connection's hello and sends the id; None, or why not."""
        try:
            hello = recv_exact(conn, RDZV_HELLO.size, deadline)
        except socket.timeout:
            return "no hello in time"
        except OSError as e:
            return oserr(e)
        if len(hello) < RDZV_HELLO.size:
            return "closed before its hello"
        magic, rank, world = RDZV_HELLO.unpack(hello)
        if magic != RDZV_MAGIC:
            return "not a rendezvous hello (bad magic)"
        if world != self.world:
            return f"rank {rank} has WORLD_SIZE {world}, rank 0 has {self.world}"
        if not 1 <= rank < world:
            return f"rank {rank} out of range [1, {world - 1}]"
        try:
            conn.settimeout(max(deadline - time.monotonic(), 0.001))
            conn.sendall(raw)
        except OSError as e:
            return f"rank {rank}: cannot send the id: {oserr(e)}"
        want.discard(rank)
        return None

    def fetch(self):
        """A rank other than 0: the id from rank 0, retrying until the
        timeout (rank 0 may not be listening yet)."""
        hello = RDZV_HELLO.pack(RDZV_MAGIC, self.rank, self.world)
        deadline = time.monotonic() + self.timeout
        last = "no answer"
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TrainError(f"timed out after {self.timeout:g} s waiting for rank 0's NCCL "
                                 f"id at {self.where} (MASTER_ADDR:MASTER_PORT): {last}")
            try:
                with socket.create_connection((self.addr, self.port), timeout=left) as s:
                    s.sendall(hello)
                    raw = recv_exact(s, 128, deadline)
                if len(raw) == 128:
                    return raw
                last = (f"rank 0 closed the connection after {len(raw)} of 128 bytes" if raw
                        else "rank 0 closed the connection without the id (see its output)")
            except socket.timeout:
                last = "no answer"
            except ConnectionRefusedError:
                last = "connection refused"
            except socket.gaierror as e:
                last = f"cannot resolve MASTER_ADDR {self.addr!r}: {oserr(e)}"
            except OSError as e:
                last = oserr(e)
            time.sleep(max(min(RDZV_RETRY_S, deadline - time.monotonic()), 0))


# --------------------------------------------------------------------------
# Command line.

def env_int(name, default, lo, hi):
    v = os.environ.get(name)
    if v is None or v == "":
        if default is None:
            raise TrainError(f"{name} is not set")
        return default
    try:
        n = int(v, 10)
    except ValueError:
        raise TrainError(f"{name}={v!r} is not an integer") from None
    if not lo <= n <= hi:
        raise TrainError(f"{name}={n} out of range [{lo}, {hi}]")
    return n


def default_kernels():
    b = os.environ.get("ES_BUILD")
    if b:
        return os.path.join(b, "examples", "kernels.fatbin")
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    return os.path.join(repo, "build", "examples", "kernels.fatbin")


def positive_int(s):
    try:
        v = int(s, 10)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid integer {s!r}") from None
    if v < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {v}")
    return v


def nonneg_int(s):
    try:
        v = int(s, 10)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid integer {s!r}") from None
    if v < 0 or v >= 1 << 31:
        raise argparse.ArgumentTypeError(f"must be in [0, 2^31), got {v}")
    return v


def finite_float(lo, hi, lo_open=False):
    def parse(s):
        try:
            v = float(s)
        except ValueError:
            raise argparse.ArgumentTypeError(f"invalid number {s!r}") from None
        if not math.isfinite(v) or v < lo or v > hi or (lo_open and v == lo):
            raise argparse.ArgumentTypeError(
                f"must be in {'(' if lo_open else '['}{lo:g}, {hi:g}], got {s}")
        return v
    return parse


def parse_args(argv):
    p = argparse.ArgumentParser(
        prog=PROG,
        description="Data-parallel CNN trainer over libcuda, cuBLAS, cuDNN and NCCL "
                    "(ctypes only). Rank, world size and local rank come from RANK, "
                    "WORLD_SIZE and LOCAL_RANK (default: a single rank). With WORLD_SIZE > 1 "
                    "rank 0 hands the NCCL id to the others through a rendezvous directory "
                    "all ranks share (--rdzv DIR or ES_RDZV_DIR; used when given) or, "
                    "without one, over TCP at MASTER_ADDR:MASTER_PORT as torchrun sets them "
                    "(rank 0 listens there, the others connect; no shared directory needed).")
    p.add_argument("--steps", type=positive_int, default=200, help="training steps (200)")
    p.add_argument("--batch", type=positive_int, default=32,
                   help="global batch size, divisible by WORLD_SIZE (32)")
    p.add_argument("--seed", type=nonneg_int, default=1, help="data, init and dropout seed (1)")
    p.add_argument("--lr", type=finite_float(0.0, 10.0, lo_open=True), default=0.05,
                   help="learning rate (0.05)")
    p.add_argument("--momentum", type=finite_float(0.0, 0.999), default=0.9,
                   help="SGD momentum (0.9)")
    p.add_argument("--weight-decay", type=finite_float(0.0, 1.0), default=5e-4,
                   help="weight decay (5e-4)")
    p.add_argument("--dropout", type=finite_float(0.0, 0.9), default=0.25,
                   help="dropout probability after fc1 (0.25)")
    p.add_argument("--log-every", type=positive_int, default=20,
                   help="print loss and accuracy every N steps (20)")
    p.add_argument("--test-samples", type=positive_int, default=512,
                   help="held-out samples, rounded down to a multiple of --batch (512)")
    p.add_argument("--bucket-kb", type=positive_int, default=16,
                   help="gradient all-reduce bucket cap in KiB (16)")
    p.add_argument("--ballast-mib", type=nonneg_int, default=0, metavar="N",
                   help="N MiB of device memory rewritten every step (0): an EST as large "
                        "as a bigger model's, for the time-slicing bench")
    p.add_argument("--buckets", type=positive_int, default=None, metavar="N",
                   help="instead of --bucket-kb: the gradient cut into N equal buckets "
                        "(a tensor may span several), each all-reduced once its "
                        "tensors are ready")
    p.add_argument("--deterministic-kernels", action="store_true",
                   help="use the ordered kernel instead of float atomics for the "
                        "bucket-table gradient")
    p.add_argument("--cudnn-deterministic", action="store_true",
                   help="only cuDNN algorithms reported deterministic (and deterministic "
                        "max pooling), like torch.backends.cudnn.deterministic")
    p.add_argument("--rdzv", metavar="DIR", default=os.environ.get("ES_RDZV_DIR"),
                   help="rendezvous directory for the NCCL id (default $ES_RDZV_DIR); "
                        "without one, TCP at MASTER_ADDR:MASTER_PORT (MASTER_PORT an "
                        "integer in [1, 65535])")
    p.add_argument("--rdzv-timeout", type=finite_float(0.0, 3600.0, lo_open=True),
                   default=60.0, help="seconds to wait for rank 0's id; over TCP also rank 0's "
                                      "limit for serving it to every rank (60)")
    p.add_argument("--kernels", metavar="PATH", default=None,
                   help="kernels fatbin (default $ES_BUILD/examples/kernels.fatbin or "
                        "build/examples/kernels.fatbin in the repository)")
    p.add_argument("--save", metavar="PATH", help="rank 0 writes the parameters to PATH")
    a = p.parse_args(argv)
    if a.kernels is None:
        a.kernels = default_kernels()
    return p, a


def save_params(path, tensors, digest):
    """A text header line (JSON) then the raw float32 tensors in order."""
    import json
    header = {"format": "easyscale-train-params", "version": 1, "dtype": "float32-le",
              "sha256": digest,
              "tensors": [{"name": n, "bytes": len(raw)} for n, raw in tensors]}
    tmp = f"{path}.tmp.{os.getpid()}"
    try:
        with open(tmp, "wb") as f:
            f.write(json.dumps(header).encode() + b"\n")
            for _, raw in tensors:
                f.write(raw)
        os.replace(tmp, path)
    except OSError as e:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise TrainError(f"cannot save parameters to {path}: {e.strerror}") from None


def run(argv):
    parser, a = parse_args(argv)
    world = env_int("WORLD_SIZE", 1, 1, 4096)
    # Two processes silently both rank 0 would hang in NCCL: with more than
    # one rank, RANK must be given (torchrun always sets it).
    rank = env_int("RANK", 0 if world == 1 else None, 0, world - 1)
    local_rank = env_int("LOCAL_RANK", rank, 0, 4096)
    if a.batch % world:
        parser.error(f"--batch {a.batch} is not divisible by WORLD_SIZE {world}")
    if a.test_samples < a.batch:
        parser.error(f"--test-samples {a.test_samples} is smaller than --batch {a.batch}")
    tcp = None
    if world > 1:
        if a.rdzv:
            if not os.path.isdir(a.rdzv):
                raise TrainError(f"rendezvous directory {a.rdzv} does not exist")
        else:
            addr = os.environ.get("MASTER_ADDR", "")
            port = os.environ.get("MASTER_PORT", "")
            if not addr or not port:
                unset = [n for n, v in (("MASTER_ADDR", addr), ("MASTER_PORT", port)) if not v]
                raise TrainError("WORLD_SIZE > 1 needs a rendezvous directory (--rdzv DIR or "
                                 "ES_RDZV_DIR) or MASTER_ADDR and MASTER_PORT (rank 0 serves "
                                 f"the NCCL id over TCP); {' and '.join(unset)} "
                                 f"{'are' if len(unset) > 1 else 'is'} not set")
            tcp = TcpRendezvous(addr, master_port(), rank, world, a.rdzv_timeout)
    if not os.path.isfile(a.kernels):
        raise TrainError(f"kernels fatbin {a.kernels} not found (run make, or pass --kernels)")
    a.test_samples -= a.test_samples % a.batch
    if tcp and rank == 0:
        tcp.listen()

    tr = Trainer(a, rank, world, local_rank, tcp)
    d = tr.d
    if rank == 0:
        say(f"{PROG}: world {world}, global batch {a.batch} ({tr.b} per rank), "
            f"{a.steps} steps, seed {a.seed}, {sum(tr.lay.size.values())} parameters in "
            f"{len(tr.bucket_list)} buckets")
    say(f"{PROG}: rank {rank}: device {d.ordinal} of {d.count} ({d.name}, sm_{d.cc[0]}{d.cc[1]}, "
        f"{d.sm_count} SMs); cudnn fwd algo {tr.fwd_algo}, bwd-filter algo {tr.bwf_algo}; "
        f"table grad {'ordered' if a.deterministic_kernels else 'atomic'}")
    tr.train()
    correct, count = tr.evaluate()
    tensors = tr.param_bytes()
    h = hashlib.sha256()
    for _, raw in tensors:
        h.update(raw)
    digest = h.hexdigest()
    if rank == 0:
        say(f"held-out accuracy {correct / max(count, 1):.4f} ({int(count)} samples, "
            f"chance {1.0 / CLASSES:.3f})")
        say(f"train time {tr.train_time:.2f} s")
    # The ranks compare digests (an NCCL all-gather: also a barrier, so the
    # checksum lines come after rank 0's report).
    digests = tr.compare_digest(h.digest())
    if rank == 0:
        if a.save:
            save_params(a.save, tensors, digest)
            say(f"saved parameters to {a.save}")
    tr.close()
    bad = [i for i, x in enumerate(digests) if x != digest]
    say(f"checksum {digest}")
    if bad:
        say(f"{PROG}: rank {rank}: parameters differ across ranks "
            f"(all-gathered digests: {' '.join(x[:16] for x in digests)})", err=True)
        return 1
    return 0


def main():
    try:
        return run(sys.argv[1:])
    except TrainError as e:
        r = os.environ.get("RANK")
        who = f"rank {r}: " if r not in (None, "") and os.environ.get("WORLD_SIZE", "1") != "1" else ""
        say(f"{PROG}: {who}{e}", err=True)
        return 1
    except KeyboardInterrupt:
        say(f"{PROG}: interrupted", err=True)
        return 130
    except BrokenPipeError:
        return 1


if __name__ == "__main__":
    sys.exit(main())
