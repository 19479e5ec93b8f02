# timeout: 300
# Two nodes on one link: node b listens on TCP, node a sends 4 MiB of random
# data; both print the data's sha256 and they must agree.
set -u
top=$(pwd)
port=$((47000 + RANDOM % 1000 * 2))
logs=build/tests/logs
b_cmd='nc -l -p 7000 > /tmp/rx; echo "sha-rx $(sha256sum < /tmp/rx | cut -c1-64) $(wc -c < /tmp/rx)"'
a_cmd='head -c 4194304 /dev/urandom > /tmp/tx;
for i in $(seq 1 100); do nc 10.77.0.2 7000 < /tmp/tx && break; sleep 0.2; done;
echo "sha-tx $(sha256sum < /tmp/tx | cut -c1-64) $(wc -c < /tmp/tx)"'
tests/node-launch --name link-b --link b --link-port "$port" --smp 1 --timeout 240 --quiet -- "$b_cmd" &
b=$!
tests/node-launch --name link-a --link a --link-port "$port" --smp 1 --timeout 240 --quiet -- "$a_cmd"
a_rc=$?
wait $b
b_rc=$?
tx=$(tr -d '\r' < build/nodes/link-a.log | sed -n 's/^sha-tx //p')
rx=$(tr -d '\r' < build/nodes/link-b.log | sed -n 's/^sha-rx //p')
echo "node a: rc $a_rc sent $tx"
echo "node b: rc $b_rc received $rx"
[ "$a_rc" = 0 ] && [ "$b_rc" = 0 ] || exit 1
[ -n "$tx" ] && [ "$tx" = "$rx" ] || { echo "data differs across the link"; exit 1; }
case "$tx" in *" 4194304") ;; *) echo "wrong size"; exit 1 ;; esac
