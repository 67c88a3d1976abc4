# tests/sim/driver/: the tests of simcuda's driver (sim/driver/), the
# kernels they load (tests/sim/driver/kernels.cu: nvcc's images and the CPU
# twins of twins.c; the es-devices demo runs them too, so they are part of
# `make`), NVIDIA's CUDA runtime on the driver, the cuda.h-only client
# acceptance test (tests/clients/cuda_client.c) and the driver bench.

TESTS += $(B)/tests/sim_driver_api_test $(B)/tests/sim_driver_vmm_test \
    $(B)/tests/sim_driver_kernel_test $(B)/tests/sim_driver_iso_test \
    $(B)/tests/sim_driver_chaos_test $(B)/tests/sim_driver_client_test \
    $(B)/tests/sim_driver_cudart_test $(B)/tests/sim_driver_capture_test \
    $(B)/tests/sim_driver_memop_test
ALL += $(B)/sim/twins/libsimtwin_simtest.so $(B)/tests/sim/driver/kernels.fatbin

SIMDRV_TEST_LIBS := -L$(B)/sim -lcuda $(CMOCKA_LIBS) -ldl -lrt

# The driver test reads the cuda.h it was built against.
$(B)/obj/tests/sim/driver/api_test.o: CPPFLAGS += -DST_CUDA_H='"$(CUDA_HOME)/include/cuda.h"' \
    -DST_CUDA_TYPEDEFS_H='"$(CUDA_HOME)/include/cudaTypedefs.h"'

# Code for every model simcuda has: sm_75 SASS (t4), sm_80 SASS (a100, a10,
# l4), sm_90 SASS (h100, h200), compute_90 PTX (b200, JIT).
SIMTEST_GENCODE := -gencode arch=compute_75,code=sm_75 -gencode arch=compute_80,code=sm_80 \
    -gencode arch=compute_90,code=[sm_90,compute_90]
$(B)/tests/sim/driver/kernels.fatbin: tests/sim/driver/kernels.cu tests/sim/driver/module.mk
	@mkdir -p $(dir $@)
	$(NVCC) -Wno-deprecated-gpu-targets -fatbin $(SIMTEST_GENCODE) -o $@ $<

# Images some devices must refuse (tests/sim/driver/kernel_test.c).
$(B)/tests/sim/driver/kernels_sm90.cubin: tests/sim/driver/kernels.cu tests/sim/driver/module.mk
	@mkdir -p $(dir $@)
	$(NVCC) -Wno-deprecated-gpu-targets -cubin -arch=sm_90 -o $@ $<

$(B)/tests/sim/driver/kernels_sm90a.fatbin: tests/sim/driver/kernels.cu tests/sim/driver/module.mk
	@mkdir -p $(dir $@)
	$(NVCC) -Wno-deprecated-gpu-targets -fatbin -gencode arch=compute_90a,code=[sm_90a,compute_90a] -o $@ $<

$(B)/tests/sim/driver/kernels_sm100f.fatbin: tests/sim/driver/kernels.cu tests/sim/driver/module.mk
	@mkdir -p $(dir $@)
	$(NVCC) -Wno-deprecated-gpu-targets -fatbin -gencode arch=compute_100f,code=[sm_100f,compute_100f] -o $@ $<

$(B)/tests/sim/driver/kernels_c86.ptx: tests/sim/driver/kernels.cu tests/sim/driver/module.mk
	@mkdir -p $(dir $@)
	$(NVCC) -Wno-deprecated-gpu-targets -ptx -arch=compute_86 -o $@ $<

$(B)/tests/sim/driver/kernels_sm80.cubin: tests/sim/driver/kernels.cu tests/sim/driver/module.mk
	@mkdir -p $(dir $@)
	$(NVCC) -Wno-deprecated-gpu-targets -cubin -arch=sm_80 -o $@ $<

$(B)/tests/sim/driver/kernels.ptx: tests/sim/driver/kernels.cu tests/sim/driver/module.mk
	@mkdir -p $(dir $@)
	$(NVCC) -Wno-deprecated-gpu-targets -ptx -arch=compute_80 -o $@ $<

$(B)/sim/twins/libsimtwin_simtest.so: $(B)/obj/tests/sim/driver/twins.o
	@mkdir -p $(dir $@)
	$(CC) $(SO_LDFLAGS) -o $@ $^

$(B)/tests/sim/driver/libinterposer.so: $(B)/obj/tests/sim/driver/interposer.o
	@mkdir -p $(dir $@)
	$(CC) $(SO_LDFLAGS) -o $@ $^

$(B)/tests/sim_driver_api_test: $(B)/obj/tests/sim/driver/api_test.o $(B)/obj/tests/sim/driver/common.o \
    $(TEST_HARNESS_OBJ) | $(SIMCUDA_LIB) $(B)/sim/libcuda.so $(B)/tests/sim/driver/libinterposer.so
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $(filter %.o,$^) $(SIMDRV_TEST_LIBS)

$(B)/tests/sim_driver_vmm_test: $(B)/obj/tests/sim/driver/vmm_test.o $(B)/obj/tests/sim/driver/common.o \
    $(TEST_HARNESS_OBJ) | $(SIMCUDA_LIB) $(B)/sim/libcuda.so
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $(filter %.o,$^) $(SIMDRV_TEST_LIBS)

$(B)/tests/sim_driver_kernel_test: $(B)/obj/tests/sim/driver/kernel_test.o $(B)/obj/tests/sim/driver/common.o \
    $(TEST_HARNESS_OBJ) | $(SIMCUDA_LIB) $(B)/sim/libcuda.so $(B)/sim/twins/libsimtwin_simtest.so \
    $(B)/tests/sim/driver/kernels.fatbin $(B)/tests/sim/driver/kernels_sm80.cubin \
    $(B)/tests/sim/driver/kernels.ptx $(B)/tests/sim/driver/kernels_sm90.cubin \
    $(B)/tests/sim/driver/kernels_sm90a.fatbin $(B)/tests/sim/driver/kernels_sm100f.fatbin \
    $(B)/tests/sim/driver/kernels_c86.ptx
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $(filter %.o,$^) $(SIMDRV_TEST_LIBS)

$(B)/tests/sim_driver_iso_test: $(B)/obj/tests/sim/driver/iso_test.o $(B)/obj/tests/sim/driver/common.o \
    $(TEST_HARNESS_OBJ) | $(SIMCUDA_LIB) $(B)/sim/libcuda.so $(SIMCUDA_GPU) \
    $(B)/sim/twins/libsimtwin_simtest.so $(B)/tests/sim/driver/kernels.fatbin
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $(filter %.o,$^) $(SIMDRV_TEST_LIBS)

$(B)/tests/sim_driver_chaos_test: $(B)/obj/tests/sim/driver/chaos_test.o $(B)/obj/tests/sim/driver/common.o \
    $(TEST_HARNESS_OBJ) | $(SIMCUDA_LIB) $(B)/sim/libcuda.so $(SIMCUDA_GPU)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $(filter %.o,$^) $(SIMDRV_TEST_LIBS)

$(B)/tests/sim_driver_capture_test: $(B)/obj/tests/sim/driver/capture_test.o $(B)/obj/tests/sim/driver/common.o \
    $(TEST_HARNESS_OBJ) | $(SIMCUDA_LIB) $(B)/sim/libcuda.so $(B)/sim/twins/libsimtwin_simtest.so \
    $(B)/tests/sim/driver/kernels.fatbin
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $(filter %.o,$^) $(SIMDRV_TEST_LIBS)

$(B)/tests/sim_driver_memop_test: $(B)/obj/tests/sim/driver/memop_test.o $(B)/obj/tests/sim/driver/common.o \
    $(TEST_HARNESS_OBJ) | $(SIMCUDA_LIB) $(B)/sim/libcuda.so $(SIMCUDA_GPU)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $(filter %.o,$^) $(SIMDRV_TEST_LIBS)

# NVIDIA's CUDA runtime on simcuda: a .cu program built by nvcc like a user's,
# with the shared runtime (found through its run path, after LD_LIBRARY_PATH's
# build/sim) and with nvcc's default static runtime.
CUDART_APP_FLAGS := -Wno-deprecated-gpu-targets $(SIMTEST_GENCODE)
$(B)/tests/sim/driver/cudart_app_shared: tests/sim/driver/cudart_app.cu tests/sim/driver/module.mk
	@mkdir -p $(dir $@)
	$(NVCC) $(CUDART_APP_FLAGS) -cudart shared -Xlinker -rpath=$(CUDA_HOME)/lib64 -o $@ $<

$(B)/tests/sim/driver/cudart_app_static: tests/sim/driver/cudart_app.cu tests/sim/driver/module.mk
	@mkdir -p $(dir $@)
	$(NVCC) $(CUDART_APP_FLAGS) -cudart static -o $@ $<

$(B)/tests/sim/driver/cudart_app.fatbin: tests/sim/driver/cudart_app.cu tests/sim/driver/module.mk
	@mkdir -p $(dir $@)
	$(NVCC) $(CUDART_APP_FLAGS) -fatbin -o $@ $<

$(B)/tests/sim_driver_cudart_test: $(B)/obj/tests/sim/driver/cudart_test.o $(TEST_HARNESS_OBJ) | \
    $(SIMCUDA_LIB) $(B)/sim/libcuda.so $(B)/sim/twins/libsimtwin_simtest.so \
    $(B)/tests/sim/driver/cudart_app_shared $(B)/tests/sim/driver/cudart_app_static \
    $(B)/tests/sim/driver/cudart_app.fatbin
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $(filter %.o,$^) $(SIMDRV_TEST_LIBS)

# The client acceptance test: NVIDIA's cuda.h only, built exactly like a user would.
$(B)/tests/sim_driver_client_test: tests/clients/cuda_client.c | $(SIMCUDA_LIB) $(B)/sim/libcuda.so
	@mkdir -p $(dir $@)
	$(CC) $(if $(SAN),-fsanitize=$(SAN)) -I$(CUDA_HOME)/include $< -L$(B)/sim -lcuda -o $@

# ---- benchmark (figures only) ----------------------------------------------------
BENCHES += $(B)/bench/sim_driver_bench
$(B)/bench/sim_driver_bench: $(B)/obj/tests/sim/driver/driver_bench.o | $(SIMCUDA_LIB) $(B)/sim/libcuda.so \
    $(B)/sim/twins/libsimtwin_simtest.so $(B)/tests/sim/driver/kernels.fatbin
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $(filter %.o,$^) -L$(B)/sim -lcuda -lrt

