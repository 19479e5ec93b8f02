# timeout: 60
# The VMM's userfault back end copies a page remap_anon_pages() refuses
# (EBUSY) instead of failing the migration: one page, and inside a run.
must-pass ram-ebusy userfault
