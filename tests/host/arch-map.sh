#!/usr/bin/env bash
# arch-map: docs/architecture.md is the map of the C code, and this checks
# it rather than grepping it:
#   - every tracked .c and .h file (kernel-patches/ aside: they are patches
#     to the kernel's own files) has a row in "The map" section: the first
#     cell of a table row names it (`dir/a.c`, or `dir/a.c`, `a.h` for a
#     sibling), so a new file is not added without its one-line job;
#   - every file a row names there exists, and so does every other `*.c` or
#     `*.h` path the document mentions: the map must not lie;
#   - every `#include "..."` runs the stated direction: the header it names
#     (looked up as the compiler does: beside the file, then the -I
#     folders) lies under a prefix that the "Include direction" table
#     allows for the file's folder (the row of the longest prefix);
#   - inside each part of "Layers inside a part" calls run downwards only
#     (tests/host/lib/layers.py): no circle of files inside a part.
set -uo pipefail
map=docs/architecture.md
[ -f "$map" ] || { echo "FAIL: $map missing"; exit 1; }
mapfile -t files < <(git ls-files '*.c' '*.h' | grep -v '^kernel-patches/')
[ ${#files[@]} -gt 20 ] || { echo "FAIL: only ${#files[@]} C files found: not a checkout?"; exit 1; }

# The lines of one "## " section of the map.
section() { # heading
	awk -v h="## $1" '/^## / { on = ($0 == h) } on' "$map"
}

# Rows of "The map": the paths in each row's first cell, one a line.
declare -A row=()
while read -r p; do
	row[$p]=1
done < <(section "The map: every C file and its one job" | awk -F'|' '
	/^\|/ && $2 ~ /`/ {
		n = split($2, parts, "`"); dir = ""
		for (i = 2; i <= n; i += 2) {
			p = parts[i]
			if (p !~ /\.[ch]$/) continue
			if (p ~ /\//) { d = p; sub(/\/[^\/]*$/, "", d); if (dir == "") dir = d }
			else if (dir != "") p = dir "/" p
			print p
		}
	}')
missing=0
for f in "${files[@]}"; do
	[ -n "${row[$f]:-}" ] && continue
	echo "  no row in $map: $f"
	missing=$((missing + 1))
done
stale=0
while read -r p; do
	[ -e "$p" ] && continue
	echo "  in $map but not in the tree: $p"
	stale=$((stale + 1))
done < <({ printf '%s\n' "${!row[@]}"; grep -o '`[A-Za-z0-9_./-]*\.[ch]`' "$map" | tr -d '`' | grep /; } | sort -u)

# The include table: "| `prefix` | `allowed` `allowed` ... |".
declare -A allow=()
while IFS=$'\t' read -r prefix allowed; do
	allow[$prefix]=$allowed
done < <(section "Include direction" | awk -F'|' '
	/^\| `/ { p = $2; a = $3; gsub(/[` ]/, "", p); gsub(/`/, "", a); gsub(/^ +| +$/, "", a); print p "\t" a }')
[ ${#allow[@]} -gt 3 ] || { echo "FAIL: no include table in $map (section Include direction)"; exit 1; }

# The -I folders, in the build's order (Makefile, */build.mk, the fuzzers').
# Lookups set globals rather than print, so that the loop forks no subshell
# per include.
incdirs=(include migrate-agent/include vmm/include migrate-agent)
resolve() { # file header: the header's path in $found, "" if none
	local c p
	found=
	p=${1%/*}/$2
	while [[ "$p" == *[!.]/../* ]]; do # a/b/../c -> a/c (only "../" is used)
		p=$(sed 's|[^/]*/\.\./||' <<< "$p")
	done
	[ -f "$p" ] && { found=$p; return; }
	for c in "${incdirs[@]}"; do
		[ -f "$c/$2" ] && { found=$c/$2; return; }
	done
}
rule_of() { # file: the longest prefix of the table that matches it, in $rule
	local p
	rule=
	for p in "${!allow[@]}"; do
		[[ "$1" == "$p"* ]] && [ ${#p} -gt ${#rule} ] && rule=$p
	done
}
against=0
for f in "${files[@]}"; do
	rule_of "$f"
	if [ -z "$rule" ]; then
		echo "  $f: its folder has no row in the include table"
		against=$((against + 1))
		continue
	fi
	while read -r h; do
		resolve "$f" "$h"
		if [ -z "$found" ]; then
			echo "  $f: #include \"$h\" is no file of the tree"
			against=$((against + 1))
			continue
		fi
		ok=0
		for a in ${allow[$rule]}; do
			[[ "$found" == "$a"* ]] && { ok=1; break; }
		done
		[ "$ok" = 1 ] && continue
		echo "  $f: #include \"$h\" ($found) runs against the direction ($rule may include: ${allow[$rule]})"
		against=$((against + 1))
	done < <(grep -h '^[[:space:]]*#[[:space:]]*include[[:space:]]*"' "$f" | cut -d'"' -f2)
done

[ "$missing" = 0 ] || { echo "FAIL: $missing C files have no row in $map (one row each: path and job)"; exit 1; }
[ "$stale" = 0 ] || { echo "FAIL: $stale paths in $map do not exist"; exit 1; }
[ "$against" = 0 ] || { echo "FAIL: $against includes against the direction in $map"; exit 1; }
python3 tests/host/lib/layers.py "$map" || exit 1
echo "${#files[@]} C files on the map, their includes in the stated direction"
