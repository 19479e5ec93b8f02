/* SPDX-License-Identifier: GPL-2.0 */
/*
 * The vmm process's exit codes.  The guest's own status (0-GUEST_EXIT_MAX,
 * GUEST_PORT_EXIT in vmm/guest-abi.h) passes through unchanged; the VMM's
 * own are sysexits.h's, above that range, and 128 + N when signal N stopped
 * it, so a script can always tell whether the guest or the VMM spoke.
 */
#ifndef VMM_EXIT_CODES_H
#define VMM_EXIT_CODES_H

#include <sysexits.h>

#define VMM_EXIT_USAGE EX_USAGE	   /* 64: bad arguments */
#define VMM_EXIT_ERROR EX_SOFTWARE /* 70: the VMM failed: message on stderr */

#endif /* VMM_EXIT_CODES_H */
