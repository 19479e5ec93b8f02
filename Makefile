# Postcopy live migration for KVM with user-space page faults.
#
#   make deps         install the Debian packages the project needs (root)
#   make              user-space programs: host, sanitized and static flavours
#   make kernel       the patched node kernels, normal and debug (cached by content hash)
#   make guest-image  the node initramfs (busybox + static programs + tests)
#   make test         everything above, then host and in-node tests
#   make demo         the main job: see README.md
#   make bench        side-by-side measurements into build/bench/
#
# Each part adds its programs through its own build.mk (non-recursive make):
#   $(eval $(call program,NAME,SOURCES,LIBS,OWN_LIBS))
# builds build/bin/NAME (host), build/san/bin/NAME (ASan+UBSan) and
# build/node/bin/NAME (static, for the node initramfs);
#   $(eval $(call library,NAME,SOURCES))
# builds libNAME.a the same way under build/lib, build/san/lib,
# build/node/lib (and build/fuzz/lib for the fuzzers).

B := build
CC ?= gcc
V ?= 0
Q := $(if $(filter 1,$(V)),,@)

WARN := -Wall -Wextra -Werror -Wshadow -Wstrict-prototypes -Wmissing-prototypes \
	-Wno-unused-parameter
BASE_CFLAGS := -std=c11 -D_GNU_SOURCE -O2 -g $(WARN) -Iinclude -MMD -MP
SAN_FLAGS := -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=all \
	-DMIG_LOCK_RANKS

# Every symbol resolved at start (-z now, full RELRO): a lazy binding's
# first call goes through the dynamic linker's trampoline, which saves the
# vector registers on the stack, where the last bytes a memcpy() moved (a
# session secret, a TLS exporter value) then stay (docs/security.md,
# tests/host/migrate-secrets.sh found them there).
LDFLAGS += -Wl,-z,relro,-z,now

HOST_PROGRAMS :=
NODE_PROGRAMS :=
NODE_EXTRA :=

.PHONY: all programs san node-programs deps kernel kernel-normal guest-image test test-host \
	test-node demo bench clean format check-format
all: programs node-programs

# $(call program,NAME,SOURCES,LIBS,OWN_LIBS): OWN_LIBS names the project's
# own archives it links (e.g. "migrate ram common", each above the next),
# each flavour its own build of them, linked after the objects and before
# the system LIBS.
define program
HOST_PROGRAMS += $(1)
$(B)/bin/$(1): $(patsubst %.c,$(B)/obj/%.o,$(2)) $(foreach l,$(4),$(B)/lib/lib$(l).a)
	@mkdir -p $$(@D)
	$(Q)$$(CC) $$(LDFLAGS) -o $$@ $$^ $(3) -lpthread
$(B)/san/bin/$(1): $(patsubst %.c,$(B)/san/obj/%.o,$(2)) $(foreach l,$(4),$(B)/san/lib/lib$(l).a)
	@mkdir -p $$(@D)
	$(Q)$$(CC) $(SAN_FLAGS) $$(LDFLAGS) -o $$@ $$^ $(3) -lpthread
$(B)/node/bin/$(1): $(patsubst %.c,$(B)/node/obj/%.o,$(2)) $(foreach l,$(4),$(B)/node/lib/lib$(l).a)
	@mkdir -p $$(@D)
	$(Q)$$(CC) -static $$(LDFLAGS) -o $$@ $$^ $(3) -lpthread
endef

# $(call library,NAME,SOURCES): the archive libNAME.a in each flavour:
# $(B)/lib (host), $(B)/san/lib (ASan+UBSan), $(B)/node/lib (static) and
# $(B)/fuzz/lib (clang with the fuzzer's instrumentation; built only when
# a fuzzer links it).  A program names it in OWN_LIBS; the linker takes
# only the members it needs.
AR ?= ar
# $(call archive,FLAVOUR_DIR,NAME,SOURCES,LABEL): one flavour's libNAME.a.
define archive
$(B)/$(1)lib/lib$(2).a: $(patsubst %.c,$(B)/$(1)obj/%.o,$(3))
	@mkdir -p $$(@D)
	@echo "  AR $(4) $$@"
	$(Q)rm -f $$@ && $$(AR) rcs $$@ $$^
endef
define library
$(call archive,,$(1),$(2),     )
$(call archive,san/,$(1),$(2),[san])
$(call archive,node/,$(1),$(2),[node])
$(call archive,fuzz/,$(1),$(2),[fuzz])
endef

# The fuzz flavour's objects (the libFuzzer targets and the archives they
# link): clang, ASan+UBSan and the fuzzer's coverage instrumentation.
FUZZ_CC ?= clang
FUZZ_FLAGS := -std=c11 -D_GNU_SOURCE -DMIG_LOCK_RANKS -O1 -g -fsanitize=address,undefined -MMD -MP \
	-Iinclude

$(B)/obj/%.o: %.c
	@mkdir -p $(@D)
	@echo "  CC      $<"
	$(Q)$(CC) $(BASE_CFLAGS) $(CFLAGS) -c -o $@ $<
$(B)/san/obj/%.o: %.c
	@mkdir -p $(@D)
	@echo "  CC [san] $<"
	$(Q)$(CC) $(BASE_CFLAGS) $(SAN_FLAGS) $(CFLAGS) -c -o $@ $<
$(B)/node/obj/%.o: %.c
	@mkdir -p $(@D)
	@echo "  CC [node] $<"
	$(Q)$(CC) $(BASE_CFLAGS) $(CFLAGS) -c -o $@ $<
$(B)/fuzz/obj/%.o: %.c
	@mkdir -p $(@D)
	@echo "  CC [fuzz] $<"
	$(Q)$(FUZZ_CC) $(FUZZ_FLAGS) -fsanitize=fuzzer-no-link -c -o $@ $<
.PRECIOUS: $(B)/fuzz/obj/%.o
-include $(shell find $(B)/fuzz/obj -name '*.d' 2>/dev/null)

# --version prints the build's git describe, passed as -DBUILD_VERSION to the
# objects that print it.  The stamp is rewritten only when the describe
# changes (a commit, a tree that becomes dirty or clean), and those objects
# depend on it, so they rebuild exactly then.
BUILD_VERSION := $(or $(shell git describe --always --dirty 2>/dev/null),unknown)
VERSION_OBJS := $(foreach f,obj san/obj node/obj,$(B)/$(f)/vmm/main.o $(B)/$(f)/migrate-agent/cli.o \
	$(B)/$(f)/vmm/qmp.o)
$(VERSION_OBJS): BASE_CFLAGS += -DBUILD_VERSION='"$(BUILD_VERSION)"'
$(VERSION_OBJS): $(B)/version.stamp
# The release number, one record: VERSION, MAJOR.MINOR.MICRO (QMP's
# query-version and greeting carry it in QEMU's shape; vmm/qmp.c).
VERSION_NUMBERS := $(subst ., ,$(strip $(file < VERSION)))
$(if $(filter-out 3,$(words $(VERSION_NUMBERS)))$(shell echo '$(VERSION_NUMBERS)' | \
	grep -Eqx '[0-9]+ [0-9]+ [0-9]+' || echo bad),\
	$(error VERSION must be MAJOR.MINOR.MICRO, not '$(file < VERSION)'))
$(VERSION_OBJS): BASE_CFLAGS += -DVERSION_MAJOR=$(word 1,$(VERSION_NUMBERS)) \
	-DVERSION_MINOR=$(word 2,$(VERSION_NUMBERS)) -DVERSION_MICRO=$(word 3,$(VERSION_NUMBERS))
$(VERSION_OBJS): VERSION
$(B)/version.stamp: FORCE
	@mkdir -p $(@D)
	@echo '$(BUILD_VERSION)' | cmp -s - $@ || echo '$(BUILD_VERSION)' > $@
.PHONY: FORCE
FORCE:

# The parts, each library before the parts that link it (include/common
# <- ram <- migrate-agent <- vmm).  Each file adds its own programs and
# archives and names what they link; none adds to another's rules.
include tests/build.mk
-include common/build.mk
-include ram/build.mk
-include migrate-agent/build.mk
-include vmm/build.mk
-include guest-image/build.mk
-include bench/build.mk
-include tests/kernel/build.mk

programs: $(addprefix $(B)/bin/,$(HOST_PROGRAMS))
san: $(addprefix $(B)/san/bin/,$(HOST_PROGRAMS))
node-programs: $(addprefix $(B)/node/bin/,$(HOST_PROGRAMS) $(NODE_PROGRAMS)) $(NODE_EXTRA)

deps:
	@scripts/deps.sh
	@scripts/npm-deps.sh

# Both node kernels: normal, and debug (DEBUG_VM, KASAN, lockdep: config-debug).
kernel:
	@scripts/build-kernel.sh normal
	@scripts/build-kernel.sh debug

guest-image: node-programs
	@scripts/mkinitramfs.sh

# The one test command (README.md, .ci/run).
test: deps
	@$(MAKE) --no-print-directory programs san node-programs
	@$(MAKE) --no-print-directory kernel guest-image
	@tests/run

# Subsets, for development: host only, or node only.  Without a writable
# /dev/kvm here (or with POSTCOPY_HOST_KVM=0) the host tests that need KVM
# run in a node on the normal kernel (tests/run): test-host builds it and
# the initramfs too.
NO_HOST_KVM := $(if $(filter 0,$(POSTCOPY_HOST_KVM)),1,$(shell [ -w /dev/kvm ] || echo 1))
test-host: programs san $(if $(NO_HOST_KVM),kernel-normal guest-image)
	@tests/run --host-only
kernel-normal:
	@scripts/build-kernel.sh normal
test-node: kernel guest-image
	@tests/run --node-only

demo: deps
	@$(MAKE) --no-print-directory programs node-programs
	@$(MAKE) --no-print-directory kernel guest-image
	@scripts/demo.sh

bench: deps
	@$(MAKE) --no-print-directory programs node-programs
	@$(MAKE) --no-print-directory kernel guest-image
	@bench/run

format:
	@git ls-files '*.c' '*.h' | grep -v '^kernel-patches/' | xargs clang-format -i
check-format:
	@git ls-files '*.c' '*.h' | grep -v '^kernel-patches/' | xargs clang-format --dry-run --Werror

clean:
	rm -rf $(B)/bin $(B)/lib $(B)/san $(B)/node $(B)/obj $(B)/fuzz $(B)/initramfs* $(B)/tests

-include $(shell find $(B)/obj $(B)/san/obj $(B)/node/obj -name '*.d' 2>/dev/null)
