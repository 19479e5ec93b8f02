# timeout: 120
# remap_anon_pages() and THPs (kernel-patches 0003): whole and partial moves,
# a dst window spanning two vmas (unprivileged), a shared THP refused unsplit.
must-pass rap-thp
