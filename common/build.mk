# common: the helpers every part shares (include/common/*.h), the bottom of
# the folder graph; libcommon.a in each flavour.  Header-only helpers
# (page.h, clock.h, macros.h, zero-page.h, and parse.h's parse_u64()) need no object.
COMMON_SRCS := common/crc32c.c common/file-io.c common/parse.c
$(eval $(call library,common,$(COMMON_SRCS)))
