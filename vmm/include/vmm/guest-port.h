/* SPDX-License-Identifier: GPL-2.0 */
/* The guest's report and exit ports (protocol in vmm/guest-abi.h). */
#ifndef VMM_GUEST_PORT_H
#define VMM_GUEST_PORT_H

struct vm;

int guest_port_init(struct vm *vm);

#endif /* VMM_GUEST_PORT_H */
