# kernel-checkpatch: every patch of the series is clean under the 6.1 tree's
# own scripts/checkpatch.pl --strict (0 errors, 0 warnings, 0 checks), is a
# git format-patch file with a Signed-off-by, and is listed in the series.
# timeout: 120
set -uo pipefail
fail() { echo "FAIL: $*"; exit 1; }
tarball=/usr/src/linux-source-6.1.tar.xz
[ -r "$tarball" ] || fail "$tarball missing (make deps)"
dir=build/checkpatch
if [ ! -x "$dir/linux-source-6.1/scripts/checkpatch.pl" ]; then
	mkdir -p "$dir"
	tar -xJf "$tarball" -C "$dir" linux-source-6.1/scripts/checkpatch.pl \
		linux-source-6.1/scripts/spelling.txt linux-source-6.1/scripts/const_structs.checkpatch ||
		fail "cannot extract checkpatch.pl from $tarball"
fi
checkpatch=$dir/linux-source-6.1/scripts/checkpatch.pl

mapfile -t series < <(sed -e 's/#.*//' -e '/^[[:space:]]*$/d' kernel-patches/series)
[ ${#series[@]} -ge 4 ] || fail "the series lists ${#series[@]} patches, want at least 4"
for p in kernel-patches/*.patch; do
	printf '%s\n' "${series[@]}" | grep -qx "$(basename "$p")" || fail "$p is not in the series"
done
for name in "${series[@]}"; do
	p=kernel-patches/$name
	head -n1 "$p" | grep -qE '^From [0-9a-f]{40} ' || fail "$name is not git format-patch output"
	grep -q '^Signed-off-by: ' "$p" || fail "$name has no Signed-off-by"
	# On standard input: given the path of a file git tracks, checkpatch
	# would check the patch file as a source file.
	out=$(perl "$checkpatch" --strict --no-tree --show-types - < "$p" 2>&1)
	summary=$(printf '%s\n' "$out" | grep -E '^total:')
	echo "$name: $summary"
	case "$summary" in
	"total: 0 errors, 0 warnings, 0 checks,"*) ;;
	*) echo "$out"; fail "$name is not checkpatch --strict clean" ;;
	esac
done
echo "all ${#series[@]} patches clean"
