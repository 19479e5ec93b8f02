# timeout: 120
# remap_anon_pages() keeps userfaultfd write protection where the
# destination is registered for it (kernel-patches 0003.2): a moved wp page,
# zero page and THP still report their first write; moved into a vma
# without uffd-wp they carry no stale bit (pagemap, a later registration).
must-pass rap-uffd-wp
