# simcuda cuDNN: build/sim/libcudnn.so.9 (+ libcudnn.so). Its unit test, the
# backend's 16-bit test and the NVIDIA-header-only client test are
# tests/sim/cudnn/module.mk's.

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
$(CUDNN_OBJS) $(CUDNN_CORE_OBJS): CFLAGS += -ffp-contract=off

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
