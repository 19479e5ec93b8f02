# timeout: 120
# Claims, releases and UFFDIO_(UN)REGISTER of a vma's tail pass vma_merge()
# the tail's page offset (kernel-patches 0003.3, 0004): an mremap() layout
# must not merge the tail into the next vma, and rmap (soft offline) must
# still find its page.  The layout also runs as an unprivileged user.
must-pass uffd-merge
