# simcuda NCCL: build/sim/libnccl.so.2 (+ libnccl.so) and the allreduce
# bench. Its unit/multi-process test and the NVIDIA-header-only client test
# are tests/sim/nccl/module.mk's.

# The kernels, single source (sim/cucpu): the fatbin embedded in the library
# (fatbin_blob.c) and the twin library simcuda runs them from.
NCCL_FATBIN := $(B)/gen/simnccl.fatbin
NCCL_TWIN := $(B)/sim/twins/libsimtwin_nccl.so
$(eval $(call cucpu_cu,sim/nccl/kernels.cu,$(NCCL_FATBIN),$(NCCL_TWIN),sim/nccl/nkern.h sim/common/f16_impl.h))

NCCL_SRCS := sim/nccl/nccl.c sim/nccl/reduce.c sim/nccl/transport.c sim/nccl/staging.c sim/nccl/net.c \
    sim/nccl/fatbin_blob.c
NCCL_OBJS := $(patsubst %.c,$(B)/obj/%.o,$(NCCL_SRCS))
NCCL_CORE_OBJS := $(B)/obj/sim/nccl/reduce.o $(B)/obj/sim/nccl/transport.o $(SIMF16_OBJ)

$(B)/obj/sim/nccl/fatbin_blob.o: CPPFLAGS += -DSIMNCCL_FATBIN='"$(NCCL_FATBIN)"'
$(B)/obj/sim/nccl/fatbin_blob.o: $(NCCL_FATBIN)

# Reduction order is the plan's: no contraction into FMA (never -ffast-math).
$(NCCL_OBJS): CFLAGS += -O3 -ffp-contract=off

$(B)/sim/libnccl.so.2: $(NCCL_OBJS) $(SIMF16_OBJ) $(SIMDRV_OBJ) $(SIM_LIVE_OBJ) $(SIM_KMOD_OBJ) \
		sim/nccl/libnccl.map
	@mkdir -p $(dir $@)
	$(CC) $(SO_LDFLAGS) -Wl,-soname,libnccl.so.2 \
		-Wl,--version-script=sim/nccl/libnccl.map -o $@ \
		$(NCCL_OBJS) $(SIMF16_OBJ) $(SIMDRV_OBJ) $(SIM_LIVE_OBJ) $(SIM_KMOD_OBJ) -ldl -lrt -lm

$(B)/sim/libnccl.so: $(B)/sim/libnccl.so.2
	ln -sf libnccl.so.2 $@

ALL += $(B)/sim/libnccl.so.2 $(B)/sim/libnccl.so $(NCCL_TWIN)

$(B)/bench/allreduce_bench: $(B)/obj/sim/nccl/bench_allreduce.o $(B)/sim/libnccl.so \
		$(B)/sim/libcuda.so.1 | $(NCCL_TWIN)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $(B)/obj/sim/nccl/bench_allreduce.o -L$(B)/sim -lnccl \
		$(B)/sim/libcuda.so.1 -lm

BENCHES += $(B)/bench/allreduce_bench
