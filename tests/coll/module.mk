# tests/coll/: the tests of coll/: the virtual collectives' engine, its
# settings, the element arithmetic and the transports (coll_engine_test and
# coll_engine2_test,
# with coll_client.c and tests/clients/nccl_vclient.c under the shim), the
# collective digests the shim writes and the first-divergence finder on them
# (coll_digest_test, whole jobs of the trainer), and the all-reduce bench.

# Clients run under the shim by the tests, written against NVIDIA's headers
# only (plus the tests' own reference arithmetic, tests/coll/refarith.h):
# linked with simcuda's libraries like any NCCL program.
$(B)/tests/coll/coll_client: tests/coll/coll_client.c tests/coll/refarith.h \
		$(B)/sim/libnccl.so $(B)/sim/libcuda.so.1
	@mkdir -p $(dir $@)
	$(TEST_CLIENT_CC) $< -L$(B)/sim -lnccl -l:libcuda.so.1 $(LDFLAGS) -lm -o $@
$(B)/tests/clients/nccl_vclient: tests/clients/nccl_vclient.c tests/clients/orderval.h $(B)/sim/libnccl.so \
		$(B)/sim/libcuda.so.1
	@mkdir -p $(dir $@)
	$(TEST_CLIENT_CC) $< -L$(B)/sim -lnccl -l:libcuda.so.1 $(LDFLAGS) -lm -o $@
# One rank a process, placed as on several hosts (controller_hosts_test).
$(B)/tests/clients/nccl_xclient: tests/clients/nccl_xclient.c tests/clients/orderval.h $(B)/sim/libnccl.so \
		$(B)/sim/libcuda.so.1
	@mkdir -p $(dir $@)
	$(TEST_CLIENT_CC) $< -L$(B)/sim -lnccl -l:libcuda.so.1 $(LDFLAGS) -lm -o $@

# The engine's unit test links the settings parser, the placement rules and
# the host transport (their shim dependencies stubbed in the test) and reads the element
# arithmetic from kernels/reduce_kernels.h.
# One source, two programs (ES_TEST_PART 1: coll_engine_test, 2:
# coll_engine2_test), each well within the runner's time limit.
$(B)/obj/tests/coll/engine_test.o: CFLAGS += -ffp-contract=off -DES_TEST_PART=1
$(B)/obj/tests/coll/engine2_test.o: tests/coll/engine_test.c
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) $(CFLAGS) -ffp-contract=off -DES_TEST_PART=2 -MMD -MP -c -o $@ $<
$(B)/tests/coll_engine_test $(B)/tests/coll_engine2_test: $(B)/tests/coll_%_test: \
		$(B)/obj/tests/coll/%_test.o $(B)/obj/shim/config.o \
		$(B)/obj/wire/proto.o $(B)/obj/device/vdev.o $(B)/obj/coll/transport/host.o \
		$(TEST_HARNESS_OBJ) \
		| $(B)/lib/libeasyscale.so $(B)/sim/twins/libsimtwin_coll.so \
		  $(B)/tests/coll/coll_client $(B)/tests/clients/nccl_vclient
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $(filter %.o,$^) $(CMOCKA_LIBS) -lm

TESTS += $(B)/tests/coll_engine_test $(B)/tests/coll_engine2_test

# The shim's collective digests (EASYSCALE_DIGEST, coll/digest.c) with the
# trainer (whole jobs under easyscale-ctl run) and the first-divergence
# finder on them (controller/digest.c).
$(B)/tests/coll_digest_test: $(B)/obj/tests/coll/digest_test.o $(B)/obj/controller/digest.o \
		$(B)/obj/controller/util.o $(TEST_HARNESS_OBJ) \
		| $(B)/bin/easyscale-ctl $(B)/lib/libeasyscale.so $(EX_FATBIN) $(EX_TWINS)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $(filter %.o,$^) $(CMOCKA_LIBS) -lm

TESTS += $(B)/tests/coll_digest_test

# The links between the hosts' leaders (coll/xsock.c) on loopback, the
# library's log and error store stubbed in the test.
$(B)/tests/coll_xsock_test: $(B)/obj/tests/coll/xsock_test.o $(B)/obj/coll/xsock.o \
		$(TEST_HARNESS_OBJ)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $(filter %.o,$^) $(CMOCKA_LIBS) -lpthread

TESTS += $(B)/tests/coll_xsock_test

# ---- bench -------------------------------------------------------------------
# The all-reduce table (both transports, 2/4/8 ranks, 4 KiB..256 MiB) beside
# Open MPI's MPI_Allreduce, whose bench is built only where Open MPI is
# installed (Debian: openmpi-bin, libopenmpi-dev); nothing else needs it.
$(B)/bench/coll_bench: tests/coll/bench_coll.c $(B)/obj/kernels/reduce_blob.o $(B)/sim/libnccl.so \
		$(B)/sim/libcuda.so.1 | $(B)/lib/libeasyscale.so $(B)/sim/twins/libsimtwin_coll.so
	@mkdir -p $(dir $@)
	$(TEST_CLIENT_CC) $< $(B)/obj/kernels/reduce_blob.o -L$(B)/sim -lnccl -l:libcuda.so.1 \
		$(LDFLAGS) -o $@
BENCHES += $(B)/bench/coll_bench

MPICC ?= mpicc
ifneq ($(shell command -v $(MPICC) 2>/dev/null),)
$(B)/bench/coll_mpi_bench: tests/coll/bench_mpi.c
	@mkdir -p $(dir $@)
	$(MPICC) -O2 -Wall -Wextra -o $@ $<
bench: $(B)/bench/coll_mpi_bench
endif
