# sim/cucpu/: the CUDA-on-CPU layer (sim/cucpu/README.md): its runtime
# library $(CUCPU_LIB) and the make function that builds a .cu both ways (nvcc
# fatbin for the GPU, host-compiler twin library for simcuda). The layer's
# test and bench are tests/sim/cucpu/module.mk's.
#
# Included before simcuda's libraries and examples/, which use cucpu_cu.

CUCPU_LIB := $(B)/sim/libcucpu.so
CUCPU_HEADERS := sim/cucpu/cucpu.h sim/cucpu/hd.h sim/cucpu/runtime.h sim/include/simcuda_twin.h
CUCPU_OBJS := $(B)/obj/sim/cucpu/runtime.o $(B)/obj/sim/cucpu/fiber.o $(B)/obj/sim/cucpu/mma.o

# Host side of a .cu: C++17, never contracted into FMA (the floating-point
# rule in cucpu.h), no exceptions or RTTI (nothing of libstdc++ at run time).
CUCPU_CXXFLAGS := -std=c++17 -O3 -g -fPIC -pthread -ffp-contract=off -fno-exceptions -fno-rtti \
    -fvisibility=hidden -Wall -Wextra -Wno-psabi -I$(CUDA_HOME)/include -I. -D_GNU_SOURCE \
    $(filter -fsanitize=% -fno-omit-frame-pointer -fno-sanitize-recover=%,$(CFLAGS))
# Device side: the same rule (no contraction, IEEE division, square root and
# denormals), whatever NVCC is given.
CUCPU_NVCCFLAGS := -I. -O3 -fmad=false -ftz=false -prec-div=true -prec-sqrt=true \
    -Wno-deprecated-gpu-targets
# SASS for every architecture simcuda models (the GPUs the CUDA 13 libraries
# support) and PTX of the newest for the driver to JIT on later ones.
CUCPU_GENCODE := -gencode arch=compute_75,code=sm_75 -gencode arch=compute_80,code=sm_80 \
    -gencode arch=compute_86,code=sm_86 -gencode arch=compute_89,code=sm_89 \
    -gencode arch=compute_90,code=sm_90 -gencode arch=compute_100,code=[sm_100,compute_100]
# Shared objects of twins: undefined symbols are errors (not under a
# sanitizer, whose runtime comes in at run time).
CUCPU_SO_DEFS := $(if $(SAN),,-Wl,-z,defs)

# A .cu compiled by the host compiler through the layer: $(B)/obj/<path>.cu.o
$(B)/obj/%.cu.o: %.cu $(CUCPU_HEADERS)
	@mkdir -p $(dir $@)
	$(CXX) $(CUCPU_CXXFLAGS) -MMD -MP -x c++ -c -o $@ $<

# $(call cucpu_cu,SRC,FATBIN,TWIN_SO[,EXTRA_PREREQS])
# SRC (a .cu that includes sim/cucpu/cucpu.h) -> FATBIN by nvcc with
# $(CUCPU_GENCODE), and TWIN_SO, the same kernels for simcuda (a library
# in $(B)/sim/<dir>/ finding $(CUCPU_LIB) one level up). EXTRA_PREREQS:
# headers the .cu includes besides the layer's.
define cucpu_cu
$(2): $(1) $(CUCPU_HEADERS) $(4)
	@mkdir -p $$(dir $$@)
	$$(NVCC) $$(CUCPU_NVCCFLAGS) -fatbin $$(CUCPU_GENCODE) -x cu -o $$@ $(1)
$$(B)/obj/$(1).o: $(4)
$(3): $$(B)/obj/$(1).o $$(CUCPU_LIB)
	@mkdir -p $$(dir $$@)
	$$(CC) $$(SO_LDFLAGS) $$(CUCPU_SO_DEFS) -o $$@ $$(B)/obj/$(1).o -L$$(B)/sim -lcucpu \
	    -Wl,-rpath,'$$$$ORIGIN/..' -lm
endef

$(CUCPU_LIB): $(CUCPU_OBJS)
	@mkdir -p $(dir $@)
	$(CC) $(SO_LDFLAGS) -Wl,-soname,libcucpu.so $(CUCPU_SO_DEFS) -o $@ $^

ALL += $(CUCPU_LIB)
