// SPDX-License-Identifier: GPL-2.0
/*
 * SIGINT/SIGTERM while the destination waits for its source and its state
 * (before runner_loop() watches signals): give the migration up cleanly.
 * The signals are blocked in every thread (vmm run blocks them first), so
 * they wait for this signalfd; stop_fd ends the watch when the state
 * arrived.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include "glue.h"

struct incoming_signals {
	struct migrate_glue *gl;
	pthread_t thread;
	int stop_fd[2];
	unsigned signo; /* the signal that stopped the migration, 0 if none */
};

static void *incoming_signal_thread(void *arg)
{
	struct incoming_signals *is = arg;
	struct migrate_glue *gl = is->gl;
	sigset_t set;
	sigemptyset(&set);
	sigaddset(&set, SIGINT);
	sigaddset(&set, SIGTERM);
	int sfd = signalfd(-1, &set, SFD_CLOEXEC);
	struct pollfd p[2] = { { .fd = sfd, .events = POLLIN },
			       { .fd = is->stop_fd[0], .events = POLLIN } };
	while (sfd >= 0 && poll(p, 2, -1) < 0 && errno == EINTR)
		;
	struct signalfd_siginfo si;
	if (sfd >= 0 && (p[0].revents & POLLIN) && read(sfd, &si, sizeof(si)) == sizeof(si)) {
		char why[96];
		struct mig_dest *dest;

		snprintf(why, sizeof(why), "stopped by signal %u before the migration completed",
			 si.ssi_signo);
		is->signo = si.ssi_signo;
		/* Before there is a listener (--incoming defer): end the wait for one. */
		pthread_mutex_lock(&gl->lock);
		gl->incoming_signo = (int)si.ssi_signo;
		dest = gl->dest;
		pthread_cond_broadcast(&gl->cond);
		pthread_mutex_unlock(&gl->lock);
		if (dest)
			mig_dest_abort(dest, why);
	}
	if (sfd >= 0)
		close(sfd);
	return NULL;
}

static int watch_incoming_signals(struct incoming_signals *is)
{
	is->signo = 0;
	if (pipe2(is->stop_fd, O_CLOEXEC))
		return -errno;
	int r = pthread_create(&is->thread, NULL, incoming_signal_thread, is);
	if (r) {
		close(is->stop_fd[0]);
		close(is->stop_fd[1]);
		return -r;
	}
	return 0;
}

static void unwatch_incoming_signals(struct incoming_signals *is)
{
	if (write(is->stop_fd[1], "", 1) < 0)
		pr_vmm("cannot stop the signal watch: %s\n", strerror(errno));
	pthread_join(is->thread, NULL);
	close(is->stop_fd[0]);
	close(is->stop_fd[1]);
	free(is);
}

int glue_watch_signals(struct migrate_glue *gl)
{
	struct incoming_signals *is = calloc(1, sizeof(*is));
	int r = is ? 0 : -ENOMEM;

	if (is) {
		is->gl = gl;
		r = watch_incoming_signals(is);
	}
	if (r) {
		free(is);
		pr_vmm("cannot watch for signals: %s\n", strerror(-r));
		return r;
	}
	gl->sig = is;
	return 0;
}

/* After the vCPUs run (the join waits for a thread's wake-up: not in the downtime). */
void glue_stop_signal_watch(struct migrate_glue *gl)
{
	if (gl->sig)
		unwatch_incoming_signals(gl->sig);
	gl->sig = NULL;
}
