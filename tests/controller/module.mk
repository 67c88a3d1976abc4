# tests/controller/: the tests of controller/ (easyscale-ctl): the
# intra-job scheduler against a brute force (controller_sched_test), the
# checksum harness and the first-divergence finder's reader
# (controller_verify_test: controller/verify.c, controller/digest.c, and
# easyscale-ctl verify on a stand-in and on the trainer), whole processes of
# easyscale-ctl with stand-in ESTs (fake_est.c) and with the trainer under
# the shim (controller_ctl_test); the scheduler and scale-event benches.

# fake_est: a stand-in EST speaking the protocol itself (answers moves as
# told), so the controller's scale paths are tested before ESTs can move.
$(B)/tests/controller/fake_est: $(B)/obj/tests/controller/fake_est.o $(B)/obj/wire/proto.o
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $^

$(B)/tests/controller_sched_test: $(B)/obj/tests/controller/sched_test.o $(B)/obj/controller/sched.o
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $^ $(CMOCKA_LIBS)

TESTS += $(B)/tests/controller_sched_test

# Whole processes: easyscale-ctl with fake ESTs and with the trainer under
# the shim (simcuda).
$(B)/tests/controller_ctl_test: $(B)/obj/tests/controller/ctl_test.o $(B)/obj/tests/controller/bgjob.o \
		$(CTL_LIB_OBJS) $(TEST_HARNESS_OBJ) \
		| $(B)/bin/easyscale-ctl $(B)/tests/controller/fake_est $(B)/lib/libeasyscale.so \
		  $(EX_FATBIN) $(EX_TWINS)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $(filter %.o,$^) $(CMOCKA_LIBS) -ldl -lm

TESTS += $(B)/tests/controller_ctl_test

# A job across hosts: the daemon's table of nodes (nodes.c) and two runs of
# easyscale-ctl on this host as two nodes (loopback): variables, prefixes,
# status, failures and silences, moves refused, a restarted daemon.
$(B)/tests/controller_nodes_test: $(B)/obj/tests/controller/nodes_test.o \
		$(B)/obj/tests/controller/bgjob.o $(CTL_LIB_OBJS) $(TEST_HARNESS_OBJ) \
		| $(B)/bin/easyscale-ctl $(B)/lib/libeasyscale.so $(B)/tests/controller/fake_est
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $(filter %.o,$^) $(CMOCKA_LIBS) -ldl -lm

TESTS += $(B)/tests/controller_nodes_test

# The trainer across 2 simulated hosts x 2 GPUs (scripts/simhosts, root):
# run --nnodes 2 on each (hosts_node.sh), a host's link cut mid-run.
$(B)/tests/controller_hosts_test: $(B)/obj/tests/controller/hosts_test.o \
		$(B)/obj/tests/controller/bgjob.o $(TEST_HARNESS_OBJ) \
		| $(B)/bin/easyscale-ctl $(B)/lib/libeasyscale.so $(EX_FATBIN) $(EX_TWINS) \
		  $(B)/tests/clients/nccl_xclient
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $(filter %.o,$^) $(CMOCKA_LIBS) -ldl -lm

TESTS += $(B)/tests/controller_hosts_test
HOSTS_TESTS += $(B)/tests/controller_hosts_test

# Unit tests of controller/verify.c and controller/digest.c, and whole
# processes (easyscale-ctl verify on a stand-in and on the trainer).
$(B)/tests/controller_verify_test: $(B)/obj/tests/controller/verify_test.o $(CTL_LIB_OBJS) \
		$(TEST_HARNESS_OBJ) \
		| $(B)/bin/easyscale-ctl $(B)/lib/libeasyscale.so $(EX_FATBIN) $(EX_TWINS)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $(filter %.o,$^) $(CMOCKA_LIBS) -ldl -lm

TESTS += $(B)/tests/controller_verify_test

# ---- bench -----------------------------------------------------------------
$(B)/bench/ctl_sched_bench: $(B)/obj/tests/controller/sched_bench.o $(B)/obj/controller/sched.o
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $^

BENCHES += $(B)/bench/ctl_sched_bench

# The latency of a scale event: four ESTs of 256 MiB (scale_est, under the
# shim) scaled from 4 GPUs to 2, beside bytes over memcpy bandwidth.
$(B)/tests/controller/scale_est: $(B)/obj/tests/controller/scale_est.o | $(SIMCUDA_LIB)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $^ -L$(B)/sim -l:libcuda.so.1

$(B)/bench/ctl_scale_bench: $(B)/obj/tests/controller/scale_bench.o \
		| $(SIMCUDA_LIB) $(B)/bin/easyscale-ctl $(B)/lib/libeasyscale.so \
		  $(B)/tests/controller/scale_est
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $(filter %.o,$^) -L$(B)/sim -l:libcuda.so.1

BENCHES += $(B)/bench/ctl_scale_bench
