# vmm: the KVM virtual machine monitor.
# VMM_LIB_SRCS is everything but the commands and the migration glue:
# vmm-api-test links it alone, with guest RAM (VMM_OWN: libram.a, ram/build.mk).
VMM_OWN := ram common

VMM_LIB_SRCS := vmm/vm.c vmm/vcpu.c vmm/vm-create.c vmm/vm-report.c vmm/memfault.c vmm/state.c vmm/vm-state.c vmm/snapshot.c \
	vmm/arch/x86/boot.c vmm/arch/x86/cpu.c vmm/arch/x86/cpuid.c vmm/arch/x86/tsc.c \
	vmm/hw/serial.c vmm/hw/guest-port.c vmm/util.c
VMM_CMD_SRCS := vmm/main.c vmm/runner.c vmm/builtin-run.c vmm/builtin-restore.c \
	vmm/builtin-probe.c
# The migration glue (the library bound to the VM through vm.h and ram.h) and
# the QMP server of --control: the vmm binary only.  They call libmigrate.a
# (MIG_OWN, MIG_LIBS: migrate-agent/build.mk, included before this file)
# and json-c.
VMM_MIGRATE_SRCS := vmm/migrate/migrate.c vmm/migrate/options.c vmm/migrate/incoming.c \
	vmm/migrate/signals.c vmm/migrate/outgoing.c vmm/migrate/qmp-params.c vmm/migrate/qmp-caps.c \
	vmm/migrate/qmp-commands.c vmm/migrate/qmp-figures.c vmm/migrate/qmp-runstate.c \
	vmm/migrate/qmp-recover.c vmm/migrate/qmp-args.c vmm/migrate/qmp-objects.c vmm/migrate/incoming-events.c vmm/qmp.c vmm/qmp-frame.c \
	vmm/vm-control.c

BASE_CFLAGS += -Ivmm/include

$(eval $(call program,vmm,$(VMM_CMD_SRCS) $(VMM_MIGRATE_SRCS) $(VMM_LIB_SRCS),$(MIG_LIBS),$(MIG_OWN)))

# The VM API as the migration agent uses it (tests/host/vmm-api.sh).
$(eval $(call program,vmm-api-test,vmm/tests/api-test.c $(VMM_LIB_SRCS),,$(VMM_OWN)))

# The QMP server alone, without a VM (tests/host/vmm-qmp-server.sh).
$(eval $(call program,vmm-qmp-test,vmm/tests/qmp-test.c vmm/qmp.c vmm/qmp-frame.c,-ljson-c))
