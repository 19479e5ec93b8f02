#!/usr/bin/env bash
# make-tls-creds.sh DIR HOST [DAYS]: a test CA and the x509 credentials of
# both migration ends, in QEMU's tls-creds-x509 layout (docs/security.md):
#   DIR/ca-cert.pem  DIR/ca-key.pem (keep the CA key elsewhere in real use)
#   DIR/server-cert.pem DIR/server-key.pem   for the destination (it listens)
#   DIR/client-cert.pem DIR/client-key.pem   for the source (it connects)
# The server certificate names HOST (a DNS name or an IP address); the
# client certificate names "migration-source".  ECDSA P-256, valid DAYS
# (default 365).  With CA_DIR set, signs with the CA already there instead
# of making one.
set -euo pipefail
[ $# -ge 2 ] || { echo "usage: $0 DIR HOST [DAYS]" >&2; exit 2; }
dir=$1 host=$2 days=${3:-365}
ca=${CA_DIR:-$dir}
mkdir -p "$dir"
umask 077

if [ ! -f "$ca/ca-key.pem" ]; then
	openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes \
		-keyout "$ca/ca-key.pem" -out "$ca/ca-cert.pem" -days "$days" \
		-subj "/CN=postcopy migration CA" 2> /dev/null
fi
[ "$ca" = "$dir" ] || cp "$ca/ca-cert.pem" "$dir/ca-cert.pem"

if [[ $host =~ ^[0-9.]+$ || $host == *:* ]]; then san="IP:$host"; else san="DNS:$host"; fi
issue() { # name subject-alt-name common-name
	openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes \
		-keyout "$dir/$1-key.pem" -out "$dir/$1.csr" -subj "/CN=$3" 2> /dev/null
	openssl x509 -req -in "$dir/$1.csr" -CA "$ca/ca-cert.pem" -CAkey "$ca/ca-key.pem" \
		-CAcreateserial -days "$days" -out "$dir/$1-cert.pem" \
		-extfile <(printf 'subjectAltName=%s\n' "$2") 2> /dev/null
	rm -f "$dir/$1.csr"
}
issue server "$san" "$host"
issue client "DNS:migration-source" migration-source
chmod 0644 "$dir"/*-cert.pem
echo "make-tls-creds: $dir: CA, server (for $host) and client credentials, valid $days days"
