# timeout: 180
# remap_anon_pages() (kernel-patches 0003) racing faults, MADV_DONTNEED,
# munmap, mremap, fork and a second mover on the same pages.
must-pass rap-races
