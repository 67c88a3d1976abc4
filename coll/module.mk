# coll/: the virtual collectives (shim/README.md, "NCCL"): the engine
# (coll.c: communicators, groups, enqueue, host-function steps; seg.c: the
# shared segment of a communicator), one file per transport behind the
# transport struct (transport/host.c, transport/dev.c), and the collective
# digests (digest.c, EASYSCALE_DIGEST). The shim compiles $(COLL_SRCS).
COLL_SRCS := coll/coll.c coll/seg.c coll/transport/host.c coll/transport/dev.c coll/digest.c

# The host transport computes the kernel's element arithmetic on the CPU:
# no contraction into FMA. Its reduction loops are vectorized across
# elements (each element's additions stay in rank order: the same bits).
$(B)/obj/coll/transport/host.o: CFLAGS += -ffp-contract=off -ftree-vectorize -fvect-cost-model=dynamic
