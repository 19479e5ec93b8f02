// SPDX-License-Identifier: GPL-2.0
/*
 * vmm: a minimal KVM virtual machine monitor whose guest RAM can be served
 * by user-space page faults.  `vmm help` lists the commands.
 */
#include <signal.h>
#include <stdio.h>
#include <string.h>

#include "vmm/builtin.h"

struct command {
	const char *name;
	int (*fn)(int argc, char **argv);
	const char *help;
};

static int cmd_help(int argc, char **argv);
static int cmd_version(int argc, char **argv);

static const struct command commands[] = {
	{ "run", cmd_run, "boot a guest image (--lazy: RAM served by page faults)" },
	{ "restore", cmd_restore, "continue a snapshot written by run --save-after" },
	{ "probe", cmd_probe, "show KVM and the RAM back ends this kernel supports" },
	{ "help", cmd_help, "this list (also --help)" },
	{ "version", cmd_version, "the build's git describe (also --version)" },
};

#ifndef BUILD_VERSION
#define BUILD_VERSION "unknown" /* the Makefile passes git describe */
#endif

static int cmd_version(int argc, char **argv)
{
	printf("vmm %s\n", BUILD_VERSION);
	return 0;
}

static int cmd_help(int argc, char **argv)
{
	printf("usage: vmm COMMAND [ARGS]   (vmm COMMAND --help: its options)\n\n");
	for (size_t i = 0; i < sizeof(commands) / sizeof(commands[0]); i++)
		printf("  %-8s %s\n", commands[i].name, commands[i].help);
	printf("\nsee docs/vmm.md\n");
	return 0;
}

int main(int argc, char **argv)
{
	/* A peer that went away is an error return (EPIPE), never our death. */
	signal(SIGPIPE, SIG_IGN);
	if (argc < 2) {
		cmd_help(argc, argv);
		return VMM_EXIT_USAGE;
	}
	if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"))
		return cmd_help(argc, argv);
	if (!strcmp(argv[1], "--version"))
		return cmd_version(argc, argv);
	for (size_t i = 0; i < sizeof(commands) / sizeof(commands[0]); i++)
		if (!strcmp(argv[1], commands[i].name))
			return commands[i].fn(argc - 1, argv + 1);
	fprintf(stderr, "vmm: unknown command '%s' (try 'vmm help')\n", argv[1]);
	return VMM_EXIT_USAGE;
}
