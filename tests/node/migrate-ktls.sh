#!/bin/sh
# migrate-ktls: the agent's kernel-TLS path, inside a node.  The node
# kernel has CONFIG_TLS (kernel-patches/config); the host offers no `tls`
# ULP and may load no module, so this is the one place the path runs.
# OpenSSL 3.0 hands the kernel the send keys of TLS 1.3 (not the receive
# keys: 3.2 added those), so every send below is sealed by the kernel and
# every receive opened by OpenSSL.
#  1. mig-tls-check, PSK: both ends say "kTLS send yes", with mixed sizes
#     (record boundaries everywhere; one socket write per send, the kernel
#     cutting the records), then with a 4 KiB socket buffer and a
#     late receiver, so that the kernel's sends stop inside a batch and go
#     on where they stopped ("send waits" > 0); CRC32C equal both ways.
#  2. A postcopy migration over TLS (mig-memtest, PSK): the metrics of both
#     ends say ktls_send, and the destination's checksum is the source's.
#  3. The same across a link reset by mig-cutproxy: the recovery's new
#     sessions are kTLS again, and the checksum is right.
#  4. MIG_NO_KTLS in the same node: user-space records, the fallback named.
# timeout: 400
tmp=/tmp/migrate-ktls
rm -rf "$tmp"
mkdir -p "$tmp"
scale=${POSTCOPY_TIME_SCALE:-1}
fail() { echo "FAIL: $*" >&2; exit 1; }
show_fail() { # file... then the message
	while [ $# -gt 1 ]; do cat "$1" >&2; shift; done
	fail "$1"
}

grep -qw tls /proc/sys/net/ipv4/tcp_available_ulp ||
	fail "the node kernel offers no tls ULP ($(cat /proc/sys/net/ipv4/tcp_available_ulp)): CONFIG_TLS missing"
umask 077
printf 'qemu:%s\n' "$(head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n')" > "$tmp/keys.psk"
psk="$tmp/keys.psk"

stream() { # description bytes args...
	what=$1 bytes=$2
	shift 2
	timeout $((240 * scale)) mig-tls-check --bytes "$bytes" --server-psk "$psk" --client-psk "$psk" "$@" \
		> "$tmp/out" 2>&1 || show_fail "$tmp/out" "$what: failed"
	[ "$(grep -c "ok: $bytes bytes each way over TLS 1.3" "$tmp/out")" = 2 ] ||
		show_fail "$tmp/out" "$what: not both ends ok"
	[ "$(grep -c 'kTLS send yes receive ' "$tmp/out")" = 2 ] ||
		show_fail "$tmp/out" "$what: the kernel did not take both ends' sends"
	echo "ok: $what: $(tr '\n' ' ' < "$tmp/out")"
}

stream "kTLS, mixed sizes" 20000000 --mixed
# The kernel takes each send whole (one send() per call, records cut by the
# kernel), not one system call per 16 KiB record as through SSL_write_ex():
# fewer writes than the stream has records (20 MB / 16 KiB = 1221).
for w in $(sed -n 's/.*TLS_[A-Z0-9_]*, \([0-9]*\) socket writes,.*/\1/p' "$tmp/out"); do
	[ "$w" -lt 1221 ] || show_fail "$tmp/out" "kTLS: $w socket writes for 1221 records: sent record by record"
done
stream "kTLS, mixed sizes, the socket full" 8000000 --mixed --sndbuf 4096
waits=$(sed -n 's/.*, \([0-9]*\) send waits,.*/\1/p' "$tmp/out" | sort -n | tail -n 1)
[ "${waits:-0}" -gt 0 ] || show_fail "$tmp/out" "--sndbuf 4096: no kTLS send ever waited for the socket"
stream "kTLS, 256 KiB sends, the socket full" 8000000 --sndbuf 4096

# A migration of SIZE through PROXY_PORT (or straight) with both ends' args.
# Each end's metrics and stderr in $tmp/NAME-{s,d}.{json,err}.
port=7310
migrate() { # name mem [via-proxy-args] -- [args for both ends...]
	name=$1 mem=$2
	shift 2
	port=$((port + 2))
	dport=$port to=$port
	mig-memtest dest --listen "tcp:127.0.0.1:$dport" --mem "$mem" --metrics "$tmp/$name-d.json" \
		"$@" > /dev/null 2> "$tmp/$name-d.err" &
	dpid=$!
	wait-listen "$dport" "$dpid" 2>> "$tmp/$name-d.err" || show_fail "$tmp/$name-d.err" "$name: the destination never listened"
	ppid=
	if [ -n "${cut:-}" ]; then
		to=$((port + 1))
		mig-cutproxy --listen "tcp:127.0.0.1:$to" --to "tcp:127.0.0.1:$dport" $cut 2> "$tmp/$name-p.err" &
		ppid=$!
		wait-listen "$to" "$ppid" 2>> "$tmp/$name-p.err" || show_fail "$tmp/$name-p.err" "$name: the proxy never listened"
	fi
	timeout $((200 * scale)) mig-memtest source --to "tcp:127.0.0.1:$to" --mem "$mem" \
		--metrics "$tmp/$name-s.json" "$@" > /dev/null 2> "$tmp/$name-s.err" ||
		show_fail "$tmp/$name-s.err" "$tmp/$name-d.err" "$name: source failed"
	wait "$dpid" || show_fail "$tmp/$name-d.err" "$name: destination failed"
	[ -z "$ppid" ] || kill "$ppid" 2> /dev/null
	grep -q "checksum ok" "$tmp/$name-d.err" || show_fail "$tmp/$name-d.err" "$name: no good checksum"
}

# The metrics' "tls" member of both ends: at least MIN sessions, every
# one's sends in the kernel (ktls_send is true only when all were).
ktls_in_metrics() { # name min-sessions
	for side in s d; do
		f=$tmp/$1-$side.json
		n=$(sed -n 's/.*"sessions": \([0-9]*\), "ktls_send": true, "ktls_recv": false.*/\1/p' "$f")
		[ -n "$n" ] && [ "$n" -ge "$2" ] ||
			show_fail "$f" "$1 ($side): not $2 or more sessions, all with kTLS sends"
	done
}

migrate ktls 32M --tls-psk "$psk"
ktls_in_metrics ktls 2
echo "ok: migration over kTLS: $(grep -h 'checksum ok' "$tmp/ktls-d.err")"

cut="--cut-after 6000000 --down-ms 300" migrate ktls-cut 24M --tls-psk "$psk"
cut=
grep -q "cut 1" "$tmp/ktls-cut-p.err" || show_fail "$tmp/ktls-cut-p.err" "ktls-cut: the proxy never cut the link"
grep -q '"recoveries": 1' "$tmp/ktls-cut-s.json" || show_fail "$tmp/ktls-cut-s.json" "ktls-cut: no recovery counted"
ktls_in_metrics ktls-cut 4 # the first two, and the recovery's two
echo "ok: a link reset under kTLS, recovered over new kTLS sessions"

MIG_NO_KTLS=1 migrate noktls 16M --tls-psk "$psk"
for side in s d; do
	grep -q '"ktls_send": false, "ktls_recv": false, "fallback": "disabled by MIG_NO_KTLS"' \
		"$tmp/noktls-$side.json" || show_fail "$tmp/noktls-$side.json" "MIG_NO_KTLS ($side): not named"
done
echo "ok: MIG_NO_KTLS in the same node: user-space records, checksum ok"
