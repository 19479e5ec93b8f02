#!/usr/bin/env bash
# ram-move-ebusy: the uffd-move back end (UFFDIO_MOVE, Linux 6.8 and later)
# copies a page the kernel refuses to move (EBUSY: shared with a fork
# child) instead of failing the migration, alone (ram_install()) and
# inside a run (one UFFDIO_MOVE for four pages); an exclusive page still
# moves.  The same program attacks the userfault back end in a node
# (tests/node/kernel-rap-vmm-ebusy.sh).  A kernel without UFFDIO_MOVE skips.
# timeout: 60
set -uo pipefail
. tests/host/migrate-lib.bash # fail, skip, need_programs, $BIN
need_programs ram-ebusy
timeout "$(guard 50)" "$BIN/ram-ebusy" uffd-move
rc=$?
[ "$rc" = 77 ] && skip "this kernel has no UFFDIO_MOVE ($("$BIN/vmm" probe 2>&1 | grep '^uffd-move'))"
exit "$rc"
