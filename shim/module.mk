# libeasyscale.so: the spine (shim/) linked with the sources the folders above
# it contribute (their module.mk files set LIB_SRCS, WIRE_SRCS, DEVICE_SRCS,
# MOVE_SHIM_SRCS, COLL_SRCS, INTERCEPT_SRCS, KERNELS_SHIM_SRCS/_OBJS and
# AUDIT_SHIM_SRCS). Its tests and benches are tests/shim/module.mk's (and
# those of the folders above it, tests/<folder>/module.mk).
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
