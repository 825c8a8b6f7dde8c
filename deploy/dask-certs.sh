#!/bin/sh
# The certificates of ferry's Dask cluster (deploy/k8s): a CA of its own and one certificate it signs for both server
# and client use, which the scheduler, its workers and the flow runs all show (Dask checks the CA, not host names).
# Writes into DIR ca.crt, tls.crt and tls.key, the Secret's three files, and ca.key, which signs them: keep it out of
# the cluster. Then:
#   kubectl -n ferry create secret generic ferry-dask-tls \
#     --from-file=DIR/ca.crt --from-file=DIR/tls.crt --from-file=DIR/tls.key
set -eu
dir=${1:?usage: deploy/dask-certs.sh DIR [DAYS]}
days=${2:-365}
mkdir -p "$dir"
umask 077
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days "$days" -subj /CN=ferry-dask-ca \
  -keyout "$dir/ca.key" -out "$dir/ca.crt" 2>/dev/null
openssl req -new -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj /CN=ferry-dask \
  -keyout "$dir/tls.key" -out "$dir/tls.csr" 2>/dev/null
# Server and client use both: each end of a Dask connection is one or the other.
printf 'basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature\nextendedKeyUsage=serverAuth,clientAuth\n' \
  > "$dir/tls.ext"
openssl x509 -req -in "$dir/tls.csr" -CA "$dir/ca.crt" -CAkey "$dir/ca.key" -CAcreateserial -days "$days" \
  -extfile "$dir/tls.ext" -out "$dir/tls.crt" 2>/dev/null
rm -f "$dir/tls.csr" "$dir/tls.ext" "$dir/ca.srl"
