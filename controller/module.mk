# controller/: easyscale-ctl (one binary: CLI, daemon, launcher, scheduler),
# the control protocol shared with the shim (wire/proto.c is also
# compiled into libeasyscale.so by shim/module.mk). Its tests and benches
# are tests/controller/module.mk's (the protocol's: tests/wire/module.mk).
# Variables local to this file are prefixed CTL_.

CTL_SRCS := controller/main.c controller/util.c controller/run.c controller/run_out.c controller/run_sched.c \
    controller/run_ests.c controller/run_loop.c controller/daemon.c controller/client.c \
    controller/daemon_state.c controller/daemon_status.c controller/daemon_hold.c controller/daemon_ops.c \
    controller/daemon_nodes.c controller/daemon_ests.c \
    controller/gpus.c controller/sock.c controller/job.c controller/nodes.c controller/nodelink.c controller/sched.c wire/proto.c \
    controller/verify.c controller/verify_run.c controller/digest.c
CTL_OBJS := $(patsubst %.c,$(B)/obj/%.o,$(CTL_SRCS))
# Everything of easyscale-ctl but main(), for the unit tests.
CTL_LIB_OBJS := $(filter-out $(B)/obj/controller/main.o,$(CTL_OBJS))

$(B)/bin/easyscale-ctl: $(CTL_OBJS)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $^ -ldl -lm

ALL += $(B)/bin/easyscale-ctl
