# context/: the state of an EST that outlives any one GPU. Today: the
# canonical device identity of d2 (device.c), placement and virtual devices
# (vdev.c), and the virtual collectives' engine (coll.c: communicators,
# groups, host-function steps; coll_seg.c: the shared segment; coll_host.c
# and coll_dev.c: the host and device transports). The shim compiles
# $(CONTEXT_SHIM_SRCS).

CONTEXT_SHIM_SRCS := context/device.c
CONTEXT_SHIM_SRCS += context/vdev.c context/coll.c context/coll_seg.c context/coll_host.c \
    context/coll_dev.c

# The host transport computes the kernel's element arithmetic on the CPU:
# no contraction into FMA.
$(B)/obj/context/coll_host.o: CFLAGS += -ffp-contract=off
