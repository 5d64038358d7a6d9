#!/bin/sh
# Certificates for the TLS tests, made with the very commands of
# docs/security.md ("TLS between hosts"): in DIR, a cluster CA (ca.crt,
# ca.key) and a certificate it signs for "node" (node.crt, node.key; every
# task and client of the tests uses it), another CA (other-ca.*) with a
# certificate of its own (rogue.*), and one of the cluster CA for TLS servers
# only (serveronly.*: extendedKeyUsage serverAuth, which a task cannot use).
#   tls_certs.sh DIR
set -eu
dir=$1
cd "$dir"
# the v3 extensions of a task's or client's certificate
cat > cert.ext <<'EXT'
basicConstraints = critical, CA:FALSE
keyUsage = critical, digitalSignature
extendedKeyUsage = serverAuth, clientAuth
EXT
ca() { # NAME: a self-signed CA
  openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -noenc -days 3650 \
    -subj "/CN=graphrun test $1" -keyout "$1.key" -out "$1.crt" 2>/dev/null
}
cert() { # NAME CA EXTFILE: a key and a certificate CA signs
  openssl req -new -newkey ec -pkeyopt ec_paramgen_curve:P-256 -noenc -subj "/CN=$1" \
    -keyout "$1.key" -out "$1.csr" 2>/dev/null
  openssl x509 -req -in "$1.csr" -CA "$2.crt" -CAkey "$2.key" -CAcreateserial -days 825 \
    -extfile "$3" -out "$1.crt" 2>/dev/null
  chmod 600 "$1.key"
}
ca ca
ca other-ca
cert node ca cert.ext
cert rogue other-ca cert.ext
printf 'extendedKeyUsage = serverAuth\n' > server.ext
cert serveronly ca server.ext
