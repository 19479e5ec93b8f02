# timeout: 120
# MADV_USERFAULT and remap_anon_pages() refuse hugetlb memory, private and
# shared, with EINVAL and nothing changed (kernel-patches 0002, 0003).
# Four 2 MiB huge pages are reserved for it and given back after.
echo 4 > /proc/sys/vm/nr_hugepages || { echo "cannot reserve huge pages (CONFIG_HUGETLBFS?)"; exit 1; }
must-pass hugetlb-refusal
rc=$?
echo 0 > /proc/sys/vm/nr_hugepages
exit $rc
