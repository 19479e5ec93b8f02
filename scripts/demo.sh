#!/usr/bin/env bash
# make demo: a running VM moves between two QEMU nodes on the patched kernel
# with postcopy (scripts/twonode-migrate.sh does the work and the checks).
set -uo pipefail
cd "$(dirname "$0")/.."
exec scripts/twonode-migrate.sh --name demo --mem 16M --after 300 \
	--workload "workload=random mem=8M ops=50000 iters=2000 seed=42 quiet=1"
