#!/usr/bin/env bash
# cli-help: help and version of both programs.  vmm --help, -h and help
# print the command list to stdout and exit 0; vmm run|restore|probe --help
# print that command's usage to stdout with nothing on stderr, exit 0, but
# only from an option's place: `vmm run --cmdline -h` gives the guest -h
# (it printed vmm's help before);
# vmm --version, vmm version and migrate-agent --version print the build's
# git describe (the same string for both programs, and in a git tree the
# tree's own describe).
# timeout: 60
. tests/host/plain-lib.bash
[ -x "$BIN/vmm" ] || fail "$BIN/vmm not built"
[ -x "$BIN/migrate-agent" ] || fail "$BIN/migrate-agent not built"

expect_out() { # regex program args...: exit 0, stdout matches, stderr empty
	local re=$1 prog=$2
	shift 2
	"$BIN/$prog" "$@" > "$tmp/out" 2> "$tmp/err"
	local rc=$?
	[ $rc -eq 0 ] || { cat "$tmp/err" >&2; fail "$prog $*: exit $rc, want 0"; }
	[ -s "$tmp/err" ] && { cat "$tmp/err" >&2; fail "$prog $*: wrote to stderr"; }
	grep -Eq -- "$re" "$tmp/out" || { cat "$tmp/out" >&2; fail "$prog $*: stdout does not match '$re'"; }
	echo "ok: $prog $* -> $(head -n1 "$tmp/out")"
}

for a in --help -h help; do
	expect_out '^usage: vmm COMMAND' vmm $a
	grep -q '^  restore ' "$tmp/out" || fail "vmm $a: no restore line"
	grep -q '^  version ' "$tmp/out" || fail "vmm $a: no version line"
done
expect_out '^usage: vmm run --image FILE' vmm run --help
grep -q -- '--migrate-to' "$tmp/out" || fail "vmm run --help: no migration options"
expect_out '^usage: vmm run --image FILE' vmm run -h
expect_out '^usage: vmm run --image FILE' vmm run --mem 32M --cmdline -h --help
# An option's value is not an option: -h as --cmdline's value is the
# guest's, so this is a run without --image (a usage error), not help.
"$BIN/vmm" run --cmdline -h > "$tmp/out" 2> "$tmp/err"
rc=$?
[ $rc -eq 64 ] || { cat "$tmp/out" "$tmp/err" >&2; fail "vmm run --cmdline -h: exit $rc, want 64 (no --image)"; }
[ -s "$tmp/out" ] && { cat "$tmp/out" >&2; fail "vmm run --cmdline -h: printed help, -h is --cmdline's value"; }
grep -q -- '--image is required' "$tmp/err" || { cat "$tmp/err" >&2; fail "vmm run --cmdline -h: no '--image is required'"; }
echo "ok: vmm run --cmdline -h -> $(head -n1 "$tmp/err")"
expect_out '^usage: vmm restore FILE' vmm restore --help
expect_out '^usage: vmm probe' vmm probe --help

# Version: one non-empty word after the program's name.
expect_out '^vmm [^ ]+$' vmm --version
v=$(cut -d' ' -f2 "$tmp/out")
expect_out "^vmm $v\$" vmm version
expect_out "^migrate-agent $v\$" migrate-agent --version
if want=$(git describe --always --dirty 2>/dev/null); then
	# A commit of this repository; the tree may have moved on since the
	# build (then only a note: tests/run does not rebuild).
	git cat-file -e "${v%-dirty}^{commit}" 2> /dev/null ||
		fail "version '$v' is not a commit of this repository (git describe: $want)"
	[ "$v" = "$want" ] && echo "ok: version $v is this tree's git describe" ||
		echo "ok: version $v is a commit here; note: the tree is now $want (stale build)"
else
	[ "$v" = unknown ] || echo "note: not in a git tree; the build says $v"
fi

# Usage errors still go to stderr, with the VMM's usage status (64, EX_USAGE).
"$BIN/vmm" run --bogus > "$tmp/out" 2> "$tmp/err"
[ $? -eq 64 ] || fail "vmm run --bogus: want exit 64"
grep -q '^usage: vmm run' "$tmp/err" || fail "vmm run --bogus: no usage on stderr"
# migrate-agent: -h and --help from any command's place (they exited 2).
for args in "-h" "--help" "help" "migrate -h" "migrate --help" "migrate --vmm x --to y -h" \
	"status -h" "cancel --help" "start-postcopy -h"; do
	# shellcheck disable=SC2086
	expect_out '^usage: migrate-agent migrate' migrate-agent $args
done

# Every flag a parser takes is in its help: the flags are read from the
# parsers' own string literals, so a flag added without a help line fails
# here (vmm run --help once omitted six: TLS, --max-bandwidth,
# --postcopy-manual, --channels).
flags_in() { grep -ho '"--[a-z][a-z-]*"' "$@" | tr -d '"' | grep -vx -- '--help\|--version' | sort -u; }
"$BIN/vmm" run --help > "$tmp/vmm-help"
for f in $(flags_in vmm/builtin-run.c vmm/runner.c vmm/migrate/options.c migrate-agent/params.c); do
	grep -q -- "$f\b" "$tmp/vmm-help" || fail "vmm run --help does not list $f"
done
"$BIN/migrate-agent" --help > "$tmp/agent-help"
for f in $(flags_in migrate-agent/cli.c migrate-agent/params.c); do
	grep -q -- "$f\b" "$tmp/agent-help" || fail "migrate-agent --help does not list $f"
done
echo "ok: every flag the parsers take is in vmm run --help and migrate-agent --help"

echo "cli-help: help and version work"
