# bench: microbenchmarks (not timed tests).
#   bench-backends   per-page install cost and fault round trip per RAM back end
#                    (JSON on stdout; in the node initramfs too, for remap_anon_pages)

BENCH_BACKENDS_SRCS := bench/backends.c vmm/ram/ram.c vmm/ram/uffd.c vmm/ram/userfault.c \
	vmm/ram/source.c vmm/util.c
$(eval $(call program,bench-backends,$(BENCH_BACKENDS_SRCS),))
