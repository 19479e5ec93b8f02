# timeout: 60
# get_user_pages_locked() (kernel-patches 0001) through gup_test's
# GUP_LOCKED_TEST: plain memory, bad input, and a userfault that makes it
# drop mmap_lock.
must-pass gup-locked
