# timeout: 60
# MADV_USERFAULT/MADV_NOUSERFAULT (kernel-patches 0002): SIGBUS/EFAULT on
# missing pages, EINVAL on unsuitable memory, fork/mremap/munmap, THP path.
must-pass madv-userfault
