# timeout: 180
# remap_anon_pages() against lockless rmap walkers (kernel-patches 0003.1):
# page_idle never walks a moved page through its old anon_vma, nor misses it
# in flight (0003 publishes the new rmap only after the new pte).
must-pass rap-rmap
