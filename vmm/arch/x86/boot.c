// SPDX-License-Identifier: GPL-2.0
/*
 * Boot image: loads an ELF64 x86-64 executable's PT_LOAD segments at their
 * physical addresses and writes what long mode needs below 1 MiB: a flat
 * GDT, page tables (2 MiB pages) that map guest-virtual addresses onto RAM
 * offsets across the 3-4 GiB hole, and the boot info with the command line
 * (layout in vmm/guest-abi.h).
 */
#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "vmm/guest-abi.h"
#include "vmm/util.h"
#include "vmm/x86.h"

#define PTE_P  0x1ULL
#define PTE_W  0x2ULL
#define PTE_PS 0x80ULL
#define PTE_U  0x4ULL

_Static_assert(GUEST_BOOTINFO_GPA + sizeof(struct guest_bootinfo) <= GUEST_PD_GPA &&
		   GUEST_PD_GPA + GUEST_PD_PAGES * PAGE_SIZE <= GUEST_LOW_END,
	       "boot info and page tables fit below the image");

static const uint64_t gdt[] = {
	0,
	0x00af9a000000ffffULL, /* 0x08: 64-bit code */
	0x00cf92000000ffffULL, /* 0x10: data */
	0x00affa000000ffffULL, /* 0x1b: 64-bit code, ring 3 */
	0x00cff2000000ffffULL, /* 0x23: data, ring 3 */
};

/*
 * Virtual = RAM offset: identity below GUEST_LOW_MEM_MAX, and when RAM goes
 * past it, virtual [3 GiB, ...) onto physical [4 GiB, ...).  At least 4 GiB
 * is mapped, as before the high region existed: a small guest's map is the
 * plain identity one.
 */
static void build_page_tables(uint8_t *mem, uint64_t mem_size)
{
	uint64_t *pml4 = (uint64_t *)(mem + GUEST_PML4_GPA);
	uint64_t *pdpt = (uint64_t *)(mem + GUEST_PDPT_GPA);
	uint64_t *pd = (uint64_t *)(mem + GUEST_PD_GPA);
	uint64_t gib = (mem_size + (1ULL << 30) - 1) >> 30;
	uint64_t shift = mem_size > GUEST_LOW_MEM_MAX ? GUEST_HIGH_GPA - GUEST_LOW_MEM_MAX : 0;

	if (gib < 4)
		gib = 4;
	memset(pml4, 0, PAGE_SIZE);
	pml4[0] = GUEST_PDPT_GPA | PTE_P | PTE_W | PTE_U;
	memset(pdpt, 0, PAGE_SIZE);
	for (uint64_t i = 0; i < gib; i++)
		pdpt[i] = (GUEST_PD_GPA + i * PAGE_SIZE) | PTE_P | PTE_W | PTE_U;
	for (uint64_t i = 0; i < gib * 512; i++) {
		uint64_t va = i << 21;
		uint64_t pa = va < GUEST_LOW_MEM_MAX ? va : va + shift;

		pd[i] = pa | PTE_P | PTE_W | PTE_PS | PTE_U;
	}
}

static void build_tables(uint8_t *mem, uint64_t mem_size, unsigned int nr_cpus, uint32_t tsc_khz,
			 const char *cmdline)
{
	struct guest_bootinfo *bi = (struct guest_bootinfo *)(mem + GUEST_BOOTINFO_GPA);

	memcpy(mem + GUEST_GDT_GPA, gdt, sizeof(gdt));
	build_page_tables(mem, mem_size);
	memset(bi, 0, sizeof(*bi));
	bi->magic = GUEST_BOOTINFO_MAGIC;
	bi->version = GUEST_BOOTINFO_VERSION;
	bi->mem_size = mem_size;
	bi->nr_cpus = nr_cpus;
	bi->tsc_khz = tsc_khz;
	strcpy(bi->cmdline, cmdline);
}

static int load_elf(uint8_t *mem, uint64_t mem_size, const uint8_t *img, size_t len,
		    uint64_t *entry, const char **why)
{
	const Elf64_Ehdr *eh = (const Elf64_Ehdr *)img;
	uint64_t low = guest_low_size(mem_size); /* physical = RAM offset there */
	int loaded = 0;

	if (len < sizeof(*eh) || memcmp(eh->e_ident, ELFMAG, SELFMAG)) {
		*why = "not an ELF file";
		return -ENOEXEC;
	}
	if (eh->e_ident[EI_CLASS] != ELFCLASS64 || eh->e_ident[EI_DATA] != ELFDATA2LSB ||
	    eh->e_machine != EM_X86_64) {
		*why = "not an ELF64 x86-64 image";
		return -ENOEXEC;
	}
	if (eh->e_type != ET_EXEC) {
		*why = "not an executable (ET_EXEC) image";
		return -ENOEXEC;
	}
	if (eh->e_phentsize != sizeof(Elf64_Phdr) || eh->e_phoff > len ||
	    (uint64_t)eh->e_phnum * sizeof(Elf64_Phdr) > len - eh->e_phoff) {
		*why = "program headers outside the file";
		return -ENOEXEC;
	}
	for (int i = 0; i < eh->e_phnum; i++) {
		const Elf64_Phdr *ph = (const Elf64_Phdr *)(img + eh->e_phoff) + i;

		if (ph->p_type != PT_LOAD || ph->p_memsz == 0)
			continue;
		if (ph->p_filesz > ph->p_memsz || ph->p_offset > len ||
		    ph->p_filesz > len - ph->p_offset) {
			*why = "segment outside the file";
			return -ENOEXEC;
		}
		if (ph->p_paddr < GUEST_LOW_END || ph->p_paddr > low ||
		    ph->p_memsz > low - ph->p_paddr) {
			*why = "segment does not fit in guest RAM between 1 MiB and 3 GiB";
			return -EFBIG;
		}
		memcpy(mem + ph->p_paddr, img + ph->p_offset, ph->p_filesz);
		memset(mem + ph->p_paddr + ph->p_filesz, 0, ph->p_memsz - ph->p_filesz);
		loaded++;
	}
	if (!loaded) {
		*why = "no loadable segment";
		return -ENOEXEC;
	}
	if (eh->e_entry < GUEST_LOW_END || eh->e_entry >= low) {
		*why = "entry point outside the image";
		return -ENOEXEC;
	}
	*entry = eh->e_entry;
	return 0;
}

int x86_boot_build(void *mem, uint64_t mem_size, unsigned int nr_cpus, uint32_t tsc_khz,
		   const char *path, const char *cmdline, uint64_t *entry, const char **why)
{
	struct stat st;
	uint8_t *img;
	int fd, r;

	*why = "";
	if (strlen(cmdline) >= GUEST_CMDLINE_MAX) {
		*why = "command line too long";
		return -E2BIG;
	}
	if (mem_size < 2 * GUEST_LOW_END) {
		*why = "guest RAM smaller than 2 MiB";
		return -EFBIG;
	}
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		*why = "cannot open the image";
		return -errno;
	}
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || st.st_size > 64 << 20) {
		*why = "image is not a regular file of at most 64 MiB";
		close(fd);
		return -ENOEXEC;
	}
	img = malloc(st.st_size ? (size_t)st.st_size : 1);
	if (!img) {
		close(fd);
		return -ENOMEM;
	}
	r = pread_full(fd, img, (size_t)st.st_size, 0);
	close(fd);
	if (r < 0)
		*why = "cannot read the image";
	else
		r = load_elf(mem, mem_size, img, (size_t)st.st_size, entry, why);
	free(img);
	if (r < 0)
		return r;
	build_tables(mem, mem_size, nr_cpus, tsc_khz, cmdline);
	return 0;
}
