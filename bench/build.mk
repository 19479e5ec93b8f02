# bench: microbenchmarks (not timed tests).
#   bench-backends   per-page install cost and fault round trip per RAM back end
#                    (JSON on stdout; in the node initramfs too, for remap_anon_pages)
#   bench-vcpu       the pause of a running guest, a vCPU ioctl (the downtime's floors)

BENCH_BACKENDS_SRCS := bench/backends.c vmm/util.c
$(eval $(call program,bench-backends,$(BENCH_BACKENDS_SRCS),,ram common))

# bench-vcpu: the pause of a running guest and a vCPU ioctl, the downtime's floors
$(eval $(call program,bench-vcpu,bench/vcpu.c $(VMM_LIB_SRCS),-ljson-c,$(VMM_OWN)))

# qemu-postcopy: the QEMU baseline (libvirt C API), host only: there is no
# static libvirt for the node flavour, and the node never runs it.
QEMU_POSTCOPY_SRCS := bench/qemu-postcopy.c
.PHONY: qemu-postcopy
qemu-postcopy: $(B)/bin/qemu-postcopy
programs: $(B)/bin/qemu-postcopy
$(B)/bin/qemu-postcopy: $(patsubst %.c,$(B)/obj/%.o,$(QEMU_POSTCOPY_SRCS))
	@mkdir -p $(@D)
	$(Q)$(CC) $(LDFLAGS) -o $@ $^ -lvirt-qemu -lvirt -ljson-c -lpthread
