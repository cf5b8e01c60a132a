#!/usr/bin/env bash
# Starts MinIO on loopback with a demo bucket, then Portico in front of it, in the
# foreground. Ctrl-C stops Portico, then MinIO. State lives in target/demo.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
minio=${PORTICO_MINIO:?set PORTICO_MINIO to the MinIO binary (make run does this)}
portico="$root/target/debug/portico"
state="$root/target/demo"
minio_port=${DEMO_MINIO_PORT:-9000}
s3_port=${DEMO_S3_PORT:-8080}
admin_port=${DEMO_ADMIN_PORT:-9090}
user=portico-demo
secret=portico-demo-secret
# The credential clients sign their requests to Portico with (auth.mode = "sigv4").
client_key=demo-client
client_secret=demo-client-secret

port_busy() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
for port in "$minio_port" "$s3_port" "$admin_port"; do
  if port_busy "$port"; then
    echo "port $port on 127.0.0.1 is in use; set DEMO_MINIO_PORT, DEMO_S3_PORT or DEMO_ADMIN_PORT" >&2
    exit 1
  fi
done

mkdir -p "$state/minio" "$state/cache"
MINIO_ROOT_USER=$user MINIO_ROOT_PASSWORD=$secret MINIO_BROWSER=off \
  "$minio" server "$state/minio" --address "127.0.0.1:$minio_port" --quiet >"$state/minio.log" 2>&1 &
minio_pid=$!
trap 'kill "$minio_pid" 2>/dev/null; wait "$minio_pid" 2>/dev/null || true' EXIT

for _ in $(seq 1 100); do
  curl -fs "http://127.0.0.1:$minio_port/minio/health/ready" >/dev/null && break
  sleep 0.1
done
curl -fs "http://127.0.0.1:$minio_port/minio/health/ready" >/dev/null \
  || { echo "MinIO did not start; see $state/minio.log" >&2; exit 1; }

s3() { curl -fsS -o /dev/null --aws-sigv4 "aws:amz:us-east-1:s3" --user "$user:$secret" "$@"; }
origin="http://127.0.0.1:$minio_port"
s3 -X PUT "$origin/demo" 2>/dev/null || true
printf 'Hello from Portico!\n' >"$state/hello.txt"
s3 -T "$state/hello.txt" -H "Content-Type: text/plain" "$origin/demo/hello.txt"
if [ ! -f "$state/random-64MiB.bin" ]; then
  head -c $((64 * 1024 * 1024)) /dev/urandom >"$state/random-64MiB.bin"
fi
s3 -T "$state/random-64MiB.bin" "$origin/demo/data/random-64MiB.bin"

endpoint="http://127.0.0.1:$s3_port"
admin="http://127.0.0.1:$admin_port"
admin_token=demo-admin-token
# Portico runs in the background until it has announced its listeners; then the banner is
# the last thing on the screen. Its logs (stderr) stay on the terminal.
PORTICO_SERVER_LISTEN="127.0.0.1:$s3_port" \
PORTICO_ADMIN_LISTEN="127.0.0.1:$admin_port" \
PORTICO_UPSTREAM_ENDPOINT="$origin" \
PORTICO_UPSTREAM_FORCE_PATH_STYLE=true \
PORTICO_UPSTREAM_ACCESS_KEY_ID=$user \
PORTICO_UPSTREAM_SECRET_ACCESS_KEY=$secret \
PORTICO_AUTH_ACCESS_KEY_ID=$client_key \
PORTICO_AUTH_SECRET_ACCESS_KEY=$client_secret \
PORTICO_ADMIN_TOKEN=$admin_token \
PORTICO_CACHE_DIR="$state/cache" \
PORTICO_CACHE_MEMORY_CAPACITY=256MiB \
PORTICO_CACHE_DISK_CAPACITY=2GiB \
  "$portico" --config "$root/config/portico.toml" >"$state/portico.out" &
portico_pid=$!
trap 'kill -TERM "$portico_pid" 2>/dev/null; wait "$portico_pid" 2>/dev/null || true
      kill "$minio_pid" 2>/dev/null; wait "$minio_pid" 2>/dev/null || true' EXIT
trap 'exit 0' INT TERM
for _ in $(seq 1 300); do
  grep -q "portico listening" "$state/portico.out" && break
  kill -0 "$portico_pid" 2>/dev/null || { echo "Portico did not start (its log is above)" >&2; exit 1; }
  sleep 0.1
done

cat <<INFO

  Portico serves S3 on $endpoint (admin $admin), in front of MinIO at $origin.
  Demo bucket "demo": hello.txt and data/random-64MiB.bin.

  Clients sign with the demo credential $client_key / $client_secret:

  curl --aws-sigv4 aws:amz:us-east-1:s3 --user $client_key:$client_secret $endpoint/demo/hello.txt
  curl --aws-sigv4 aws:amz:us-east-1:s3 --user $client_key:$client_secret -r 0-1048575 -o /dev/null \\
    -w '%{http_code} %{size_download} bytes in %{time_total}s\\n' $endpoint/demo/data/random-64MiB.bin
  AWS_ACCESS_KEY_ID=$client_key AWS_SECRET_ACCESS_KEY=$client_secret AWS_DEFAULT_REGION=us-east-1 \\
    aws --endpoint-url $endpoint s3api get-object --bucket demo --key data/random-64MiB.bin /tmp/random.bin
  curl $admin/healthz
  curl $admin/readyz
  curl -s $admin/metrics | grep ^portico_

  The admin API takes the demo token $admin_token:

  curl -H 'Authorization: Bearer $admin_token' -H 'Content-Type: application/json' \
    -X POST $admin/admin/warm -d '{"bucket":"demo","prefix":"data/"}'
  curl -H 'Authorization: Bearer $admin_token' $admin/admin/jobs/1
  curl -H 'Authorization: Bearer $admin_token' $admin/admin/cache
  curl -H 'Authorization: Bearer $admin_token' -H 'Content-Type: application/json' \
    -X POST $admin/admin/purge -d '{"bucket":"demo","key":"hello.txt"}'

  Ctrl-C stops Portico and MinIO.

INFO

wait "$portico_pid" || true
