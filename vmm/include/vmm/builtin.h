/* SPDX-License-Identifier: GPL-2.0 */
/* The vmm subcommands (one file each), behind the table in vmm/main.c. */
#ifndef VMM_BUILTIN_H
#define VMM_BUILTIN_H

#include <stdbool.h>

#include "vmm/exit-codes.h" /* what the commands return */

/* True if an argument is --help or -h: print usage to stdout, exit 0. */
bool builtin_wants_help(int argc, char **argv);

int cmd_run(int argc, char **argv);
int cmd_restore(int argc, char **argv);
int cmd_probe(int argc, char **argv);

#endif /* VMM_BUILTIN_H */
