# libeasyscale.so: the spine (shim/) linked with the sources the folders above
# it contribute (their module.mk files set LIB_SRCS, WIRE_SRCS, DEVICE_SRCS,
# MOVE_SHIM_SRCS, COLL_SRCS, INTERCEPT_SRCS, KERNELS_SHIM_SRCS/_OBJS and
# AUDIT_SHIM_SRCS), the shim's tests and its pass-through bench.
#
# No CUDA library is linked: everything is dlopen'ed by soname at first use.
# The run-time kernel audit (audit/modaudit.c) links the audit library
# ($(AUDIT_OBJS), $(FATBIN_OBJ)), but not libelf and libzstd: the elf_* /
# ZSTD_* functions it calls are hidden forwarders (audit/dynlib.c) to the
# libraries dlopen'ed RTLD_LOCAL at the first audit (a NEEDED entry would stop
# every process from starting where they are missing, and would put them
# ahead of the application's own copies). libunwind is not linked:
# it exports _Unwind_* and backtrace, which would then interpose libgcc_s's
# and glibc's in every process the shim is preloaded into; modaudit.c
# dlopens it RTLD_LOCAL the first time it prints a stack.
# Only the wrapped names, dlsym and easyscale_* are exported
# (-fvisibility=hidden + shim/libeasyscale.map, anonymous version: the
# definitions interpose NVIDIA's versioned exports).

SHIM_SRCS := shim/init.c shim/config.c shim/log.c shim/resolve.c \
    shim/control.c shim/step.c
ES_SHIM_SRCS := $(SHIM_SRCS) $(WIRE_SRCS) $(LIB_SRCS) $(DEVICE_SRCS) $(MOVE_SHIM_SRCS) \
    $(COLL_SRCS) $(INTERCEPT_SRCS) $(KERNELS_SHIM_SRCS) $(AUDIT_SHIM_SRCS)
ES_SHIM_OBJS := $(patsubst %.c,$(B)/obj/%.o,$(ES_SHIM_SRCS)) $(KERNELS_SHIM_OBJS)
ES_SHIM_LINK_OBJS := $(ES_SHIM_OBJS) $(AUDIT_OBJS) $(FATBIN_OBJ)

$(ES_SHIM_OBJS): CFLAGS += -fvisibility=hidden

$(B)/lib/libeasyscale.so: $(ES_SHIM_LINK_OBJS) shim/libeasyscale.map
	@mkdir -p $(dir $@)
	$(CC) $(SO_LDFLAGS) -Wl,--version-script=shim/libeasyscale.map -Wl,-z,now \
		$(if $(SAN),,-Wl,-z,defs) -o $@ $(ES_SHIM_LINK_OBJS) -ldl

ALL += $(B)/lib/libeasyscale.so

# ---- tests -----------------------------------------------------------------
# Client programs run by shim_test under the shim (whole processes).
# The client computes the portable kernels' order on the host: no contraction.
$(B)/obj/tests/shim/es_client.o: CFLAGS += -ffp-contract=off
ES_SIMLIBS := $(B)/sim/libcuda.so.1 $(B)/sim/libcublas.so.13 $(B)/sim/libcudnn.so.9
$(B)/tests/shim/es_client: $(B)/obj/tests/shim/es_client.o $(ES_SIMLIBS)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $< -L$(B)/sim -l:libcuda.so.1 -l:libcublas.so.13 -l:libcudnn.so.9 \
		-ldl -lm
# Every entry of shim/funcs.h through every path (linked with the
# simcuda libraries: without the shim direct references are theirs).
$(B)/tests/shim/es_allpaths: $(B)/obj/tests/shim/es_allpaths.o $(ES_SIMLIBS) $(B)/sim/libnccl.so.2 \
		$(B)/sim/libcublasLt.so.13
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $< -Wl,--no-as-needed -L$(B)/sim -l:libcuda.so.1 -l:libcublas.so.13 \
		-l:libcudnn.so.9 -l:libnccl.so.2 -l:libcublasLt.so.13 -Wl,--as-needed -ldl
# cudnn-frontend's call sequences (tests/shim/dnn_test.c).
$(B)/obj/tests/shim/fe_client.o: CFLAGS += -ffp-contract=off
$(B)/tests/shim/fe_client: $(B)/obj/tests/shim/fe_client.o $(ES_SIMLIBS)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $< -L$(B)/sim -l:libcuda.so.1 -l:libcudnn.so.9 -lm
# cuBLASLt the way PyTorch calls it (tests/shim/lt_test.c).
$(B)/obj/tests/shim/lt_client.o: CFLAGS += -ffp-contract=off
$(B)/tests/shim/lt_client: $(B)/obj/tests/shim/lt_client.o $(B)/sim/libcublasLt.so.13 \
		$(B)/sim/libcuda.so.1
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $< -L$(B)/sim -l:libcuda.so.1 -l:libcublasLt.so.13 -lm
# Library calls during a CUDA graph capture (tests/shim/capture_test.c).
$(B)/tests/shim/cap_client: $(B)/obj/tests/shim/cap_client.o $(ES_SIMLIBS)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $< -L$(B)/sim -l:libcuda.so.1 -l:libcublas.so.13 -l:libcudnn.so.9
# Half precision through the legacy APIs (tests/shim/half_test.c).
$(B)/obj/tests/shim/half_client.o: CFLAGS += -ffp-contract=off
$(B)/tests/shim/half_client: $(B)/obj/tests/shim/half_client.o $(ES_SIMLIBS)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $< -L$(B)/sim -l:libcuda.so.1 -l:libcublas.so.13 -l:libcudnn.so.9 -lm
# The tiled portable kernels on many shapes (tests/shim/tile_test.c).
$(B)/obj/tests/shim/tile_client.o: CFLAGS += -ffp-contract=off
$(B)/tests/shim/tile_client: $(B)/obj/tests/shim/tile_client.o $(ES_SIMLIBS)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $< -L$(B)/sim -l:libcuda.so.1 -l:libcublas.so.13 -l:libcudnn.so.9 -lm
# d2's device identity as seen by callers of each kind
# (tests/shim/identity_test.c): one library under three file names.
ES_IDLIBS := $(addprefix $(B)/tests/shim/idlib/,libnvrtc-estest.so triton/cuda_utils.so \
	libplain-estest.so)
$(ES_IDLIBS): tests/shim/id_caller.c $(B)/sim/libcuda.so.1
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) $(CFLAGS) $(SO_LDFLAGS) -o $@ $< -L$(B)/sim -l:libcuda.so.1
$(B)/tests/shim/id_client: $(B)/obj/tests/shim/id_client.o $(B)/sim/libcuda.so.1
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $< -L$(B)/sim -l:libcuda.so.1 -ldl
$(B)/tests/shim/es_nocuda: $(B)/obj/tests/shim/es_nocuda.o
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $< -ldl

# Libraries with the wrapped sonames and none of their functions (the
# "missing real function" test); libcuda.so.1 is deliberately absent.
ES_FAKELIBS := $(addprefix $(B)/tests/shim/fakelib/,libcublas.so.13 libcudnn.so.9 libnccl.so.2)
$(ES_FAKELIBS): tests/shim/es_empty.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(SO_LDFLAGS) -Wl,-soname,$(notdir $@) -o $@ $<

$(B)/tests/shim_test: $(B)/obj/tests/shim/shim_test.o $(B)/obj/shim/config.o \
		$(B)/obj/wire/proto.o \
		$(B)/obj/device/device.o $(TEST_HARNESS_OBJ) \
		| $(B)/lib/libeasyscale.so $(B)/sim/twins/libsimtwin_easyscale.so \
		  $(B)/tests/shim/es_client $(B)/tests/shim/es_nocuda $(ES_FAKELIBS) \
		  $(B)/tests/shim/es_allpaths
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $(filter %.o,$^) $(CMOCKA_LIBS) -ldl

TESTS += $(B)/tests/shim_test

# The cuDNN backend API the way cudnn-frontend and PyTorch drive it.
$(B)/tests/shim_dnn_test: $(B)/obj/tests/shim/dnn_test.o $(TEST_HARNESS_OBJ) \
		| $(B)/lib/libeasyscale.so $(B)/sim/twins/libsimtwin_easyscale.so \
		  $(B)/tests/shim/fe_client
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $(filter %.o,$^) $(CMOCKA_LIBS)

TESTS += $(B)/tests/shim_dnn_test

# The architecture check of device-code images (d2's start-up check).
$(B)/tests/shim_archcheck_test: $(B)/obj/tests/shim/archcheck_test.o $(B)/obj/kernels/archcheck.o \
		$(FATBIN_OBJ) $(TEST_HARNESS_OBJ) | $(ES_PORTABLE_FATBIN) $(FB_DATA)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $(filter %.o,$^) $(FATBIN_LIBS) $(CMOCKA_LIBS)

TESTS += $(B)/tests/shim_archcheck_test

# The tiled portable kernels against the reference element functions.
$(B)/tests/shim_tile_test: $(B)/obj/tests/shim/tile_test.o $(TEST_HARNESS_OBJ) \
		| $(B)/lib/libeasyscale.so $(B)/sim/twins/libsimtwin_easyscale.so \
		  $(B)/tests/shim/tile_client
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $(filter %.o,$^) $(CMOCKA_LIBS)

TESTS += $(B)/tests/shim_tile_test

# d2's device identity: the canonical device, lowering only, callers.
$(B)/tests/shim_identity_test: $(B)/obj/tests/shim/identity_test.o $(B)/obj/device/device.o \
		$(TEST_HARNESS_OBJ) | $(B)/lib/libeasyscale.so $(B)/tests/shim/id_client $(ES_IDLIBS)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $(filter %.o,$^) $(CMOCKA_LIBS) -ldl

TESTS += $(B)/tests/shim_identity_test

# fp16 / bf16 GEMMs and convolutions through the legacy APIs.
$(B)/tests/shim_half_test: $(B)/obj/tests/shim/half_test.o $(TEST_HARNESS_OBJ) \
		| $(B)/lib/libeasyscale.so $(B)/sim/twins/libsimtwin_easyscale.so \
		  $(B)/tests/shim/half_client
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $(filter %.o,$^) $(CMOCKA_LIBS)

TESTS += $(B)/tests/shim_half_test

# cuBLASLt the way PyTorch drives it.
$(B)/tests/shim_lt_test: $(B)/obj/tests/shim/lt_test.o $(TEST_HARNESS_OBJ) \
		| $(B)/lib/libeasyscale.so $(B)/sim/twins/libsimtwin_easyscale.so \
		  $(B)/sim/twins/libsimtwin_cublaslt.so $(B)/tests/shim/lt_client
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $(filter %.o,$^) $(CMOCKA_LIBS)

TESTS += $(B)/tests/shim_lt_test

# Library calls during a CUDA graph capture.
$(B)/tests/shim_capture_test: $(B)/obj/tests/shim/capture_test.o $(TEST_HARNESS_OBJ) \
		| $(B)/lib/libeasyscale.so $(B)/sim/twins/libsimtwin_easyscale.so \
		  $(B)/tests/shim/cap_client
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $(filter %.o,$^) $(CMOCKA_LIBS)

TESTS += $(B)/tests/shim_capture_test

# ---- bench -----------------------------------------------------------------
$(B)/bench/passthrough_bench: $(B)/obj/tests/shim/bench_passthrough.o $(ES_SIMLIBS) \
		| $(B)/lib/libeasyscale.so
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $< -ldl

BENCHES += $(B)/bench/passthrough_bench

# d2's portable kernels (tiled and per-element) against cuBLAS / cuDNN; also
# what scripts/gpu-check step g runs on a real GPU (--large).
$(B)/bench/portable_bench: $(B)/obj/tests/shim/portable_bench.o $(ES_SIMLIBS) \
		| $(ES_PORTABLE_FATBIN) $(ES_PORTABLE_TWIN)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $< -L$(B)/sim -l:libcuda.so.1 -l:libcublas.so.13 -l:libcudnn.so.9

BENCHES += $(B)/bench/portable_bench

# ---- run-time kernel audit tests (tests/shim/audit_*) ------------------------
# The client's launching function must show in the shim's host stack: frame
# pointers, debug info, and -rdynamic so dladdr names it too.
$(B)/obj/tests/shim/audit_client.o: CFLAGS += -fno-omit-frame-pointer -O1
$(B)/tests/shim/audit_client: $(B)/obj/tests/shim/audit_client.o $(B)/sim/libcuda.so.1
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -rdynamic -o $@ $< -L$(B)/sim -l:libcuda.so.1

$(B)/tests/shim_audit_test: $(B)/obj/tests/shim/audit_test.o $(TEST_HARNESS_OBJ) \
		| $(B)/lib/libeasyscale.so $(B)/tests/shim/audit_client $(EX_FATBIN) $(EX_TWINS)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $(filter %.o,$^) $(CMOCKA_LIBS)

TESTS += $(B)/tests/shim_audit_test
# the export check counts the generated vendor wrappers (intercept/module.mk)
$(B)/obj/tests/shim/shim_test.o: $(B)/gen/vendor_handle_fns.h
$(B)/obj/tests/shim/shim_test.o: CPPFLAGS += -I$(B)/gen
