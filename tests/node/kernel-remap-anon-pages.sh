# timeout: 60
# remap_anon_pages() (kernel-patches 0003): zero-copy moves, every errno,
# partial moves, holes, shared pages, the zero page, whole 2 MiB THPs.
must-pass remap-anon-pages
