# context/: the fatbin/cubin/PTX reader ($(FATBIN_OBJ), shared with simcuda
# and the shim), the float-atomic audit library and the easyscale-audit CLI,
# their unit tests, and the device code those tests read (compiled here by
# nvcc at build time, never committed).
#
# For other modules: link $(AUDIT_OBJS) $(FATBIN_OBJ) with $(AUDIT_LIBS) to
# call context/audit.h. Variables local to this file are prefixed CTX_.

AUDIT_OBJS := $(B)/obj/context/audit.o $(B)/obj/context/sass_tables.o
AUDIT_LIBS := $(FATBIN_LIBS) -ldl

ALL += $(FATBIN_OBJ) $(B)/bin/easyscale-audit
TESTS += $(B)/tests/fatbin_test $(B)/tests/audit_test

$(B)/bin/easyscale-audit: $(B)/obj/context/audit_cli.o $(AUDIT_OBJS) $(FATBIN_OBJ)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $^ $(AUDIT_LIBS)

# ---- device code for the tests (outputs under $(B)/tests/audit/) ----------
CTX_TA := $(B)/tests/audit
CTX_NVCC := $(NVCC) -O3 -Wno-deprecated-gpu-targets
CTX_FB_CU := tests/context/fatbin_kernels.cu
CTX_FB_GENCODE := -gencode arch=compute_80,code=sm_80 -gencode arch=compute_90,code=[sm_90,compute_90]

CTX_FATBIN_DATA := $(CTX_TA)/fb_default.fatbin $(CTX_TA)/fb_none.fatbin $(CTX_TA)/fb_zstd.fatbin \
    $(CTX_TA)/fb_lz.fatbin $(CTX_TA)/fb_sm90.cubin $(CTX_TA)/fb.ptx $(CTX_TA)/fb_host.o $(CTX_TA)/fb_rdc.o \
    $(CTX_TA)/audit_rdc_sm90.cubin $(CTX_TA)/fb_lto.fatbin $(CTX_TA)/fb_lto.o

$(CTX_TA)/fb_default.fatbin: $(CTX_FB_CU)
	@mkdir -p $(dir $@)
	$(CTX_NVCC) -fatbin $(CTX_FB_GENCODE) -o $@ $<
$(CTX_TA)/fb_none.fatbin: $(CTX_FB_CU)
	@mkdir -p $(dir $@)
	$(CTX_NVCC) -fatbin $(CTX_FB_GENCODE) --compress-mode=none -o $@ $<
$(CTX_TA)/fb_zstd.fatbin: $(CTX_FB_CU)
	@mkdir -p $(dir $@)
	$(CTX_NVCC) -fatbin $(CTX_FB_GENCODE) -Xfatbin -compress-all -o $@ $<
$(CTX_TA)/fb_lz.fatbin: $(CTX_FB_CU)
	@mkdir -p $(dir $@)
	$(CTX_NVCC) -fatbin $(CTX_FB_GENCODE) -Xfatbin -compress-all --compress-mode=speed -o $@ $<
$(CTX_TA)/fb_sm90.cubin: $(CTX_FB_CU)
	@mkdir -p $(dir $@)
	$(CTX_NVCC) -cubin -arch=sm_90 -o $@ $<
$(CTX_TA)/fb.ptx: $(CTX_FB_CU)
	@mkdir -p $(dir $@)
	$(CTX_NVCC) -ptx -arch=sm_90 -o $@ $<
$(CTX_TA)/fb_host.o: $(CTX_FB_CU)
	@mkdir -p $(dir $@)
	$(CTX_NVCC) -c $(CTX_FB_GENCODE) -o $@ $<
# -dlto: PTX plus an LTO-IR entry (kind 8), and a host object holding one
$(CTX_TA)/fb_lto.fatbin: $(CTX_FB_CU)
	@mkdir -p $(dir $@)
	$(CTX_NVCC) -fatbin -dlto -arch=sm_90 -o $@ $<
$(CTX_TA)/fb_lto.o: $(CTX_FB_CU)
	@mkdir -p $(dir $@)
	$(CTX_NVCC) -c -dlto -arch=sm_90 -o $@ $<
$(CTX_TA)/fb_rdc.o: $(CTX_FB_CU)
	@mkdir -p $(dir $@)
	$(CTX_NVCC) -c -rdc=true -arch=sm_80 -o $@ $<

# Audit kernels: one cubin per architecture, PTX, and a host object.
CTX_AUDIT_CU := tests/context/audit_kernels.cu
CTX_AUDIT_ARCHS := 75 80 86 89 90 100 103 120 121
CTX_AUDIT_DATA := $(foreach a,$(CTX_AUDIT_ARCHS),$(CTX_TA)/audit_sm$(a).cubin) \
    $(CTX_TA)/audit_sm90.ptx $(CTX_TA)/audit_sm80.ptx $(CTX_TA)/audit_host.o

$(CTX_TA)/audit_sm%.cubin: $(CTX_AUDIT_CU)
	@mkdir -p $(dir $@)
	$(CTX_NVCC) -cubin -arch=sm_$* -o $@ $<
$(CTX_TA)/audit_rdc_sm90.cubin: $(CTX_AUDIT_CU)
	@mkdir -p $(dir $@)
	$(CTX_NVCC) -cubin -rdc=true -arch=sm_90 -o $@ $<
$(CTX_TA)/audit_sm%.ptx: $(CTX_AUDIT_CU)
	@mkdir -p $(dir $@)
	$(CTX_NVCC) -ptx -arch=sm_$* -o $@ $<
$(CTX_TA)/audit_host.o: $(CTX_AUDIT_CU)
	@mkdir -p $(dir $@)
	$(CTX_NVCC) -c -gencode arch=compute_80,code=sm_80 -gencode arch=compute_90,code=[sm_90,compute_90] -o $@ $<

# ---- unit tests ------------------------------------------------------------
$(B)/tests/fatbin_test: $(B)/obj/tests/context/fatbin_test.o $(FATBIN_OBJ) $(TEST_HARNESS_OBJ) | $(CTX_FATBIN_DATA)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $(filter %.o,$^) $(FATBIN_LIBS) $(CMOCKA_LIBS)

$(B)/tests/audit_test: $(B)/obj/tests/context/audit_test.o $(AUDIT_OBJS) $(FATBIN_OBJ) $(TEST_HARNESS_OBJ) | $(CTX_AUDIT_DATA) $(CTX_FATBIN_DATA) $(B)/bin/easyscale-audit
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $(filter %.o,$^) $(AUDIT_LIBS) $(CMOCKA_LIBS)

# ---- fuzzing (optional, never part of `make test`) ------------------------
# `make fuzz` builds a libFuzzer harness of the readers and the audit with
# clang (address + undefined sanitizers) and runs it for FUZZ_SECONDS on a
# corpus seeded with the test images; a crash stops it with the input saved
# under $(B)/fuzz/. Needs clang with the libFuzzer runtime.
CTX_FUZZ_CC ?= clang
FUZZ_SECONDS ?= 120
CTX_FUZZ := $(B)/fuzz/audit_fuzz
CTX_FUZZ_SRC := tests/context/audit_fuzz.c context/audit.c context/sass_tables.c context/fatbin.c

$(CTX_FUZZ): $(CTX_FUZZ_SRC) context/audit.h context/fatbin.h
	@mkdir -p $(dir $@)
	$(CTX_FUZZ_CC) $(CPPFLAGS) -std=gnu11 -Wall -Wextra -g -O1 -fno-omit-frame-pointer \
	    -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all \
	    -o $@ $(CTX_FUZZ_SRC) $(FATBIN_LIBS)

.PHONY: fuzz
fuzz: $(CTX_FUZZ) $(CTX_FATBIN_DATA) $(CTX_AUDIT_DATA)
	@mkdir -p $(B)/fuzz/corpus $(B)/fuzz/seeds
	@cp $(CTX_FATBIN_DATA) $(CTX_AUDIT_DATA) $(B)/fuzz/seeds/
	cd $(B)/fuzz && ./audit_fuzz -max_total_time=$(FUZZ_SECONDS) -max_len=400000 \
	    -rss_limit_mb=4096 -print_final_stats=1 corpus seeds
