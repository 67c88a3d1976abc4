# audit/: the float-atomic audit of device code: the audit library and its
# per-architecture SASS tables, the easyscale-audit CLI, the shim's run-time
# module audit (modaudit.c, with the lazy libelf/libzstd forwarders of
# dynlib.c), their unit tests, the device code those tests read (compiled
# here by nvcc at build time, never committed), and the fuzzer.
#
# For other modules: link $(AUDIT_OBJS) $(FATBIN_OBJ) with $(AUDIT_LIBS) to
# call audit/audit.h; the shim compiles $(AUDIT_SHIM_SRCS) into itself.
# Variables local to this file are prefixed AUD_.

AUDIT_OBJS := $(B)/obj/audit/audit.o $(B)/obj/audit/sass_tables.o
AUDIT_LIBS := $(FATBIN_LIBS) -ldl

AUDIT_SHIM_SRCS := audit/modaudit.c audit/dynlib.c

ALL += $(B)/bin/easyscale-audit
TESTS += $(B)/tests/audit_test

$(B)/bin/easyscale-audit: $(B)/obj/audit/audit_cli.o $(AUDIT_OBJS) $(FATBIN_OBJ)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $^ $(AUDIT_LIBS)

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

# ---- unit tests ------------------------------------------------------------
$(B)/tests/audit_test: $(B)/obj/tests/audit/audit_test.o $(AUDIT_OBJS) $(FATBIN_OBJ) $(TEST_HARNESS_OBJ) | $(AUD_AUDIT_DATA) $(FB_DATA) $(B)/bin/easyscale-audit
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $(filter %.o,$^) $(AUDIT_LIBS) $(CMOCKA_LIBS)

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
