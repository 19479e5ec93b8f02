/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Entry points of the guest program.
 *
 *   _start64  ELF entry, used by the VMM: already in long mode,
 *             rdi = struct guest_bootinfo *, rsi = vCPU index.
 *   _start32  multiboot v1 entry, used by `qemu-system-x86_64 -kernel`:
 *             32-bit protected mode, paging off, eax = 0x2badb002,
 *             ebx = multiboot info.  Builds identity page tables for the
 *             first 4 GiB (2 MiB pages, user-accessible), enters long
 *             mode, drops to ring 3 with IOPL 3 (as the VMM starts
 *             _start64), then calls guest_multiboot_main(magic, mbi).
 *
 * Why ring 3 on both paths: under PVM (this project's hosts) KVM emulates
 * guest ring-0 code one instruction at a time and runs ring 3 natively, so
 * a multiboot guest left in ring 0 under QEMU-KVM crawls (16 MiB `seq`:
 * 12 s against 0.2 s).  The guest needs no privilege: port I/O works at
 * IOPL 3, interrupts stay off (IF=0), and no exception is expected, so
 * there is no IDT or TSS.
 *
 * QEMU refuses ELF64 multiboot images unless the header carries the a.out
 * kludge address fields (flag bit 16): it then loads the file bytes
 * [load_addr, load_end_addr) from the header's file offset and clears the
 * bss up to bss_end_addr.  guest.ld keeps everything loadable in one
 * contiguous PT_LOAD segment so that both loaders see the same image.
 */
#define MB_MAGIC 0x1badb002
#define MB_FLAGS ((1 << 1) | (1 << 16)) /* memory info, address fields */
#define STACK_SIZE 16384
#define MAX_CPUS 32 /* GUEST_MAX_CPUS */
#define PARK_PORT 0xfc /* GUEST_PORT_PARK */
#define PTE_PWU 7	/* present, writable, user */
#define USER_CS (0x18 | 3)
#define USER_DS (0x20 | 3)
#define RFLAGS_IOPL3 0x3002 /* IOPL 3, IF 0, reserved bit 1 */

	.section .multiboot, "a"
	.balign 4
mb_header:
	.long MB_MAGIC
	.long MB_FLAGS
	.long -(MB_MAGIC + MB_FLAGS)
	.long mb_header		/* header_addr */
	.long __load_start	/* load_addr */
	.long __load_end	/* load_end_addr */
	.long __bss_end		/* bss_end_addr */
	.long _start32		/* entry_addr */

	.section .text.boot, "ax"
	.code32
	.globl _start32
_start32:
	cli
	cld
	mov	%eax, %edi		/* multiboot magic */
	mov	%ebx, %esi		/* multiboot info */

	/* PML4[0] -> PDPT; PDPT[0..3] -> PD pages; PD: 2048 x 2 MiB. */
	mov	$boot_pdpt + PTE_PWU, %eax
	mov	%eax, boot_pml4
	mov	$boot_pd + PTE_PWU, %eax
	xor	%ecx, %ecx
1:	mov	%eax, boot_pdpt(, %ecx, 8)
	add	$4096, %eax
	inc	%ecx
	cmp	$4, %ecx
	jb	1b
	mov	$0x80 + PTE_PWU, %eax	/* 2 MiB page */
	xor	%ecx, %ecx
2:	mov	%eax, boot_pd(, %ecx, 8)
	add	$0x200000, %eax
	inc	%ecx
	cmp	$2048, %ecx
	jb	2b

	mov	$boot_pml4, %eax
	mov	%eax, %cr3
	mov	%cr4, %eax
	or	$0x20, %eax		/* PAE */
	mov	%eax, %cr4
	mov	$0xc0000080, %ecx	/* EFER */
	rdmsr
	or	$0x100, %eax		/* LME */
	wrmsr
	mov	%cr0, %eax
	or	$0x80000001, %eax	/* PG | PE */
	mov	%eax, %cr0
	lgdt	boot_gdt_desc
	ljmp	$0x08, $mb_entry64

	.code64
mb_entry64:
	mov	$0x10, %ax
	mov	%ax, %ds
	mov	%ax, %es
	mov	%ax, %ss
	mov	%ax, %fs
	mov	%ax, %gs
	lea	guest_stacks + STACK_SIZE, %rsp
	/* iretq to ring 3: SS, RSP, RFLAGS, CS, RIP; edi/esi survive. */
	pushq	$USER_DS
	pushq	$guest_stacks + STACK_SIZE
	pushq	$RFLAGS_IOPL3
	pushq	$USER_CS
	pushq	$mb_ring3
	iretq

mb_ring3:
	mov	$USER_DS, %ax
	mov	%ax, %ds
	mov	%ax, %es
	mov	%edi, %edi
	mov	%esi, %esi
	call	guest_multiboot_main
	jmp	guest_halt

	.globl _start64
_start64:
	cmp	$MAX_CPUS, %rsi
	jae	guest_halt
	mov	%rsi, %rax
	inc	%rax
	shl	$14, %rax		/* (cpu + 1) * STACK_SIZE */
	lea	guest_stacks(%rax), %rsp
	call	guest_vmm_main
	/* fall through */

	/* Ring 3 (every path now): park on the port (the VMM stops the vCPU;
	 * QEMU has exited on isa-debug-exit before); ring 0: hlt. */
	.globl guest_halt
guest_halt:
	mov	%cs, %ax
	test	$3, %al
	jz	1f
	mov	$PARK_PORT, %dx
	out	%eax, %dx
	jmp	guest_halt
1:	cli
	hlt
	jmp	guest_halt

	.section .rodata
	.balign 8
boot_gdt:
	.quad 0
	.quad 0x00af9a000000ffff	/* 0x08: 64-bit code */
	.quad 0x00cf92000000ffff	/* 0x10: data */
	.quad 0x00affa000000ffff	/* 0x18: 64-bit code, DPL 3 */
	.quad 0x00cff2000000ffff	/* 0x20: data, DPL 3 */
boot_gdt_desc:
	.word boot_gdt_desc - boot_gdt - 1
	.long boot_gdt

	.section .bss
	.balign 4096
boot_pml4:
	.skip 4096
boot_pdpt:
	.skip 4096
boot_pd:
	.skip 4 * 4096
	.balign 16
	.globl guest_stacks
guest_stacks:
	.skip STACK_SIZE * MAX_CPUS
	.section .note.GNU-stack, "", @progbits
