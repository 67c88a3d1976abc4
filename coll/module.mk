# coll/: the virtual collectives (shim/README.md, "NCCL"): the engine
# (comm.c: communicators; enqueue.c: operations; group.c: groups; launch.c:
# a batch on its stream; init.c: a communicator's set-up; step.c: the
# ordering steps; seg.c: the shared segment; tslice.c: time-slicing;
# util.c: errors, progress), one file per transport behind the transport
# struct (transport/host.c, transport/dev.c; coll_int.h), and the
# collective digests (digest.c, EASYSCALE_DIGEST). Calls go one way (the
# list in coll_int.h). The shim compiles $(COLL_SRCS).
COLL_SRCS := coll/comm.c coll/init.c coll/group.c coll/enqueue.c coll/launch.c coll/step.c \
	coll/seg.c coll/tslice.c coll/util.c coll/transport/host.c coll/transport/dev.c coll/digest.c

# The host transport computes the kernel's element arithmetic on the CPU:
# no contraction into FMA. Its reduction loops are vectorized across
# elements (each element's additions stay in rank order: the same bits).
$(B)/obj/coll/transport/host.o: CFLAGS += -ffp-contract=off -ftree-vectorize -fvect-cost-model=dynamic

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
		$(B)/obj/wire/proto.o $(B)/obj/device/vdev.o $(B)/obj/coll/transport/host.o \
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
