# lib/: generic containers of the shim's folders, knowing nothing of CUDA:
# an open-addressing hash map (hmap.c) and a handle arena (harena.c).
# $(LIB_SRCS) is linked into the shim and the move/ tests.
LIB_SRCS := lib/hmap.c lib/harena.c
