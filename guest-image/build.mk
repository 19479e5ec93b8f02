# guest-image: the freestanding guest program the VMM runs and QEMU boots.
#   build/guest/guest.elf           ELF64 x86-64, entry in long mode (VMM),
#                                   multiboot v1 header (qemu -kernel)
#   build/node/extra/guest.elf      the same file, in the node initramfs at
#                                   /usr/share/postcopy/guest.elf

GUEST_SRCS := guest-image/guest/entry.S guest-image/guest/main.c
GUEST_OBJS := $(patsubst guest-image/guest/%,$(B)/guest/obj/%.o,$(GUEST_SRCS))
GUEST_CFLAGS := -std=c11 -O2 -g -Wall -Wextra -Werror -Wshadow -Wstrict-prototypes \
	-Wmissing-prototypes -Iinclude -Ivmm/include -ffreestanding -fno-pic -fno-pie \
	-fno-stack-protector -mno-red-zone -mgeneral-regs-only -mcmodel=small \
	-fno-asynchronous-unwind-tables -fno-tree-loop-distribute-patterns -MMD -MP
GUEST_LDFLAGS := -nostdlib -static -no-pie -Wl,--build-id=none -Wl,-z,max-page-size=4096 \
	-Wl,-z,noexecstack -Wl,--no-warn-rwx-segments -T guest-image/guest/guest.ld

.PHONY: guest
guest: $(B)/guest/guest.elf
programs: $(B)/guest/guest.elf
NODE_EXTRA += $(B)/node/extra/guest.elf

$(B)/guest/obj/%.o: guest-image/guest/%
	@mkdir -p $(@D)
	@echo "  CC [guest] $<"
	$(Q)$(CC) $(GUEST_CFLAGS) -c -o $@ $<

$(B)/guest/guest.elf: $(GUEST_OBJS) guest-image/guest/guest.ld
	@mkdir -p $(@D)
	@echo "  LD [guest] $@"
	$(Q)$(CC) $(GUEST_CFLAGS) $(GUEST_LDFLAGS) -o $@ $(GUEST_OBJS)

$(B)/node/extra/guest.elf: $(B)/guest/guest.elf
	@mkdir -p $(@D)
	$(Q)cp $< $@

-include $(wildcard $(B)/guest/obj/*.d)
