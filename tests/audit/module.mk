# tests/audit/: the tests of audit/: the audit library, its SASS tables and
# the easyscale-audit CLI (audit_library_test), the shim's run-time module
# audit (audit_runtime_test, with its client), the device code those tests
# read (compiled here by nvcc at build time, never committed), and the
# fuzzer of the readers and the audit (`make fuzz`).
# Variables local to this file are prefixed AUD_.

TESTS += $(B)/tests/audit_library_test $(B)/tests/audit_runtime_test

# ---- device code for the tests (outputs under $(B)/tests/audit/) ----------
AUD_TA := $(B)/tests/audit
AUD_NVCC := $(NVCC) -O3 -Wno-deprecated-gpu-targets

# Audit kernels: one cubin per architecture, PTX, and a host object.
AUD_AUDIT_CU := tests/audit/audit_kernels.cu
AUD_AUDIT_ARCHS := 75 80 86 89 90 100 103 120 121
AUD_AUDIT_DATA := $(foreach a,$(AUD_AUDIT_ARCHS),$(AUD_TA)/audit_sm$(a).cubin) \
    $(AUD_TA)/audit_sm90.ptx $(AUD_TA)/audit_sm80.ptx $(AUD_TA)/audit_host.o

$(AUD_TA)/audit_sm%.cubin: $(AUD_AUDIT_CU)
	@mkdir -p $(dir $@)
	$(AUD_NVCC) -cubin -arch=sm_$* -o $@ $<
$(AUD_TA)/audit_rdc_sm90.cubin: $(AUD_AUDIT_CU)
	@mkdir -p $(dir $@)
	$(AUD_NVCC) -cubin -rdc=true -arch=sm_90 -o $@ $<
$(AUD_TA)/audit_sm%.ptx: $(AUD_AUDIT_CU)
	@mkdir -p $(dir $@)
	$(AUD_NVCC) -ptx -arch=sm_$* -o $@ $<
$(AUD_TA)/audit_host.o: $(AUD_AUDIT_CU)
	@mkdir -p $(dir $@)
	$(AUD_NVCC) -c -gencode arch=compute_80,code=sm_80 -gencode arch=compute_90,code=[sm_90,compute_90] -o $@ $<

# ---- the audit library and the CLI ------------------------------------------
$(B)/tests/audit_library_test: $(B)/obj/tests/audit/library_test.o $(AUDIT_OBJS) $(FATBIN_OBJ) \
		$(TEST_HARNESS_OBJ) | $(AUD_AUDIT_DATA) $(FB_DATA) $(B)/bin/easyscale-audit
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $(filter %.o,$^) $(AUDIT_LIBS) $(CMOCKA_LIBS)

# ---- the run-time kernel audit of libeasyscale.so (audit/modaudit.c) ---------
# The client's launching function must show in the shim's host stack: frame
# pointers, debug info, and -rdynamic so dladdr names it too.
$(B)/obj/tests/audit/audit_client.o: CFLAGS += -fno-omit-frame-pointer -O1
$(B)/tests/audit/audit_client: $(B)/obj/tests/audit/audit_client.o $(B)/sim/libcuda.so.1
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -rdynamic -o $@ $< -L$(B)/sim -l:libcuda.so.1

$(B)/tests/audit_runtime_test: $(B)/obj/tests/audit/runtime_test.o $(TEST_HARNESS_OBJ) \
		| $(B)/lib/libeasyscale.so $(B)/tests/audit/audit_client $(EX_FATBIN) $(EX_TWINS)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $(filter %.o,$^) $(CMOCKA_LIBS)

# ---- fuzzing (optional, never part of `make test`) ------------------------
# `make fuzz` builds a libFuzzer harness of the readers and the audit with
# clang (address + undefined sanitizers) and runs it for FUZZ_SECONDS on a
# corpus seeded with the test images; a crash stops it with the input saved
# under $(B)/fuzz/. Needs clang with the libFuzzer runtime.
AUD_FUZZ_CC ?= clang
FUZZ_SECONDS ?= 120
AUD_FUZZ := $(B)/fuzz/audit_fuzz
AUD_FUZZ_SRC := tests/audit/audit_fuzz.c audit/audit.c audit/sass_tables.c fatbin/fatbin.c

$(AUD_FUZZ): $(AUD_FUZZ_SRC) audit/audit.h fatbin/fatbin.h
	@mkdir -p $(dir $@)
	$(AUD_FUZZ_CC) $(CPPFLAGS) -std=gnu11 -Wall -Wextra -g -O1 -fno-omit-frame-pointer \
	    -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all \
	    -o $@ $(AUD_FUZZ_SRC) $(FATBIN_LIBS)

.PHONY: fuzz
fuzz: $(AUD_FUZZ) $(FB_DATA) $(AUD_AUDIT_DATA)
	@mkdir -p $(B)/fuzz/corpus $(B)/fuzz/seeds
	@cp $(FB_DATA) $(AUD_AUDIT_DATA) $(B)/fuzz/seeds/
	cd $(B)/fuzz && ./audit_fuzz -max_total_time=$(FUZZ_SECONDS) -max_len=400000 \
	    -rss_limit_mb=4096 -print_final_stats=1 corpus seeds
