/* SPDX-License-Identifier: GPL-2.0 */
/* A 16550-like UART at 0x3f8: transmit only, enough for a console. */
#ifndef VMM_SERIAL_H
#define VMM_SERIAL_H

struct vm;

/*
 * Registers the UART; output goes to out_fd (-1: discarded).  The VM
 * flushes a buffered partial line at each pause and frees the UART when
 * it is destroyed (the device's flush and destroy).
 */
int serial_init(struct vm *vm, int out_fd);

#endif /* VMM_SERIAL_H */
