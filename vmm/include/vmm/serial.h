/* SPDX-License-Identifier: GPL-2.0 */
/* A 16550-like UART at 0x3f8: transmit only, enough for a console. */
#ifndef VMM_SERIAL_H
#define VMM_SERIAL_H

struct vm;
struct serial;

/* Registers the UART; output goes to out_fd (-1: discarded). */
int serial_init(struct vm *vm, int out_fd, struct serial **out);
/* Writes any buffered partial line. */
void serial_flush(struct serial *s);
void serial_exit(struct serial *s);

#endif /* VMM_SERIAL_H */
