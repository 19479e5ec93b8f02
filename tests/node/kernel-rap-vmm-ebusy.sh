# timeout: 60
# The VMM's userfault back end copies a page remap_anon_pages() refuses
# (EBUSY) instead of failing the migration.
must-pass rap-vmm-ebusy
