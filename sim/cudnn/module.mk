# simcuda cuDNN: build/sim/libcudnn.so.9 (+ libcudnn.so), its unit test
# (tests/sim_cudnn) and the NVIDIA-header-only client test. The backend's
# 16-bit conversion kernel (sim/cudnn/backend_kernels.cu through the
# CUDA-on-CPU layer): a fatbin embedded in the library, the same source's
# twin in build/sim/twins/libsimtwin_cudnnbk.so.

CUDNN_SRCS := sim/cudnn/cudnn.c sim/cudnn/backend.c sim/cudnn/kern.c sim/cudnn/heur.c
CUDNN_OBJS := $(patsubst %.c,$(B)/obj/%.o,$(CUDNN_SRCS)) $(B)/obj/sim/cudnn/backend_blob.o
CUDNN_BK_FATBIN := $(B)/gen/simbk.fatbin
CUDNN_BK_TWIN := $(B)/sim/twins/libsimtwin_cudnnbk.so
$(eval $(call cucpu_cu,sim/cudnn/backend_kernels.cu,$(CUDNN_BK_FATBIN),$(CUDNN_BK_TWIN),sim/cudnn/backend_kernels.h))
$(B)/obj/sim/cudnn/backend_blob.o: CPPFLAGS += -DSIM_CUDNN_BK_FATBIN='"$(CUDNN_BK_FATBIN)"'
$(B)/obj/sim/cudnn/backend_blob.o: $(CUDNN_BK_FATBIN)
CUDNN_CORE_OBJS := $(B)/obj/sim/cudnn/kern.o $(B)/obj/sim/cudnn/heur.o

# Each algorithm's summation order must be the one written, whatever the
# optimiser does: no contraction into FMA (and never -ffast-math).
$(CUDNN_OBJS) $(B)/obj/tests/sim_cudnn/sim_cudnn_test.o: CFLAGS += -ffp-contract=off

$(B)/sim/libcudnn.so.9: $(CUDNN_OBJS) $(SIMDRV_OBJ) $(SIM_LIVE_OBJ) sim/cudnn/libcudnn.map
	@mkdir -p $(dir $@)
	$(CC) $(SO_LDFLAGS) -Wl,-soname,libcudnn.so.9 \
		-Wl,--version-script=sim/cudnn/libcudnn.map -o $@ \
		$(CUDNN_OBJS) $(SIMDRV_OBJ) $(SIM_LIVE_OBJ) -ldl -lm

$(B)/sim/libcudnn.so: $(B)/sim/libcudnn.so.9
	ln -sf libcudnn.so.9 $@

ALL += $(B)/sim/libcudnn.so.9 $(B)/sim/libcudnn.so $(CUDNN_BK_TWIN)

# Unit + API test: links the math cores statically (their symbols are local
# in the library) and the library and driver dynamically.
$(B)/tests/sim_cudnn_test: $(B)/obj/tests/sim_cudnn/sim_cudnn_test.o $(CUDNN_CORE_OBJS) \
		$(TEST_HARNESS_OBJ) $(SIM_TEST_ABI_OBJ) $(B)/sim/libcudnn.so $(B)/sim/libcuda.so.1
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
		$(TEST_HARNESS_OBJ) | $(B)/sim/libcudnn.so $(B)/sim/libcuda.so $(CUDNN_BK_TWIN)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $(filter %.o,$^) -L$(B)/sim -lcudnn -lcuda $(CMOCKA_LIBS) -lrt -lm

TESTS += $(B)/tests/sim_cudnn_backend_half_test
