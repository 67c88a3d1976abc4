#!/usr/bin/env python3
"""The task of examples/train.py in real PyTorch DDP, for GPU machines.

  torchrun --nproc-per-node N examples/torch_ddp.py [--steps 200] [--batch 32]
           [--seed 1] [--lr 0.05] [--deterministic] [--save PATH]

The same job as train.py, as far as a framework allows:
  - data: train.make_sample, rank r reading shard r of every global batch
    (--batch is global and must be divisible by WORLD_SIZE);
  - network: conv 3x3 + bias + ReLU, 2x2 max pooling, fc 288->32 + bias +
    ReLU + dropout, fc 32->6 + bias + a learned per-bucket bias row picked
    by a hashed input feature; softmax cross-entropy; SGD with momentum and
    weight decay (PyTorch's formulation, as train.py's kernel);
  - initial values: train.Layout.init_values (DDP broadcasts rank 0's at
    construction, as train.py does with ncclBroadcast);
  - dropout: the very masks train.py's kernel draws (train.dropout_mask:
    Philox keyed by the seed, counter = position in the global batch), made
    on the host with the batch, so they do not depend on the world size;
  - the bucket row is table.index_select(0, ids), whose backward is an
    index_add_: float atomicAdd on CUDA (train.py's default atomic kernel),
    replaced by a deterministic kernel under --deterministic;
  - fp32 throughout: TF32 is off for cuBLAS and cuDNN (on by default for
    convolutions on Ampere and later), since train.py computes in fp32.

Environment as torchrun sets it: RANK, WORLD_SIZE, LOCAL_RANK (strictly
parsed; a bad value is one line and exit 1), MASTER_ADDR/MASTER_PORT for
the env:// rendezvous. Backend NCCL; device LOCAL_RANK % device count.

--deterministic: CUBLAS_WORKSPACE_CONFIG=:4096:8 unless already :4096:8 or
:16:8 (set before torch creates its cuBLAS handle), torch.use_deterministic_algorithms(True),
torch.backends.cudnn.deterministic = True; cudnn.benchmark is always off
(no autotuning). Without it the job has the usual nondeterminism (atomics
in index_add_, cuDNN's heuristic choice), which is what the EasyScale shim
has to remove.

Prints loss and accuracy every --log-every steps (rank 0), held-out
accuracy, and on every rank "checksum <sha256 of the parameters' float32
bytes in train.py's order>"; the ranks compare digests with
all_gather_object and exit 1 when they differ. --save PATH (rank 0) writes
train.py's format (JSON header line, then the raw tensors).

The bits are not expected to match train.py's (other kernels, other
reduction orders); loss curves should agree closely. Needs torch with CUDA;
where torch is absent, --help works and a run says so in one line.
"""
import argparse
import hashlib
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import train as task  # noqa: E402  (make_sample, Layout, dropout_mask, parsers)

PROG = "torch_ddp.py"


def parse_args(argv):
    p = argparse.ArgumentParser(prog=PROG, description=__doc__.split("\n")[0])
    p.add_argument("--steps", type=task.positive_int, default=200, help="training steps (200)")
    p.add_argument("--batch", type=task.positive_int, default=32,
                   help="global batch size, divisible by WORLD_SIZE (32)")
    p.add_argument("--seed", type=task.nonneg_int, default=1, help="data, init, dropout seed (1)")
    p.add_argument("--lr", type=task.finite_float(0.0, 10.0, lo_open=True), default=0.05)
    p.add_argument("--momentum", type=task.finite_float(0.0, 0.999), default=0.9)
    p.add_argument("--weight-decay", type=task.finite_float(0.0, 1.0), default=5e-4)
    p.add_argument("--dropout", type=task.finite_float(0.0, 0.9), default=0.25)
    p.add_argument("--log-every", type=task.positive_int, default=20)
    p.add_argument("--test-samples", type=task.positive_int, default=512,
                   help="held-out samples, rounded down to a multiple of --batch (512)")
    p.add_argument("--bucket-kb", type=task.positive_int, default=16,
                   help="DDP bucket cap in KiB (16, as train.py)")
    p.add_argument("--deterministic", action="store_true",
                   help="deterministic algorithms everywhere (cuBLAS, cuDNN, index_add_)")
    p.add_argument("--save", metavar="PATH", help="rank 0 writes the parameters to PATH")
    a = p.parse_args(argv)
    if a.test_samples < a.batch:
        p.error(f"--test-samples {a.test_samples} is smaller than --batch {a.batch}")
    return p, a


def run(argv):
    parser, a = parse_args(argv)
    world = task.env_int("WORLD_SIZE", 1, 1, 4096)
    rank = task.env_int("RANK", 0 if world == 1 else None, 0, world - 1)
    local_rank = task.env_int("LOCAL_RANK", rank, 0, 4096)
    if a.batch % world:
        parser.error(f"--batch {a.batch} is not divisible by WORLD_SIZE {world}")
    a.test_samples -= a.test_samples % a.batch
    if a.deterministic and os.environ.get("CUBLAS_WORKSPACE_CONFIG") not in (":4096:8", ":16:8"):
        # Read by cuBLAS when torch creates its handle (first matmul): set
        # before that; PyTorch's deterministic mode refuses other values.
        os.environ["CUBLAS_WORKSPACE_CONFIG"] = ":4096:8"
    try:
        import torch
        import torch.distributed as dist
        import torch.nn as nn
        import torch.nn.functional as F
        from torch.nn.parallel import DistributedDataParallel as DDP
    except ImportError as e:
        raise task.TrainError(f"PyTorch is required: {e}") from None
    if not torch.cuda.is_available() or torch.cuda.device_count() < 1:
        raise task.TrainError("no CUDA device visible to PyTorch")
    torch.use_deterministic_algorithms(a.deterministic)
    torch.backends.cudnn.benchmark = False
    torch.backends.cudnn.deterministic = a.deterministic
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.manual_seed(a.seed)  # nothing random is drawn by torch; for hygiene

    ndev = torch.cuda.device_count()
    torch.cuda.set_device(local_rank % ndev)
    dev = torch.device("cuda", torch.cuda.current_device())
    dist.init_process_group("nccl")
    b = a.batch // world

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv2d(1, task.CONV_CH, 3, padding=1)
            self.fc1 = nn.Linear(task.POOLED, task.HIDDEN)
            self.fc2 = nn.Linear(task.HIDDEN, task.CLASSES)
            self.table = nn.Parameter(torch.zeros(task.BUCKETS, task.CLASSES))

        def forward(self, x, ids, mask=None):
            h = F.max_pool2d(F.relu(self.conv(x)), 2).flatten(1)
            h = F.relu(self.fc1(h))
            if mask is not None:
                h = h * mask
            return self.fc2(h) + self.table.index_select(0, ids)

    net = Net()
    lay = task.Layout()
    init = list(lay.init_values(a.seed))
    named = [("conv.weight", net.conv.weight), ("conv.bias", net.conv.bias),
             ("fc1.weight", net.fc1.weight), ("fc1.bias", net.fc1.bias),
             ("fc2.weight", net.fc2.weight), ("fc2.bias", net.fc2.bias),
             ("bucket.table", net.table)]
    assert [n for n, _ in named] == lay.order
    with torch.no_grad():
        for name, prm in named:
            o, k = lay.off[name], lay.size[name]
            prm.copy_(torch.tensor(init[o:o + k], dtype=torch.float32).view_as(prm))
    net = net.to(dev)
    model = DDP(net, device_ids=[dev.index], output_device=dev.index,
                bucket_cap_mb=a.bucket_kb / 1024.0, broadcast_buffers=False)
    opt = torch.optim.SGD(model.parameters(), lr=a.lr, momentum=a.momentum,
                          weight_decay=a.weight_decay)

    def batch(first, step=None):
        """This rank's shard of the global batch starting at sample first,
        and (training) its part of the step's dropout mask."""
        xs, ys, ids = [], [], []
        for j in range(b):
            px, label, bucket = task.make_sample(a.seed, first + rank * b + j)
            xs.extend(px)
            ys.append(label)
            ids.append(bucket)
        x = torch.tensor(xs, dtype=torch.float32).view(b, 1, task.IMG, task.IMG)
        out = [x.pin_memory().to(dev, non_blocking=True),
               torch.tensor(ys, dtype=torch.long).pin_memory().to(dev, non_blocking=True),
               torch.tensor(ids, dtype=torch.long).pin_memory().to(dev, non_blocking=True)]
        if step is not None:
            m = task.dropout_mask(a.seed, step, rank * b, b, task.HIDDEN, a.dropout)
            out.append(torch.tensor(m, dtype=torch.float32).view(b, task.HIDDEN)
                       .pin_memory().to(dev, non_blocking=True))
        return out

    stats = torch.zeros(3, device=dev)
    model.train()
    t0 = time.monotonic()
    for step in range(a.steps):
        x, y, ids, mask = batch(step * a.batch, step)
        logits = model(x, ids, mask)
        # Mean over the local shard; DDP averages over the ranks: the mean
        # over the global batch, as train.py (1/b in the loss, 1/world in SGD).
        loss = F.cross_entropy(logits, y)
        opt.zero_grad(set_to_none=False)
        loss.backward()
        opt.step()
        with torch.no_grad():
            stats += torch.stack([loss.detach() * b, (logits.argmax(1) == y).sum().float(),
                                  torch.tensor(float(b), device=dev)])
        if (step + 1) % a.log_every == 0 or step + 1 == a.steps:
            dist.all_reduce(stats)
            if rank == 0:
                l, c, n = stats.tolist()
                print(f"step {step + 1:5d}/{a.steps} loss {l / n:.4f} acc {c / n:.3f} "
                      f"({time.monotonic() - t0:.1f} s)", flush=True)
            stats.zero_()

    model.eval()
    correct = torch.zeros(2, device=dev)
    with torch.no_grad():
        for c in range(a.test_samples // a.batch):
            x, y, ids = batch(task.TEST_STREAM + c * a.batch)
            pred = model(x, ids).argmax(1)
            correct += torch.stack([(pred == y).sum().float(), torch.tensor(float(b), device=dev)])
    dist.all_reduce(correct)
    torch.cuda.synchronize()
    tensors = []
    h = hashlib.sha256()
    for name, prm in named:
        # Raw little-endian float32 bytes, as train.py hashes them (no numpy).
        raw = bytes(prm.detach().float().contiguous().cpu().view(torch.uint8).flatten().tolist())
        tensors.append((name, raw))
        h.update(raw)
    digest = h.hexdigest()
    digests = [None] * world
    dist.all_gather_object(digests, digest)
    if rank == 0:
        c, n = correct.tolist()
        print(f"held-out accuracy {c / max(n, 1):.4f} ({int(n)} samples, "
              f"chance {1.0 / task.CLASSES:.3f})", flush=True)
        if a.save:
            task.save_params(a.save, tensors, digest)
            print(f"saved parameters to {a.save}", flush=True)
    print(f"checksum {digest}", flush=True)
    dist.destroy_process_group()
    if any(d != digest for d in digests):
        print(f"{PROG}: rank {rank}: parameters differ across ranks", file=sys.stderr)
        return 1
    return 0


def main():
    try:
        return run(sys.argv[1:])
    except task.TrainError as e:
        print(f"{PROG}: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
