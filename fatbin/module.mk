# fatbin/: the reader of NVIDIA device-code containers ($(FATBIN_OBJ), defined
# in the top Makefile: compiled into simcuda's driver, the audit and the
# shim), its unit test, and the device code that test reads (compiled here by
# nvcc at build time, never committed; the audit's tests read it too).
#
# Variables local to this file are prefixed FB_.

ALL += $(FATBIN_OBJ)
TESTS += $(B)/tests/fatbin_test

FB_DIR := $(B)/tests/audit
FB_NVCC := $(NVCC) -O3 -Wno-deprecated-gpu-targets
FB_CU := tests/fatbin/fatbin_kernels.cu
FB_GENCODE := -gencode arch=compute_80,code=sm_80 -gencode arch=compute_90,code=[sm_90,compute_90]

FB_DATA := $(FB_DIR)/fb_default.fatbin $(FB_DIR)/fb_none.fatbin $(FB_DIR)/fb_zstd.fatbin \
    $(FB_DIR)/fb_lz.fatbin $(FB_DIR)/fb_sm90.cubin $(FB_DIR)/fb.ptx $(FB_DIR)/fb_host.o $(FB_DIR)/fb_rdc.o \
    $(FB_DIR)/audit_rdc_sm90.cubin $(FB_DIR)/fb_lto.fatbin $(FB_DIR)/fb_lto.o

$(FB_DIR)/fb_default.fatbin: $(FB_CU)
	@mkdir -p $(dir $@)
	$(FB_NVCC) -fatbin $(FB_GENCODE) -o $@ $<
$(FB_DIR)/fb_none.fatbin: $(FB_CU)
	@mkdir -p $(dir $@)
	$(FB_NVCC) -fatbin $(FB_GENCODE) --compress-mode=none -o $@ $<
$(FB_DIR)/fb_zstd.fatbin: $(FB_CU)
	@mkdir -p $(dir $@)
	$(FB_NVCC) -fatbin $(FB_GENCODE) -Xfatbin -compress-all -o $@ $<
$(FB_DIR)/fb_lz.fatbin: $(FB_CU)
	@mkdir -p $(dir $@)
	$(FB_NVCC) -fatbin $(FB_GENCODE) -Xfatbin -compress-all --compress-mode=speed -o $@ $<
$(FB_DIR)/fb_sm90.cubin: $(FB_CU)
	@mkdir -p $(dir $@)
	$(FB_NVCC) -cubin -arch=sm_90 -o $@ $<
$(FB_DIR)/fb.ptx: $(FB_CU)
	@mkdir -p $(dir $@)
	$(FB_NVCC) -ptx -arch=sm_90 -o $@ $<
$(FB_DIR)/fb_host.o: $(FB_CU)
	@mkdir -p $(dir $@)
	$(FB_NVCC) -c $(FB_GENCODE) -o $@ $<
# -dlto: PTX plus an LTO-IR entry (kind 8), and a host object holding one
$(FB_DIR)/fb_lto.fatbin: $(FB_CU)
	@mkdir -p $(dir $@)
	$(FB_NVCC) -fatbin -dlto -arch=sm_90 -o $@ $<
$(FB_DIR)/fb_lto.o: $(FB_CU)
	@mkdir -p $(dir $@)
	$(FB_NVCC) -c -dlto -arch=sm_90 -o $@ $<
$(FB_DIR)/fb_rdc.o: $(FB_CU)
	@mkdir -p $(dir $@)
	$(FB_NVCC) -c -rdc=true -arch=sm_80 -o $@ $<

# ---- unit test ---------------------------------------------------------------
$(B)/tests/fatbin_test: $(B)/obj/tests/fatbin/fatbin_test.o $(FATBIN_OBJ) $(TEST_HARNESS_OBJ) | $(FB_DATA)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $(filter %.o,$^) $(FATBIN_LIBS) $(CMOCKA_LIBS)

