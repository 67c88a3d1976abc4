# audit/: the float-atomic audit of device code: the audit library and its
# per-architecture SASS tables, the easyscale-audit CLI, and the shim's
# run-time module audit (modaudit.c, with the lazy libelf/libzstd forwarders
# of dynlib.c). Their tests, the device code those tests read and the
# fuzzer are tests/audit/module.mk's.
#
# For other modules: link $(AUDIT_OBJS) $(FATBIN_OBJ) with $(AUDIT_LIBS) to
# call audit/audit.h; the shim compiles $(AUDIT_SHIM_SRCS) into itself.

AUDIT_OBJS := $(B)/obj/audit/audit.o $(B)/obj/audit/sass_tables.o
AUDIT_LIBS := $(FATBIN_LIBS) -ldl

AUDIT_SHIM_SRCS := audit/modaudit.c audit/dynlib.c

ALL += $(B)/bin/easyscale-audit

$(B)/bin/easyscale-audit: $(B)/obj/audit/audit_cli.o $(AUDIT_OBJS) $(FATBIN_OBJ)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $^ $(AUDIT_LIBS)
