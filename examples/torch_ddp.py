#!/usr/bin/env python3
"""The task of examples/train.py in real PyTorch DDP, for GPU machines.

  torchrun --nproc-per-node N examples/torch_ddp.py [--steps 200] [--batch 32]
           [--seed 1] [--lr 0.05] [--deterministic] [--save PATH]

Same synthetic shapes (train.make_sample), same network (conv 3x3 + bias +
ReLU, 2x2 max pooling, fc 288->32 + ReLU + dropout, fc 32->6 + bias + a
learned per-bucket bias row from a hashed input feature), same initial
values (train.Layout.init_values, broadcast from rank 0 by DDP), same data
sharding (rank r reads shard r of every global batch) and SGD with momentum
and weight decay. Backend NCCL, device LOCAL_RANK. The bucket table is an
nn.Embedding whose backward is a float-atomic scatter-add on the GPU unless
--deterministic (torch.use_deterministic_algorithms(True),
cudnn.deterministic, CUBLAS_WORKSPACE_CONFIG=:4096:8). Prints loss and
accuracy every --log-every steps, held-out accuracy, and on every rank
"checksum <sha256 of the parameters in train.py's order>"; the ranks compare
digests with all_gather_object and exit 1 if they differ.

The numbers are not expected to match train.py bit for bit (other kernels);
the point is the same job under a real framework, for the shim on real GPUs.
Needs torch with CUDA; this file only has to byte-compile where torch is
absent.
"""
import argparse
import hashlib
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import train as task  # noqa: E402  (make_sample, Layout, constants)


def parse_args():
    p = argparse.ArgumentParser(prog="torch_ddp.py", description=__doc__.split("\n")[0])
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--batch", type=int, default=32, help="global batch")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--momentum", type=float, default=0.9)
    p.add_argument("--weight-decay", type=float, default=5e-4)
    p.add_argument("--dropout", type=float, default=0.25)
    p.add_argument("--log-every", type=int, default=20)
    p.add_argument("--test-samples", type=int, default=512)
    p.add_argument("--bucket-kb", type=int, default=16)
    p.add_argument("--deterministic", action="store_true",
                   help="deterministic algorithms everywhere (cuBLAS, cuDNN, embedding)")
    p.add_argument("--save", metavar="PATH")
    a = p.parse_args()
    if a.steps < 1 or a.batch < 1 or a.log_every < 1 or not 0 <= a.dropout < 1:
        p.error("--steps, --batch, --log-every must be >= 1 and --dropout in [0, 1)")
    return a


def main():
    a = parse_args()
    try:
        import torch
        import torch.distributed as dist
        import torch.nn as nn
        import torch.nn.functional as F
        from torch.nn.parallel import DistributedDataParallel as DDP
    except ImportError as e:
        print(f"torch_ddp.py: PyTorch is required: {e}", file=sys.stderr)
        return 1
    if a.deterministic:
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
        torch.use_deterministic_algorithms(True)
    torch.backends.cudnn.benchmark = False
    torch.backends.cudnn.deterministic = a.deterministic
    torch.manual_seed(a.seed)

    rank = int(os.environ.get("RANK", "0"))
    world = int(os.environ.get("WORLD_SIZE", "1"))
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    if a.batch % world:
        print(f"torch_ddp.py: --batch {a.batch} is not divisible by WORLD_SIZE {world}",
              file=sys.stderr)
        return 2
    torch.cuda.set_device(local_rank % torch.cuda.device_count())
    dev = torch.device("cuda", torch.cuda.current_device())
    dist.init_process_group("nccl")
    b = a.batch // world

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv2d(1, task.CONV_CH, 3, padding=1)
            self.fc1 = nn.Linear(task.POOLED, task.HIDDEN)
            self.fc2 = nn.Linear(task.HIDDEN, task.CLASSES)
            self.bucket = nn.Embedding(task.BUCKETS, task.CLASSES)
            self.drop = nn.Dropout(a.dropout)

        def forward(self, x, ids):
            h = F.max_pool2d(F.relu(self.conv(x)), 2).flatten(1)
            h = self.drop(F.relu(self.fc1(h)))
            return self.fc2(h) + self.bucket(ids)

    net = Net()
    # train.py's initial values, in its parameter order.
    lay = task.Layout()
    init = list(lay.init_values(a.seed))
    named = [("conv.weight", net.conv.weight), ("conv.bias", net.conv.bias),
             ("fc1.weight", net.fc1.weight), ("fc1.bias", net.fc1.bias),
             ("fc2.weight", net.fc2.weight), ("fc2.bias", net.fc2.bias),
             ("bucket.table", net.bucket.weight)]
    with torch.no_grad():
        for name, prm in named:
            o, k = lay.off[name], lay.size[name]
            prm.copy_(torch.tensor(init[o:o + k], dtype=torch.float32).view_as(prm))
    net = net.to(dev)
    model = DDP(net, device_ids=[dev.index], bucket_cap_mb=a.bucket_kb / 1024.0)
    opt = torch.optim.SGD(model.parameters(), lr=a.lr, momentum=a.momentum,
                          weight_decay=a.weight_decay)

    def batch(first):
        xs, ys, ids = [], [], []
        for j in range(b):
            px, label, bucket = task.make_sample(a.seed, first + rank * b + j)
            xs.append(px)
            ys.append(label)
            ids.append(bucket)
        x = torch.tensor(xs, dtype=torch.float32).view(b, 1, task.IMG, task.IMG)
        return (x.pin_memory().to(dev, non_blocking=True),
                torch.tensor(ys).to(dev, non_blocking=True),
                torch.tensor(ids).to(dev, non_blocking=True))

    stats = torch.zeros(3, device=dev)
    model.train()
    for step in range(a.steps):
        x, y, ids = batch(step * a.batch)
        logits = model(x, ids)
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
                print(f"step {step + 1:5d}/{a.steps} loss {l / n:.4f} acc {c / n:.3f}",
                      flush=True)
            stats.zero_()

    model.eval()
    correct = torch.zeros(2, device=dev)
    with torch.no_grad():
        for c in range(a.test_samples // a.batch):
            x, y, ids = batch(task.TEST_STREAM + c * a.batch)
            pred = model(x, ids).argmax(1)
            correct += torch.stack([(pred == y).sum().float(), torch.tensor(float(b), device=dev)])
    dist.all_reduce(correct)
    h = hashlib.sha256()
    for _, prm in named:
        # Raw little-endian float32 bytes, as train.py hashes them (no numpy).
        h.update(bytes(prm.detach().float().contiguous().cpu().view(torch.uint8).flatten().tolist()))
    digest = h.hexdigest()
    digests = [None] * world
    dist.all_gather_object(digests, digest)
    if rank == 0:
        c, n = correct.tolist()
        print(f"held-out accuracy {c / max(n, 1):.4f} ({int(n)} samples)")
        if a.save:
            torch.save({name: prm.detach().cpu() for name, prm in named}, a.save)
    print(f"checksum {digest}", flush=True)
    dist.destroy_process_group()
    if any(d != digest for d in digests):
        print(f"torch_ddp.py: rank {rank}: parameters differ across ranks", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
