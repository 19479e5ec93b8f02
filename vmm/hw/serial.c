// SPDX-License-Identifier: GPL-2.0
/*
 * serial: a 16550-like UART at 0x3f8, transmit side only.  Registers read
 * back what was written; LSR always says "transmitter empty"; no
 * interrupts.  Output is line buffered to out_fd.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "vmm/guest-abi.h"
#include "vmm/serial.h"
#include "vmm/vm.h"

#define UART_LCR_DLAB 0x80
#define UART_LSR_THRE 0x20
#define UART_LSR_TEMT 0x40

/* Saved in the state blob as is (device state_id 1). */
struct serial_regs {
	uint8_t ier, iir, lcr, mcr, lsr, msr, scr, dll, dlm, fcr;
	uint8_t reserved[6];
};

struct serial {
	struct pio_device dev;
	struct serial_regs regs;
	pthread_mutex_t lock;
	int out_fd;
	size_t used;
	char line[256];
};

static void flush_locked(struct serial *s)
{
	size_t off = 0;

	while (s->out_fd >= 0 && off < s->used) {
		ssize_t n = write(s->out_fd, s->line + off, s->used - off);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break;
		off += (size_t)n;
	}
	s->used = 0;
}

static void serial_flush(struct serial *s)
{
	pthread_mutex_lock(&s->lock);
	flush_locked(s);
	pthread_mutex_unlock(&s->lock);
}

static void put_char(struct serial *s, char c)
{
	if (c == '\r')
		return;
	s->line[s->used++] = c;
	if (c == '\n' || s->used == sizeof(s->line))
		flush_locked(s);
}

/* A write to register reg (the divisor latch's two bytes when DLAB is set). */
static void serial_write(struct serial *s, unsigned int reg, uint8_t v)
{
	struct serial_regs *r = &s->regs;
	bool dlab = r->lcr & UART_LCR_DLAB;

	switch (reg) {
	case 0:
		dlab ? (void)(r->dll = v) : put_char(s, (char)v);
		break;
	case 1:
		dlab ? (void)(r->dlm = v) : (void)(r->ier = v & 0x0f);
		break;
	case 2:
		r->fcr = v;
		break;
	case 3:
		r->lcr = v;
		break;
	case 4:
		r->mcr = v;
		break;
	case 7:
		r->scr = v;
		break;
	default:
		break;
	}
}

/* What a read of register reg returns: never an interrupt, never input. */
static uint8_t serial_read(struct serial *s, unsigned int reg)
{
	struct serial_regs *r = &s->regs;
	bool dlab = r->lcr & UART_LCR_DLAB;

	switch (reg) {
	case 0:
		return dlab ? r->dll : 0;
	case 1:
		return dlab ? r->dlm : r->ier;
	case 2:
		return 0x01 | ((r->fcr & 1) ? 0xc0 : 0); /* no interrupt pending */
	case 3:
		return r->lcr;
	case 4:
		return r->mcr;
	case 5:
		return UART_LSR_THRE | UART_LSR_TEMT;
	case 6:
		return 0xb0; /* DCD, DSR, CTS */
	case 7:
		return r->scr;
	default:
		return 0xff;
	}
}

static void serial_io(struct vcpu *vcpu, struct pio_device *dev, uint16_t port, bool out,
		      void *data, int size)
{
	struct serial *s = dev->priv;
	uint8_t *v = data;

	pthread_mutex_lock(&s->lock);
	if (out) {
		serial_write(s, port - dev->base, *v);
	} else {
		memset(data, 0xff, (size_t)size);
		*v = serial_read(s, port - dev->base);
	}
	pthread_mutex_unlock(&s->lock);
}

static size_t serial_save(struct pio_device *dev, void *buf, size_t len)
{
	struct serial *s = dev->priv;

	if (buf && len >= sizeof(s->regs)) {
		serial_flush(s);
		memcpy(buf, &s->regs, sizeof(s->regs));
	}
	return sizeof(s->regs);
}

static int serial_load(struct pio_device *dev, const void *buf, size_t len)
{
	struct serial *s = dev->priv;

	if (len != sizeof(s->regs))
		return -EBADMSG;
	memcpy(&s->regs, buf, len);
	return 0;
}

static void serial_dev_flush(struct pio_device *dev)
{
	serial_flush(dev->priv);
}

static void serial_destroy(struct pio_device *dev)
{
	struct serial *s = dev->priv;

	serial_flush(s);
	pthread_mutex_destroy(&s->lock);
	free(s);
}

int serial_init(struct vm *vm, int out_fd)
{
	struct serial *s = calloc(1, sizeof(*s));
	int r;

	if (!s)
		return -ENOMEM;
	pthread_mutex_init(&s->lock, NULL);
	s->out_fd = out_fd;
	s->regs.lcr = 0x03;
	s->dev = (struct pio_device){
		.name = "serial",
		.base = GUEST_SERIAL_BASE,
		.len = 8,
		.state_id = 1,
		.priv = s,
		.io = serial_io,
		.save = serial_save,
		.load = serial_load,
		.flush = serial_dev_flush,
		.destroy = serial_destroy,
	};
	r = vm_register_pio(vm, &s->dev);
	if (r < 0) {
		free(s);
		return r;
	}
	return 0;
}
