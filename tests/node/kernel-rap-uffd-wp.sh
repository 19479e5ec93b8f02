# timeout: 120
# remap_anon_pages() keeps userfaultfd write protection (kernel-patches
# 0003.2): a moved wp page, zero page and THP still report their first write.
must-pass rap-uffd-wp
