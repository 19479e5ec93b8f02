# timeout: 180
# Concurrent faulting threads on claimed MADV_USERFAULT memory, each fault
# resolved with remap_anon_pages() from 4 KiB or THP staging pages (the
# counterpart of upstream's uffd-stress in move mode).
must-pass rap-stress
