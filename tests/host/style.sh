# style: the project's user-space C follows the root .clang-format (kernel
# patches follow checkpatch instead: tests/host/kernel-checkpatch.sh).
set -uo pipefail
command -v clang-format > /dev/null || { echo "FAIL: clang-format missing (make deps)"; exit 1; }
mapfile -t files < <(git ls-files '*.c' '*.h' | grep -v '^kernel-patches/')
[ ${#files[@]} -gt 20 ] || { echo "FAIL: only ${#files[@]} C files found: not a checkout?"; exit 1; }
if ! clang-format --dry-run --Werror "${files[@]}" > /tmp/style.$$ 2>&1; then
	grep -o '^[^:]*\.[ch]' /tmp/style.$$ | sort | uniq -c | sed 's/^/  not formatted: /'
	rm -f /tmp/style.$$
	echo "FAIL: run 'make format'"
	exit 1
fi
rm -f /tmp/style.$$
echo "${#files[@]} C files formatted"
