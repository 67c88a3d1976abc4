# controller/: easyscale-ctl (one binary: CLI, daemon, launcher, scheduler),
# the control protocol shared with the shim (wire/proto.c is also
# compiled into libeasyscale.so by shim/module.mk), its tests, the
# scheduler benchmark and the protocol fuzzer.
# Variables local to this file are prefixed CTL_.

CTL_SRCS := controller/main.c controller/util.c controller/run.c controller/daemon.c controller/client.c \
    controller/gpus.c controller/sock.c controller/job.c controller/sched.c wire/proto.c \
    controller/verify.c controller/verify_run.c controller/digest.c
CTL_OBJS := $(patsubst %.c,$(B)/obj/%.o,$(CTL_SRCS))
# Everything of easyscale-ctl but main(), for the unit tests.
CTL_LIB_OBJS := $(filter-out $(B)/obj/controller/main.o,$(CTL_OBJS))

$(B)/bin/easyscale-ctl: $(CTL_OBJS)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $^ -ldl -lm

ALL += $(B)/bin/easyscale-ctl

# ---- tests -----------------------------------------------------------------
# ctl_fake_est: a stand-in EST speaking the protocol itself (answers moves as
# told), so the controller's scale paths are tested before ESTs can move.
$(B)/tests/controller/fake_est: $(B)/obj/tests/controller/fake_est.o $(B)/obj/wire/proto.o
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $^

$(B)/tests/ctl_sched_test: $(B)/obj/tests/controller/sched_test.o $(B)/obj/controller/sched.o
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $^ $(CMOCKA_LIBS)

TESTS += $(B)/tests/ctl_sched_test

$(B)/tests/ctl_proto_test: $(B)/obj/tests/controller/proto_test.o $(B)/obj/wire/proto.o \
		$(B)/obj/controller/sock.o $(B)/obj/controller/util.o $(B)/obj/shim/config.o \
		$(B)/obj/shim/step.o $(B)/obj/shim/log.o
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $^ $(CMOCKA_LIBS) -lm

TESTS += $(B)/tests/ctl_proto_test

# ---- fuzzing (optional, never part of `make test`) ------------------------
# `make fuzz` also runs the protocol decoder's libFuzzer harness (clang,
# address + undefined) for FUZZ_SECONDS (audit/module.mk) on seeds of every
# message type; a crash stops it with the input saved under $(B)/fuzz/.
CTL_FUZZ_CC ?= clang
CTL_FUZZ := $(B)/fuzz/proto_fuzz
CTL_FUZZ_SRC := tests/controller/proto_fuzz.c wire/proto.c

$(CTL_FUZZ): $(CTL_FUZZ_SRC) wire/proto.h
	@mkdir -p $(dir $@)
	$(CTL_FUZZ_CC) $(CPPFLAGS) -std=gnu11 -Wall -Wextra -g -O1 -fno-omit-frame-pointer \
	    -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all -o $@ $(CTL_FUZZ_SRC)

$(B)/fuzz/proto_fuzz_seeds: $(B)/obj/tests/controller/fuzz_seeds.o $(B)/obj/wire/proto.o
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $^

.PHONY: fuzz fuzz-proto
fuzz: fuzz-proto
fuzz-proto: $(CTL_FUZZ) $(B)/fuzz/proto_fuzz_seeds
	@mkdir -p $(B)/fuzz/proto_corpus $(B)/fuzz/proto_seeds
	$(B)/fuzz/proto_fuzz_seeds $(B)/fuzz/proto_seeds
	cd $(B)/fuzz && ./proto_fuzz -max_total_time=$(FUZZ_SECONDS) -max_len=65536 \
	    -rss_limit_mb=4096 -print_final_stats=1 proto_corpus proto_seeds

# Whole processes: easyscale-ctl with fake ESTs and with the trainer under
# the shim (simcuda).
$(B)/tests/ctl_test: $(B)/obj/tests/controller/ctl_test.o $(CTL_LIB_OBJS) $(TEST_HARNESS_OBJ) \
		| $(B)/bin/easyscale-ctl $(B)/tests/controller/fake_est $(B)/lib/libeasyscale.so \
		  $(EX_FATBIN) $(EX_TWINS)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $(filter %.o,$^) $(CMOCKA_LIBS) -ldl -lm

TESTS += $(B)/tests/ctl_test

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
