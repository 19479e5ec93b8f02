# timeout: 120
# The article's userfaultfd protocol (kernel-patches 0004): handshake, claims,
# faults from threads, the kernel and another process's GUP (without
# mmap_lock held), close with faults pending, fork and mremap.
must-pass uffd-article
