# tests/wire/: the tests of wire/: the control protocol (wire/proto.c) and
# what sits around it on both sides (wire_proto_test: every message, the
# layout byte by byte, bad frames, the frame reader, the TCP token block,
# the controller's peer check through its seam, the shim's strict parsing
# of its control variables), and the protocol decoder's fuzzer.

$(B)/tests/wire_proto_test: $(B)/obj/tests/wire/proto_test.o $(B)/obj/wire/proto.o \
		$(B)/obj/controller/sock.o $(B)/obj/controller/util.o $(B)/obj/shim/config.o \
		$(B)/obj/shim/step.o $(B)/obj/shim/log.o
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $^ $(CMOCKA_LIBS) -lm

TESTS += $(B)/tests/wire_proto_test

# ---- fuzzing (optional, never part of `make test`) ------------------------
# `make fuzz` also runs the protocol decoder's libFuzzer harness (clang,
# address + undefined) for FUZZ_SECONDS (tests/audit/module.mk) on seeds of
# every message type; a crash stops it with the input saved under $(B)/fuzz/.
CTL_FUZZ_CC ?= clang
CTL_FUZZ := $(B)/fuzz/proto_fuzz
CTL_FUZZ_SRC := tests/wire/proto_fuzz.c wire/proto.c

$(CTL_FUZZ): $(CTL_FUZZ_SRC) wire/proto.h
	@mkdir -p $(dir $@)
	$(CTL_FUZZ_CC) $(CPPFLAGS) -std=gnu11 -Wall -Wextra -g -O1 -fno-omit-frame-pointer \
	    -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all -o $@ $(CTL_FUZZ_SRC)

$(B)/fuzz/proto_fuzz_seeds: $(B)/obj/tests/wire/fuzz_seeds.o $(B)/obj/wire/proto.o
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $^

.PHONY: fuzz fuzz-proto
fuzz: fuzz-proto
fuzz-proto: $(CTL_FUZZ) $(B)/fuzz/proto_fuzz_seeds
	@mkdir -p $(B)/fuzz/proto_corpus $(B)/fuzz/proto_seeds
	$(B)/fuzz/proto_fuzz_seeds $(B)/fuzz/proto_seeds
	cd $(B)/fuzz && ./proto_fuzz -max_total_time=$(FUZZ_SECONDS) -max_len=65536 \
	    -rss_limit_mb=4096 -print_final_stats=1 proto_corpus proto_seeds
