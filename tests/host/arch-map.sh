#!/usr/bin/env bash
# arch-map: docs/architecture.md is the map of the C code.  Every tracked
# .c and .h file (kernel-patches/ aside: they are patches to the kernel's
# own files) must appear in it by its path, so a new file is not added
# without its one-line job.  A path listed in the map that no longer exists
# fails too: the map must not lie.
set -uo pipefail
map=docs/architecture.md
[ -f "$map" ] || { echo "FAIL: $map missing"; exit 1; }
mapfile -t files < <(git ls-files '*.c' '*.h' | grep -v '^kernel-patches/')
[ ${#files[@]} -gt 20 ] || { echo "FAIL: only ${#files[@]} C files found: not a checkout?"; exit 1; }
missing=0
for f in "${files[@]}"; do
	# A path, or a file named beside its sibling (`spin.c`, `spin.h`) on the
	# same line.  (grep -c, not -q: under pipefail an early exit of the
	# second grep would fail the first with SIGPIPE.)
	if ! grep -qF "\`$f\`" "$map" &&
		[ "$(grep -F "\`${f%/*}/" "$map" | grep -cF "\`${f##*/}\`")" = 0 ]; then
		echo "  not in $map: $f"
		missing=$((missing + 1))
	fi
done
stale=0
while read -r p; do
	[ -e "$p" ] && continue
	echo "  in $map but not in the tree: $p"
	stale=$((stale + 1))
done < <(grep -o '`[A-Za-z0-9_./-]*\.[ch]`' "$map" | tr -d '`' | grep / | sort -u)
[ "$missing" = 0 ] || { echo "FAIL: $missing C files missing from $map (one line each: path and job)"; exit 1; }
[ "$stale" = 0 ] || { echo "FAIL: $stale paths in $map do not exist"; exit 1; }
echo "${#files[@]} C files on the map"
