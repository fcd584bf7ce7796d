#!/bin/sh
# Makes a CA and one server certificate per node, plus an operator's client
# certificate, with `leasehold tls`. Run it once, on a trusted machine:
#
#   deploy/make-certs.sh prod /etc/leasehold/tls node-1=10.0.0.1 node-2=10.0.0.2 node-3=10.0.0.3
#
# then copy to each node its own server certificate and key and the CA
# certificate (never the CA key), mode 0600, owned by the service user.
# docs/security.md explains the configuration that uses them.
set -eu
if [ $# -lt 3 ]; then
	echo "usage: $0 CLUSTER DIR NODE_ID=IP [NODE_ID=IP ...]" >&2
	exit 2
fi
cluster=$1 dir=$2
shift 2
leasehold=${LEASEHOLD:-leasehold}
umask 077
mkdir -p "$dir"
[ -f "$dir/$cluster-ca.pem" ] || "$leasehold" tls ca create --cluster "$cluster" --dir "$dir"
for spec in "$@"; do
	node=${spec%%=*} ip=${spec#*=}
	"$leasehold" tls cert create --server --cluster "$cluster" --node "$node" --ip "$ip" --dir "$dir"
done
"$leasehold" tls cert create --client --cluster "$cluster" --name ops --dir "$dir"
