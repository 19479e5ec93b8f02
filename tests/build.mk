# Test programs.  Node-only programs (static, into the initramfs) use
#   $(eval $(call node_program,NAME,SOURCES,LIBS,OWN_LIBS))
# Test scripts are found by location, not listed here:
#   tests/host/*.sh     on this machine, once with BIN=build/bin, once with BIN=build/san/bin
#   tests/node/*.sh     inside one QEMU node (copied to /tests in the initramfs)
#   tests/twonode/*.sh  on this machine, each boots its own pair of nodes

define node_program
NODE_PROGRAMS += $(1)
$(B)/node/bin/$(1): $(patsubst %.c,$(B)/node/obj/%.o,$(2)) $(foreach l,$(4),$(B)/node/lib/lib$(l).a)
	@mkdir -p $$(@D)
	$(Q)$$(CC) -static $$(LDFLAGS) -o $$@ $$^ $(3) -lpthread
endef

$(eval $(call program,kvm-smoke,tests/kvm-smoke.c,))
