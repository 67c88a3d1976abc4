# context/: the state of an EST that outlives any one GPU. Today: the
# canonical device identity of d2 (device.c), the shim's own device memory
# made ahead (devmem.c), placement and virtual devices
# (vdev.c), and the virtual collectives' engine (coll.c: communicators,
# groups, host-function steps; coll_seg.c: the shared segment; coll_host.c
# and coll_dev.c: the host and device transports), and the machinery that
# moves an EST (below). The shim compiles
# $(CONTEXT_SHIM_SRCS).

CONTEXT_SHIM_SRCS := context/device.c context/devmem.c

# ---- moving an EST (docs/MOVING.md) ------------------------------------------
# The machinery in context/ that moves an EST's device state: the driver
# table it calls (drv.c), the memory registry (memreg.c), the swap engine
# (swap.c, with the checksum kernel of kernels/swapsum.cu), the virtual
# handles (vhandle.c), the door of safe points (door.c), the move
# orchestrator (mover.c), time-slicing of a slot (tslice.c), memory pools
# (mempool.c); built and tested
# on simcuda's driver directly (tests/context/), and linked into the shim.
CONTEXT_MOVE_SRCS := context/drv.c context/hmap.c context/harena.c context/memreg.c context/swap.c \
    context/vhandle.c context/door.c context/mover.c context/tslice.c context/mempool.c
CONTEXT_MOVE_OBJS := $(patsubst %.c,$(B)/obj/%.o,$(CONTEXT_MOVE_SRCS)) $(KERNELS_SWAPSUM_OBJ) \
    $(FATBIN_OBJ)
# Linked into the shim as well.
CONTEXT_SHIM_SRCS += $(CONTEXT_MOVE_SRCS)
CT_COMMON_OBJ := $(B)/obj/tests/context/ctxtest.o
CT_LIBS := -L$(B)/sim -l:libcuda.so.1 $(CMOCKA_LIBS) $(FATBIN_LIBS) -ldl -lrt

$(B)/tests/context_memreg_test: $(B)/obj/tests/context/memreg_test.o $(CT_COMMON_OBJ) \
		$(CONTEXT_MOVE_OBJS) | $(SIMCUDA_LIB)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $(filter %.o,$^) $(CT_LIBS)

$(B)/tests/context_swap_test: $(B)/obj/tests/context/swap_test.o $(CT_COMMON_OBJ) \
		$(CONTEXT_MOVE_OBJS) | $(SIMCUDA_LIB) $(ES_SWAPSUM_TWIN)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $(filter %.o,$^) $(CT_LIBS)

$(B)/tests/context_vhandle_test: $(B)/obj/tests/context/vhandle_test.o $(CT_COMMON_OBJ) \
		$(CONTEXT_MOVE_OBJS) | $(SIMCUDA_LIB) $(ES_SWAPSUM_TWIN) \
		$(ES_SWAPSUM_FATBIN)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $(filter %.o,$^) $(CT_LIBS)

$(B)/tests/context_mover_test: $(B)/obj/tests/context/mover_test.o $(CT_COMMON_OBJ) \
		$(CONTEXT_MOVE_OBJS) | $(SIMCUDA_LIB) $(ES_SWAPSUM_TWIN)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $(filter %.o,$^) $(CT_LIBS)

$(B)/tests/context_tslice_test: $(B)/obj/tests/context/tslice_test.o $(CT_COMMON_OBJ) \
		$(CONTEXT_MOVE_OBJS) | $(SIMCUDA_LIB) $(ES_SWAPSUM_TWIN)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $(filter %.o,$^) $(CT_LIBS)

$(B)/tests/context_mempool_test: $(B)/obj/tests/context/mempool_test.o $(CT_COMMON_OBJ) \
		$(CONTEXT_MOVE_OBJS) | $(SIMCUDA_LIB)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $(filter %.o,$^) $(CT_LIBS)

# The door needs no driver.
$(B)/tests/context_door_test: $(B)/obj/tests/context/door_test.o $(B)/obj/context/door.o
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $(filter %.o,$^) $(CMOCKA_LIBS)

TESTS += $(B)/tests/context_memreg_test $(B)/tests/context_swap_test \
    $(B)/tests/context_vhandle_test $(B)/tests/context_door_test $(B)/tests/context_mover_test \
    $(B)/tests/context_tslice_test $(B)/tests/context_mempool_test

$(B)/bench/swap_bench: $(B)/obj/tests/context/bench_swap.o $(CONTEXT_MOVE_OBJS) \
		| $(SIMCUDA_LIB) $(ES_SWAPSUM_TWIN)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $(filter %.o,$^) $(CT_LIBS)

BENCHES += $(B)/bench/swap_bench
CONTEXT_SHIM_SRCS += context/vdev.c context/coll.c context/coll_seg.c context/coll_host.c \
    context/coll_dev.c
# The collective digests (EASYSCALE_DIGEST), called by the engine.
CONTEXT_SHIM_SRCS += context/digest.c

# The host transport computes the kernel's element arithmetic on the CPU:
# no contraction into FMA. Its reduction loops are vectorized across
# elements (each element's additions stay in rank order: the same bits).
$(B)/obj/context/coll_host.o: CFLAGS += -ffp-contract=off -ftree-vectorize -fvect-cost-model=dynamic

# ---- tests -------------------------------------------------------------------
# Clients run under the shim by the tests, written against NVIDIA's headers
# only (plus the tests' own reference arithmetic, tests/coll/refarith.h):
# linked with simcuda's libraries like any NCCL program.
COLL_CLIENT_CC = $(CC) -I$(CUDA_HOME)/include -I. -std=gnu11 -Wall -Wextra -g -O2 \
	-ffp-contract=off $(filter -fsanitize=%,$(CFLAGS))
$(B)/tests/coll/coll_client: tests/coll/coll_client.c tests/coll/refarith.h \
		$(B)/sim/libnccl.so $(B)/sim/libcuda.so.1
	@mkdir -p $(dir $@)
	$(COLL_CLIENT_CC) $< -L$(B)/sim -lnccl -l:libcuda.so.1 $(LDFLAGS) -lm -o $@
$(B)/tests/clients/nccl_vclient: tests/clients/nccl_vclient.c $(B)/sim/libnccl.so \
		$(B)/sim/libcuda.so.1
	@mkdir -p $(dir $@)
	$(COLL_CLIENT_CC) $< -L$(B)/sim -lnccl -l:libcuda.so.1 $(LDFLAGS) -lm -o $@
$(B)/tests/coll/vdev_probe: tests/coll/vdev_probe.c $(B)/sim/libcuda.so.1
	@mkdir -p $(dir $@)
	$(COLL_CLIENT_CC) $< -L$(B)/sim -l:libcuda.so.1 $(LDFLAGS) -o $@

# The engine's unit test links the settings parser, the placement rules and
# the host transport (their shim dependencies stubbed in the test) and reads the element
# arithmetic from kernels/reduce_kernels.h.
$(B)/obj/tests/coll/coll_test.o: CFLAGS += -ffp-contract=off
$(B)/tests/coll_test: $(B)/obj/tests/coll/coll_test.o $(B)/obj/shim/config.o \
		$(B)/obj/controller/proto.o $(B)/obj/context/vdev.o $(B)/obj/context/coll_host.o \
		$(TEST_HARNESS_OBJ) \
		| $(B)/lib/libeasyscale.so $(B)/sim/twins/libsimtwin_coll.so \
		  $(B)/tests/coll/coll_client $(B)/tests/clients/nccl_vclient
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $(filter %.o,$^) $(CMOCKA_LIBS) -lm

$(B)/tests/vdev_test: $(B)/obj/tests/coll/vdev_test.o $(TEST_HARNESS_OBJ) \
		| $(B)/lib/libeasyscale.so $(B)/tests/coll/vdev_probe
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $(filter %.o,$^) $(CMOCKA_LIBS)

TESTS += $(B)/tests/coll_test $(B)/tests/vdev_test

# ---- bench -------------------------------------------------------------------
# The all-reduce table (both transports, 2/4/8 ranks, 4 KiB..256 MiB) beside
# Open MPI's MPI_Allreduce, whose bench is built only where Open MPI is
# installed (Debian: openmpi-bin, libopenmpi-dev); nothing else needs it.
$(B)/bench/coll_bench: tests/coll/bench_coll.c $(B)/sim/libnccl.so $(B)/sim/libcuda.so.1 \
		| $(B)/lib/libeasyscale.so $(B)/sim/twins/libsimtwin_coll.so
	@mkdir -p $(dir $@)
	$(COLL_CLIENT_CC) $< -L$(B)/sim -lnccl -l:libcuda.so.1 $(LDFLAGS) -o $@
BENCHES += $(B)/bench/coll_bench

MPICC ?= mpicc
ifneq ($(shell command -v $(MPICC) 2>/dev/null),)
$(B)/bench/coll_mpi_bench: tests/coll/bench_mpi.c
	@mkdir -p $(dir $@)
	$(MPICC) -O2 -Wall -Wextra -o $@ $<
bench: $(B)/bench/coll_mpi_bench
endif
