# timeout: 480
# A nested KVM guest whose RAM is MADV_USERFAULT memory claimed by an
# article userfaultfd: its accesses block in KVM until the page is moved in
# with remap_anon_pages() and woken.  Unclaimed RAM, and RAM claimed by a
# userfaultfd that refuses kernel faults (0005.1), ends KVM_RUN with
# KVM_EXIT_MEMORY_FAULT, with and without an in-kernel irqchip; an emulated
# access exits KVM_EXIT_MMIO and a kvmclock update is skipped.
[ -c /dev/kvm ] || { echo "no /dev/kvm in the node (kvm_amd not loaded? cpu svm flag: $(grep -c svm /proc/cpuinfo))"; exit 1; }
must-pass kvm-userfault
