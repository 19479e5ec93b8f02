# timeout: 600
# Postcopy migration between two QEMU nodes on the patched kernel, nested
# KVM, destination RAM on the `userfault` back end (MADV_USERFAULT, the
# article's userfaultfd protocol, remap_anon_pages).  Passes when the guest's
# checksum after migration equals an unmigrated run's and every page arrived
# exactly once (scripts/twonode-migrate.sh checks both).
# MIGRATE_NODES_BACKEND=uffd runs it with the stock back end (debugging).
exec scripts/twonode-migrate.sh --name migrate-nodes --mem 4M \
	--workload "workload=random mem=1M ops=20000 iters=6000 seed=8 quiet=1" \
	--backend "${MIGRATE_NODES_BACKEND:-userfault}"
