# In-node tests of the kernel series (kernel-patches/): static programs in
# the node initramfs, run by tests/node/kernel-*.sh.
$(eval $(call node_program,madv-userfault,tests/kernel/madv-userfault.c,))
$(eval $(call node_program,remap-anon-pages,tests/kernel/remap-anon-pages.c,))
$(eval $(call node_program,uffd-article,tests/kernel/uffd-article.c,))
$(eval $(call node_program,gup-locked,tests/kernel/gup-locked.c,))
$(eval $(call node_program,kvm-userfault,tests/kernel/kvm-userfault.c,))
$(eval $(call node_program,rap-thp,tests/kernel/rap-thp.c,))
$(eval $(call node_program,rap-rmap,tests/kernel/rap-rmap.c,))
$(eval $(call node_program,rap-races,tests/kernel/rap-races.c,))
# The moving back ends against pages the kernel refuses to move: userfault
# in a node, uffd-move (UFFDIO_MOVE) on the host (tests/host/ram-move-ebusy.sh).
$(eval $(call program,ram-ebusy,tests/kernel/ram-ebusy.c,,ram common))
$(eval $(call node_program,rap-uffd-wp,tests/kernel/rap-uffd-wp.c,))
$(eval $(call node_program,uffd-merge,tests/kernel/uffd-merge.c,))
$(eval $(call node_program,rap-stress,tests/kernel/rap-stress.c,))
# The series refuses hugetlb memory (needs CONFIG_HUGETLBFS in the node).
$(eval $(call node_program,hugetlb-refusal,tests/kernel/hugetlb-refusal.c,))
