# simcuda cuDNN: build/sim/libcudnn.so.9 (+ libcudnn.so), its unit test
# (tests/sim_cudnn) and the NVIDIA-header-only client test.

CUDNN_SRCS := sim/cudnn/cudnn.c sim/cudnn/backend.c sim/cudnn/kern.c sim/cudnn/heur.c
CUDNN_OBJS := $(patsubst %.c,$(B)/obj/%.o,$(CUDNN_SRCS))
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

ALL += $(B)/sim/libcudnn.so.9 $(B)/sim/libcudnn.so

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
