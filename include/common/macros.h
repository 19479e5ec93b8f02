/* SPDX-License-Identifier: GPL-2.0 */
/* The few kernel-style macros every part uses. */
#ifndef COMMON_MACROS_H
#define COMMON_MACROS_H

#include <stddef.h>

#define ARRAY_SIZE(a)			(sizeof(a) / sizeof((a)[0]))
#define ALIGN_UP(x, a)			(((x) + (a)-1) & ~((__typeof__(x))(a)-1))
#define container_of(ptr, type, member) ((type *)((char *)(ptr)-offsetof(type, member)))

#endif /* COMMON_MACROS_H */
