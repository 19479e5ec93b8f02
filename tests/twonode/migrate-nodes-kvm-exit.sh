# timeout: 600
# migrate-nodes with the destination node's RAM on the `kvm-exit` back end
# (MADV_USERFAULT RAM no userfaultfd claims: each vCPU serves its own
# KVM_EXIT_MEMORY_FAULT, sending its PAGE_REQUEST from its thread), across
# two QEMU nodes on the patched kernel.  Passes when the checksum after
# migration equals an unmigrated run's and every page arrived exactly once
# (scripts/twonode-migrate.sh checks both), and the destination's metrics
# say its faults were served by the vCPU threads (faults_own_thread, which
# only that path counts, at least the demand faults, and some).  The push
# is capped at 1 MiB/s (4 s for the 4 MiB), as migrate-kvm-exit's on one
# host: "and some" needs the guest to touch a page the push has not
# brought yet, which an uncapped push could win on a loaded machine.
set -u
name=migrate-nodes-kvm-exit
scripts/twonode-migrate.sh --name "$name" --mem 4M \
	--workload "workload=random mem=1M ops=20000 iters=24000 seed=8 quiet=1" \
	--backend kvm-exit --max-bandwidth 1048576 || exit 1
dj=$(tr -d '\r' < "build/nodes/$name-b.log" | sed -n 's/^@@DEST_JSON //p' | tail -n1)
if ! printf '%s' "$dj" | jq -e '.ram_backend == "kvm-exit" and .faults > 0 and .faults_own_thread >= .faults' > /dev/null; then
	echo "FAIL: the destination's faults were not served on its vCPU threads: $dj" | cut -c1-600
	exit 1
fi
echo "ok: $(printf '%s' "$dj" | jq -c '{ram_backend, faults, faults_own_thread, pages_demand, p50: .fault_latency_us.p50, p99: .fault_latency_us.p99}')"
