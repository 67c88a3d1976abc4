# sim/driver/: simcuda's CUDA driver (build/sim/libcuda.so.1 + libcuda.so),
# its device server and the es-devices demo (examples/devices.c, which runs
# the driver tests' kernels). The tests (and the kernels they load) are
# tests/sim/driver/module.mk's.

SIMDRV_SRCS := driver device context stream capacity memory module procs legacy unsupported \
    devclient chaos arch capture memop
SIMDRV_OBJS := $(patsubst %,$(B)/obj/sim/driver/%.o,$(SIMDRV_SRCS))
SIMCUDA_LIB := $(B)/sim/libcuda.so.1
# The device server (SIMCUDA_ISOLATION=1), found beside libcuda.so.1.
SIMCUDA_GPU := $(B)/sim/simcuda-gpu

ALL += $(SIMCUDA_LIB) $(B)/sim/libcuda.so $(SIMCUDA_GPU) $(B)/bin/es-devices

# -Bsymbolic-functions: calls and function addresses inside the library (the
# cuGetProcAddress table, _ptsz wrappers) bind to its own definitions, never
# to a preloaded interposer's (which would make the shim call itself).
$(SIMCUDA_LIB): $(SIMDRV_OBJS) $(FATBIN_OBJ) sim/driver/libcuda.map
	@mkdir -p $(dir $@)
	$(CC) $(SO_LDFLAGS) -Wl,-soname,libcuda.so.1 -Wl,--no-undefined \
	    -Wl,--version-script=sim/driver/libcuda.map -Wl,-Bsymbolic-functions \
	    -o $@ $(filter %.o,$^) $(FATBIN_LIBS) -ldl -lrt

$(SIMCUDA_GPU): $(B)/obj/sim/driver/devserver.o
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $^ -ldl

$(B)/sim/libcuda.so: $(SIMCUDA_LIB)
	@mkdir -p $(dir $@)
	ln -sf libcuda.so.1 $@

# ---- demo ------------------------------------------------------------------------
$(B)/bin/es-devices: $(B)/obj/examples/devices.o | $(SIMCUDA_LIB) $(B)/sim/libcuda.so \
    $(B)/sim/twins/libsimtwin_simtest.so $(B)/tests/sim/driver/kernels.fatbin
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $(filter %.o,$^) -L$(B)/sim -lcuda
