#!/usr/bin/env bash
# make demo: a running VM moves between two QEMU nodes on the patched kernel
# with postcopy (scripts/twonode-migrate.sh does the work and the checks),
# then the destination's page map is drawn (bench/pagemap).
set -uo pipefail
cd "$(dirname "$0")/.."
scripts/twonode-migrate.sh --name demo --mem 16M \
	--workload "workload=random mem=8M ops=50000 iters=2000 seed=42 quiet=1"
rc=$?
if [ "$rc" = 0 ]; then
	png=$(bench/pagemap build/nodes/demo-b.log build/nodes/demo-page-map.png \
		--title "make demo: node a to node b, 16 MiB guest") &&
		echo "migrate-demo: page map (guest address against time, by how each page came): $png"
fi
exit "$rc"
