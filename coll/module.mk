# coll/: the virtual collectives (shim/README.md, "NCCL"): the engine
# (comm.c: communicators; enqueue.c: operations; group.c: groups; defer.c:
# a time-sliced EST's collectives kept until it yields; launch.c:
# a batch on its stream; init.c: a communicator's set-up; step.c: the
# ordering steps; seg.c: the shared segment; tslice.c: time-slicing;
# util.c: errors, progress; jobhold.c: a hold of the whole job without a
# controller), one file per transport behind the transport
# struct (transport/host.c, transport/dev.c, transport/nccl.c: the NCCL
# carriers on dev.c's staging, dev.h; coll_int.h), and the
# collective digests (digest.c, EASYSCALE_DIGEST); a communicator across
# hosts (xhost.c: the levels above a host over NCCL; xhost_mem.c: the same
# in host memory for time-sliced ESTs, over xsock.c's links between the
# hosts' leaders; xhost_int.h private to the three). Calls go one way (the
# list in coll_int.h). The shim compiles $(COLL_SRCS).
COLL_SRCS := coll/comm.c coll/init.c coll/group.c coll/enqueue.c coll/defer.c coll/launch.c coll/step.c \
	coll/seg.c coll/tslice.c coll/util.c coll/transport/host.c coll/transport/dev.c coll/transport/nccl.c \
	coll/digest.c coll/jobhold.c coll/xhost.c coll/xhost_mem.c coll/xsock.c

# The host transport computes the kernel's element arithmetic on the CPU:
# no contraction into FMA. Its reduction loops are vectorized across
# elements (each element's additions stay in rank order: the same bits).
$(B)/obj/coll/transport/host.o: CFLAGS += -ffp-contract=off -ftree-vectorize -fvect-cost-model=dynamic
