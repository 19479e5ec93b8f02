# migrate-agent: the postcopy migration library (libmigrate.a: linked into
# vmm, the test peers, the tools and the fuzzers), the migrate-agent CLI,
# test peers and the libFuzzer targets.

BASE_CFLAGS += -Imigrate-agent/include

# The library, one archive per flavour (the top Makefile's `library`):
# $(B)/lib/libmigrate.a (host), $(B)/san/lib/, $(B)/node/lib/ and
# $(B)/fuzz/lib/.  It sits on guest RAM (libram.a: the page record it
# writes; mig-memtest and the fuzzers use lazy RAM without a VM) and
# libcommon.a; a program that links it names all three, MIG_OWN, and the
# system libraries MIG_LIBS after them.
MIG_LIB_SRCS := migrate-agent/params.c migrate-agent/wire.c migrate-agent/net.c migrate-agent/addr.c migrate-agent/util.c migrate-agent/lock-rank.c migrate-agent/tls-creds.c migrate-agent/tls.c \
	migrate-agent/auth.c migrate-agent/stamps.c migrate-agent/metrics.c migrate-agent/link.c \
	migrate-agent/session.c migrate-agent/source.c migrate-agent/source-api.c migrate-agent/source-session.c migrate-agent/source-watch.c \
	migrate-agent/source-precopy.c migrate-agent/source-switch.c migrate-agent/source-urgent.c \
	migrate-agent/source-push.c migrate-agent/source-prepage.c migrate-agent/source-recover.c migrate-agent/source-report.c \
	migrate-agent/channels.c migrate-agent/source-channels.c migrate-agent/dest-channels.c \
	migrate-agent/dest.c migrate-agent/dest-api.c migrate-agent/dest-phase.c migrate-agent/dest-accept.c migrate-agent/dest-incoming.c migrate-agent/dest-rx.c \
	migrate-agent/dest-install.c migrate-agent/dest-fault.c migrate-agent/dest-recover.c migrate-agent/dest-watch.c migrate-agent/dest-report.c
$(eval $(call library,migrate,$(MIG_LIB_SRCS)))
MIG_OWN := migrate ram common
MIG_LIBS := -luring -lzstd -lssl -lcrypto -ljson-c

# $(call mig_program,NAME,SOURCES,LIBS): a program linked with the library
# (each flavour its own), then LIBS.
define mig_program
$(call program,$(1),$(2),$(3),$(MIG_OWN))
endef

# The CLI that attaches to a source VMM's control socket.
$(eval $(call program,migrate-agent,migrate-agent/cli.c migrate-agent/qmp-client.c migrate-agent/params.c,-ljson-c))

# Test programs: plain-memory end-to-end migration, adversarial peer, link cutter.
$(eval $(call mig_program,mig-memtest,migrate-agent/tests/memtest.c,$(MIG_LIBS)))

# The libFuzzer targets (build/fuzz/, built with the programs, run by
# tests/host/migrate-fuzz.sh), linked with their own flavour of the library:
# clang, ASan+UBSan and the fuzzer's coverage instrumentation.
#   wire-fuzz    the parser;
#   dest-fuzz    the destination's state machine (docs/testing.md): whole
#                sessions of frames against a fake VM, through its own steps
#                (migrate-agent/dest.h);
#   source-fuzz  the source's side: the frames a destination sends after the
#                switch-over, through its own steps (migrate-agent/source.h).
FUZZ_FLAGS += -Imigrate-agent -Imigrate-agent/include
FUZZ_TARGETS := wire-fuzz dest-fuzz source-fuzz
.PHONY: fuzz
fuzz: $(addprefix $(B)/fuzz/,$(FUZZ_TARGETS))
programs: $(addprefix $(B)/fuzz/,$(FUZZ_TARGETS))
$(B)/fuzz/%-fuzz: $(B)/fuzz/obj/migrate-agent/fuzz/%-fuzz.o $(foreach l,$(MIG_OWN),$(B)/fuzz/lib/lib$(l).a)
	@mkdir -p $(@D)
	@echo "  FUZZ    $@"
	$(Q)$(FUZZ_CC) -fsanitize=fuzzer,address,undefined -o $@ $^ $(MIG_LIBS) -lpthread
$(eval $(call mig_program,mig-evil,migrate-agent/tests/evil.c,$(MIG_LIBS)))
$(eval $(call mig_program,mig-cutproxy,migrate-agent/tests/cutproxy.c,$(MIG_LIBS)))

# The handshake's steps (session.c), both roles against each other:
# tests/host/migrate-session.sh.
$(eval $(call mig_program,mig-hs-check,migrate-agent/tests/hs-check.c,$(MIG_LIBS)))

# TLS (migrate/tls.h) against real OpenSSL handshakes: tests/host/migrate-tls.sh.
$(eval $(call mig_program,mig-tls-check,migrate-agent/tests/tls-check.c,$(MIG_LIBS)))

# What TLS adds to a demand fault's round trip (migrate-agent/tools/tls-pingpong.c).
$(eval $(call mig_program,mig-tls-pingpong,migrate-agent/tools/tls-pingpong.c,$(MIG_LIBS)))

# What the per-page CRC32C costs against a copy (migrate-agent/tools/crc-cost.c).
$(eval $(call mig_program,mig-crc-cost,migrate-agent/tools/crc-cost.c,$(MIG_LIBS)))

# The pre-paging policy on made-up fault sequences (tests/host/migrate-prepage.sh).
$(eval $(call mig_program,mig-prepage-check,migrate-agent/tests/prepage-check.c,$(MIG_LIBS)))

# Secrets left in memory after a handshake: tests/host/migrate-secrets.sh.
$(eval $(call mig_program,mig-secrets-check,migrate-agent/tests/secrets-check.c,$(MIG_LIBS)))
