# libeasyscale.so: the spine (shim/) linked with the sources that intercept/,
# context/, kernels/ and audit/ contribute (their module.mk files set
# INTERCEPT_SRCS, CONTEXT_SHIM_SRCS, KERNELS_SHIM_SRCS/_OBJS and
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
    shim/control.c shim/move.c shim/step.c controller/proto.c
ES_SHIM_SRCS := $(SHIM_SRCS) $(INTERCEPT_SRCS) $(CONTEXT_SHIM_SRCS) $(KERNELS_SHIM_SRCS) \
    $(AUDIT_SHIM_SRCS)
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
# Every entry of intercept/funcs.h through every path (linked with the
# simcuda libraries: without the shim direct references are theirs).
$(B)/tests/shim/es_allpaths: $(B)/obj/tests/shim/es_allpaths.o $(ES_SIMLIBS) $(B)/sim/libnccl.so.2
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $< -Wl,--no-as-needed -L$(B)/sim -l:libcuda.so.1 -l:libcublas.so.13 \
		-l:libcudnn.so.9 -l:libnccl.so.2 -Wl,--as-needed -ldl
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
		$(B)/obj/controller/proto.o \
		$(B)/obj/context/device.o $(TEST_HARNESS_OBJ) \
		| $(B)/lib/libeasyscale.so $(B)/sim/twins/libsimtwin_easyscale.so \
		  $(B)/tests/shim/es_client $(B)/tests/shim/es_nocuda $(ES_FAKELIBS) \
		  $(B)/tests/shim/es_allpaths
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $(filter %.o,$^) $(CMOCKA_LIBS) -ldl

TESTS += $(B)/tests/shim_test

# ---- bench -----------------------------------------------------------------
$(B)/bench/passthrough_bench: $(B)/obj/tests/shim/bench_passthrough.o $(ES_SIMLIBS) \
		| $(B)/lib/libeasyscale.so
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $< -ldl

BENCHES += $(B)/bench/passthrough_bench

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
