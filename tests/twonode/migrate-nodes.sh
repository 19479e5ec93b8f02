# timeout: 600
# Postcopy migration between two QEMU nodes on the patched kernel, nested
# KVM, destination RAM on the `userfault` back end (MADV_USERFAULT, the
# article's userfaultfd protocol, remap_anon_pages).  Passes when the guest's
# checksum after migration equals an unmigrated run's and every page arrived
# exactly once (scripts/twonode-migrate.sh checks both).  Both channels
# run TLS 1.3 (PSK) whose sends each node's kernel seals (kTLS, the node
# kernel's CONFIG_TLS): --tls fails the run unless both ends' metrics say so.
# The guest runs long enough (seconds under TCG) that the migration, started
# a quarter into it, is set up before the guest ends even on a loaded host
# (with 6000 iterations, one CI run saw the guest finish first).
# MIGRATE_NODES_BACKEND=uffd runs it with the stock back end (debugging).
exec scripts/twonode-migrate.sh --name migrate-nodes --mem 4M \
	--workload "workload=random mem=1M ops=20000 iters=24000 seed=8 quiet=1" \
	--backend "${MIGRATE_NODES_BACKEND:-userfault}" --tls
