# wire/: what two programs speak. libeasyscale.so and easyscale-ctl: the
# control protocol (proto.h, proto.c: compiled into both) and the collective
# digests' record format (digest.h); nothing else is shared between them.
# Two shims on two hosts: the messages between the hosts' leaders of a
# time-sliced job across hosts (xhost.h, header only).
WIRE_SRCS := wire/proto.c
