# ram: guest RAM, the bottom library (include/ram/*.h): the page record,
# the fault thread, the back ends and the synchronous page sources.  No
# KVM, no network.  libram.a in each flavour; it links libcommon.a.
# The migration library, the VMM, the back-end benchmark and the
# in-node rap-vmm-ebusy test link it (OWN_LIBS "ram common").
RAM_SRCS := ram/ram.c ram/record.c ram/fault.c ram/wait.c ram/blocktime.c ram/uffd.c ram/userfault.c \
	ram/kvm-exit.c ram/source.c
$(eval $(call library,ram,$(RAM_SRCS)))
