# simcuda cuDNN: build/sim/libcudnn.so.9 (+ libcudnn.so), its unit test
# (tests/sim_cudnn), the backend's 16-bit test and the NVIDIA-header-only
# client test.

# The kernels, single source (sim/cucpu): the fatbin embedded in the library
# (fatbin_blob.c) and the twin library simcuda runs them from.
CUDNN_FATBIN := $(B)/gen/simcudnn.fatbin
CUDNN_TWIN := $(B)/sim/twins/libsimtwin_cudnn.so
$(eval $(call cucpu_cu,sim/cudnn/kernels.cu,$(CUDNN_FATBIN),$(CUDNN_TWIN),sim/cudnn/kern.h sim/cudnn/kparams.h \
    sim/cudnn/backend_kernels.h sim/common/f16_impl.h))

CUDNN_SRCS := sim/cudnn/cudnn.c sim/cudnn/backend.c sim/cudnn/algo.c sim/cudnn/heur.c \
    sim/cudnn/fatbin_blob.c
CUDNN_OBJS := $(patsubst %.c,$(B)/obj/%.o,$(CUDNN_SRCS))
# The plain-C reference of the kernels (kern.c) with the tables and the
# heuristics, linked statically by the unit test.
CUDNN_CORE_OBJS := $(B)/obj/sim/cudnn/kern.o $(B)/obj/sim/cudnn/algo.o $(B)/obj/sim/cudnn/heur.o

$(B)/obj/sim/cudnn/fatbin_blob.o: CPPFLAGS += -DSIMCUDNN_FATBIN='"$(CUDNN_FATBIN)"'
$(B)/obj/sim/cudnn/fatbin_blob.o: $(CUDNN_FATBIN)

# Each algorithm's summation order must be the one written, whatever the
# optimiser does: no contraction into FMA (and never -ffast-math).
$(CUDNN_OBJS) $(CUDNN_CORE_OBJS) $(B)/obj/tests/sim_cudnn/sim_cudnn_test.o: \
    CFLAGS += -ffp-contract=off

# -Bsymbolic-functions: calls to its own exports bind inside the library (as
# simcuda's cuBLAS, sim/cublas/module.mk).
$(B)/sim/libcudnn.so.9: $(CUDNN_OBJS) $(SIMDRV_OBJ) $(SIM_LIVE_OBJ) $(SIM_KMOD_OBJ) \
		sim/cudnn/libcudnn.map
	@mkdir -p $(dir $@)
	$(CC) $(SO_LDFLAGS) -Wl,-soname,libcudnn.so.9 -Wl,-Bsymbolic-functions \
		-Wl,--version-script=sim/cudnn/libcudnn.map -o $@ \
		$(CUDNN_OBJS) $(SIMDRV_OBJ) $(SIM_LIVE_OBJ) $(SIM_KMOD_OBJ) -ldl -lm

$(B)/sim/libcudnn.so: $(B)/sim/libcudnn.so.9
	ln -sf libcudnn.so.9 $@

ALL += $(B)/sim/libcudnn.so.9 $(B)/sim/libcudnn.so $(CUDNN_TWIN)

# Unit + API test: links the math cores statically (their symbols are local
# in the library) and the library and driver dynamically.
$(B)/tests/sim_cudnn_test: $(B)/obj/tests/sim_cudnn/sim_cudnn_test.o $(CUDNN_CORE_OBJS) \
		$(TEST_HARNESS_OBJ) $(SIM_TEST_ABI_OBJ) $(B)/sim/libcudnn.so $(B)/sim/libcuda.so.1 \
		| $(SIM_ARCH_TEST)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $(B)/obj/tests/sim_cudnn/sim_cudnn_test.o $(CUDNN_CORE_OBJS) \
		$(TEST_HARNESS_OBJ) $(SIM_TEST_ABI_OBJ) -L$(B)/sim -lcudnn $(B)/sim/libcuda.so.1 $(CMOCKA_LIBS) -lm

# Client written only against NVIDIA's headers.
$(B)/tests/cudnn_client_test: tests/clients/cudnn_client.c $(B)/sim/libcudnn.so $(B)/sim/libcuda.so.1
	@mkdir -p $(dir $@)
	$(CC) -I$(CUDA_HOME)/include -std=gnu11 -Wall -Wextra -g $(filter -fsanitize=%,$(CFLAGS)) \
		tests/clients/cudnn_client.c -L$(B)/sim -lcudnn -l:libcuda.so.1 $(LDFLAGS) -lm -o $@

TESTS += $(B)/tests/sim_cudnn_test $(B)/tests/cudnn_client_test

# The backend with 16-bit tensors (against its own fp32 engines).
$(B)/tests/sim_cudnn_backend_half_test: $(B)/obj/tests/sim_cudnn/backend_half_test.o \
		$(TEST_HARNESS_OBJ) | $(B)/sim/libcudnn.so $(B)/sim/libcuda.so $(CUDNN_TWIN)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $(filter %.o,$^) -L$(B)/sim -lcudnn -lcuda $(CMOCKA_LIBS) -lrt -lm

TESTS += $(B)/tests/sim_cudnn_backend_half_test
