# wire/: what libeasyscale.so and easyscale-ctl both speak: the control
# protocol (proto.h, proto.c: compiled into both) and the collective
# digests' record format (digest.h). Nothing else is shared between them.
WIRE_SRCS := wire/proto.c
