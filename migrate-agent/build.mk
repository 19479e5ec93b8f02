# migrate-agent: the postcopy migration library (linked into vmm), the
# migrate-agent CLI, test peers and the wire-protocol fuzz target.

BASE_CFLAGS += -Imigrate-agent/include

# The library, for the VMM to link (with $(MIG_LIBS)).
MIG_LIB_SRCS := migrate-agent/params.c migrate-agent/wire.c migrate-agent/net.c migrate-agent/spin.c migrate-agent/util.c migrate-agent/tls.c \
	migrate-agent/auth.c migrate-agent/source.c migrate-agent/dest.c migrate-agent/stamps.c \
	migrate-agent/metrics.c
MIG_LIBS := -luring -lzstd -lssl -lcrypto -ljson-c

# The CLI that attaches to a source VMM's control socket.
$(eval $(call program,migrate-agent,migrate-agent/cli.c migrate-agent/qmp-client.c migrate-agent/params.c,-ljson-c))

# The vmm binary (vmm/build.mk) links the library and its glue: they are added
# as extra prerequisites of its three link rules, libraries by full path (the
# node flavour is static), so $$^ carries them in link order.
MIG_VMM_SRCS := $(MIG_LIB_SRCS) migrate-agent/vmm-glue.c migrate-agent/qmp.c
MIG_SO := $(shell $(CC) -print-file-name=liburing.so) $(shell $(CC) -print-file-name=libzstd.so) \
	$(shell $(CC) -print-file-name=libssl.so) $(shell $(CC) -print-file-name=libcrypto.so) \
	$(shell $(CC) -print-file-name=libjson-c.so)
MIG_A := $(shell $(CC) -print-file-name=liburing.a) $(shell $(CC) -print-file-name=libzstd.a) \
	$(shell $(CC) -print-file-name=libssl.a) $(shell $(CC) -print-file-name=libcrypto.a) \
	$(shell $(CC) -print-file-name=libjson-c.a)
ifneq ($(filter vmm,$(HOST_PROGRAMS)),)
$(B)/bin/vmm: $(patsubst %.c,$(B)/obj/%.o,$(MIG_VMM_SRCS)) $(MIG_SO)
$(B)/san/bin/vmm: $(patsubst %.c,$(B)/san/obj/%.o,$(MIG_VMM_SRCS)) $(MIG_SO)
$(B)/node/bin/vmm: $(patsubst %.c,$(B)/node/obj/%.o,$(MIG_VMM_SRCS)) $(MIG_A)
endif

# Test programs: plain-memory end-to-end migration, adversarial peer, link cutter.
$(eval $(call program,mig-memtest,migrate-agent/tests/memtest.c $(MIG_LIB_SRCS),$(MIG_LIBS)))

# The parser's libFuzzer target: build/fuzz/wire-fuzz (built with the programs,
# run by tests/host/migrate-fuzz.sh).
FUZZ_CC ?= clang
.PHONY: fuzz
fuzz: $(B)/fuzz/wire-fuzz
programs: $(B)/fuzz/wire-fuzz
$(B)/fuzz/wire-fuzz: migrate-agent/fuzz/wire-fuzz.c migrate-agent/wire.c migrate-agent/include/migrate/wire.h
	@mkdir -p $(@D)
	@echo "  FUZZ    $@"
	$(Q)$(FUZZ_CC) -std=c11 -D_GNU_SOURCE -O1 -g -fsanitize=fuzzer,address,undefined \
		-Iinclude -Imigrate-agent/include -o $@ migrate-agent/fuzz/wire-fuzz.c \
		migrate-agent/wire.c -lzstd
# The destination's state machine (docs/testing.md): whole sessions of frames
# against a fake VM, through dest.c's own steps.
fuzz: $(B)/fuzz/dest-fuzz
programs: $(B)/fuzz/dest-fuzz
$(B)/fuzz/dest-fuzz: migrate-agent/fuzz/dest-fuzz.c migrate-agent/dest.c migrate-agent/wire.c migrate-agent/tls.c \
		migrate-agent/net.c migrate-agent/spin.c migrate-agent/util.c migrate-agent/auth.c migrate-agent/stamps.c migrate-agent/metrics.c \
		migrate-agent/internal.h migrate-agent/stamps.h migrate-agent/metrics.h migrate-agent/spin.h $(wildcard migrate-agent/include/migrate/*.h)
	@mkdir -p $(@D)
	@echo "  FUZZ    $@"
	$(Q)$(FUZZ_CC) -std=c11 -D_GNU_SOURCE -O1 -g -fsanitize=fuzzer,address,undefined \
		-Iinclude -Imigrate-agent -Imigrate-agent/include -o $@ \
		migrate-agent/fuzz/dest-fuzz.c migrate-agent/wire.c migrate-agent/net.c migrate-agent/spin.c \
		migrate-agent/util.c migrate-agent/auth.c migrate-agent/stamps.c migrate-agent/metrics.c migrate-agent/tls.c \
		-lzstd -lssl -lcrypto -ljson-c -lpthread
# The source's side: the frames a destination sends after the switch-over.
fuzz: $(B)/fuzz/source-fuzz
programs: $(B)/fuzz/source-fuzz
$(B)/fuzz/source-fuzz: migrate-agent/fuzz/source-fuzz.c migrate-agent/source.c migrate-agent/tls.c \
		migrate-agent/wire.c migrate-agent/net.c migrate-agent/spin.c migrate-agent/util.c migrate-agent/auth.c \
		migrate-agent/stamps.c migrate-agent/stamps.h migrate-agent/metrics.c migrate-agent/metrics.h \
		migrate-agent/spin.h migrate-agent/internal.h $(wildcard migrate-agent/include/migrate/*.h)
	@mkdir -p $(@D)
	@echo "  FUZZ    $@"
	$(Q)$(FUZZ_CC) -std=c11 -D_GNU_SOURCE -O1 -g -fsanitize=fuzzer,address,undefined \
		-Iinclude -Imigrate-agent -Imigrate-agent/include -o $@ \
		migrate-agent/fuzz/source-fuzz.c migrate-agent/wire.c migrate-agent/net.c migrate-agent/spin.c \
		migrate-agent/util.c migrate-agent/auth.c migrate-agent/stamps.c migrate-agent/metrics.c migrate-agent/tls.c \
		-luring -lzstd -lssl -lcrypto -ljson-c -lpthread
$(eval $(call program,mig-evil,migrate-agent/tests/evil.c migrate-agent/wire.c migrate-agent/net.c migrate-agent/spin.c migrate-agent/auth.c migrate-agent/tls.c,-lzstd -lssl -lcrypto))
$(eval $(call program,mig-cutproxy,migrate-agent/tests/cutproxy.c migrate-agent/wire.c migrate-agent/net.c migrate-agent/spin.c migrate-agent/tls.c,-lzstd -lssl -lcrypto))

# TLS (migrate/tls.h) against real OpenSSL handshakes: tests/host/migrate-tls.sh.
$(eval $(call program,mig-tls-check,migrate-agent/tests/tls-check.c migrate-agent/tls.c migrate-agent/net.c migrate-agent/wire.c migrate-agent/spin.c,-lzstd -lssl -lcrypto))

# What TLS adds to a demand fault's round trip (migrate-agent/tools/tls-pingpong.c).
$(eval $(call program,mig-tls-pingpong,migrate-agent/tools/tls-pingpong.c migrate-agent/tls.c migrate-agent/net.c migrate-agent/wire.c migrate-agent/spin.c migrate-agent/util.c,-lzstd -lssl -lcrypto))

# What the per-page CRC32C costs against a copy (migrate-agent/tools/crc-cost.c).
$(eval $(call program,mig-crc-cost,migrate-agent/tools/crc-cost.c migrate-agent/wire.c migrate-agent/net.c migrate-agent/spin.c,-lzstd))
