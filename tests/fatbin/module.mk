# tests/fatbin/: the unit test of the fatbin reader (fatbin/fatbin.c) and
# the device code it reads (tests/fatbin/fatbin_kernels.cu, compiled by nvcc
# at build time into $(FB_DIR), never committed; the audit's and the
# kernels' tests read it too: $(FB_DATA)).
# Variables local to this file are prefixed FB_.

TESTS += $(B)/tests/fatbin_reader_test

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
$(B)/tests/fatbin_reader_test: $(B)/obj/tests/fatbin/reader_test.o $(FATBIN_OBJ) $(TEST_HARNESS_OBJ) \
		| $(FB_DATA)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $(filter %.o,$^) $(FATBIN_LIBS) $(CMOCKA_LIBS)
