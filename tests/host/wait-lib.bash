# Waiting on progress in the host tests (sourced by kvm-lib.bash, so by
# every test that sources a library; not a test).  Each wait is a hang
# guard (guard, kvm-lib.bash: scaled by the runner's time scale), never a
# speed limit; a process that outlives one is described before the test
# fails (proc_report), since what it was doing is the only clue to a hang
# seen once.  Needs the caller's fail().
#
# A guard is measured on the clock (bash's SECONDS), not by counting
# sleeps: on a loaded node each turn of a loop costs several times its
# sleep (a fork for the sleep, the check), so a counted 240 s guard ran
# past the runner's 600 s limit and the hang it guarded was never
# described.

# proc_report PID: each thread of the process as the kernel sees it: its
# name, state, wait channel and kernel stack (when readable: root).
proc_report() { # pid
	local t stat
	for t in /proc/"$1"/task/*; do
		[ -r "$t/stat" ] || continue
		stat=$(sed 's/.*) //' "$t/stat" 2> /dev/null)
		echo "  thread ${t##*/} ($(cat "$t/comm" 2> /dev/null)): state ${stat%% *}, wchan $(cat "$t/wchan" 2> /dev/null)"
		sed 's/^/    /' "$t/stack" 2> /dev/null
	done
}

# wait_until WHAT SECONDS PID LOG COMMAND...: run COMMAND until it
# succeeds, with a hang guard of SECONDS (times the runner's time scale:
# guard), never a speed limit.  With a PID, fail at once if that process
# exits first (its last word counted: COMMAND runs once more), printing
# LOG (what it said), e.g. a VMM whose guest ended (a triple fault, in a
# node: docs/testing.md).  LOG is printed on a timeout too.
wait_until() { # what seconds pid log command...
	local what=$1 pid=$3 log=$4 secs end
	secs=$(guard "$2")
	end=$((SECONDS + secs))
	shift 4
	until "$@"; do
		if [ -n "$pid" ] && ! kill -0 "$pid" 2> /dev/null; then
			"$@" && return 0
			[ -z "$log" ] || cat "$log" >&2
			fail "$what: the process (pid $pid) exited first"
		fi
		if [ "$SECONDS" -ge "$end" ]; then
			[ -z "$log" ] || cat "$log" >&2
			fail "$what: not there after $secs s (a hang guard)"
		fi
		sleep 0.05
	done
}

# Wait until FILE has a line matching REGEX (grep's); with a pid, fail at
# once if that process exits first.  FILE is printed on a failure.
wait_line() { # file regex what [pid [guard-seconds]]
	wait_until "$3: /$2/ in $(basename "$1")" "${5:-60}" "${4:-}" "$1" grep -qs -- "$2" "$1"
}

# The exit status of a background process, or fail when it outlives the
# hang guard (generous: nothing here waits on the machine's speed), after
# printing LOG (what it said) and its threads (proc_report), and killing it.
wait_status() { # pid what [guard-seconds [log]]
	local secs end
	secs=$(guard "${3:-60}")
	end=$((SECONDS + secs))
	while kill -0 "$1" 2> /dev/null; do
		if [ "$SECONDS" -ge "$end" ]; then
			[ -z "${4:-}" ] || cat "$4" >&2
			echo "$2: pid $1 after $secs s:" >&2
			proc_report "$1" >&2
			kill -KILL "$1" 2> /dev/null
			fail "$2: still running after $secs s (a hang)"
		fi
		sleep 0.1
	done
	wait "$1"
}
