# timeout: 60
# Nested KVM inside the node: /dev/kvm exists and a real-mode guest runs,
# computes from its memory and halts.
[ -c /dev/kvm ] || { echo "no /dev/kvm in the node (kvm_amd not loaded? cpu svm flag: $(grep -c svm /proc/cpuinfo))"; exit 1; }
kvm-smoke
