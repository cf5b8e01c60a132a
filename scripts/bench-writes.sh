#!/usr/bin/env bash
# Write-path figures: a 1 GiB PUT through Portico vs direct to MinIO (one streamed PUT with
# curl, and the aws CLI's multipart upload), and the upstream requests of `aws s3 sync` of
# 100 objects into two fresh directories (the second should need listings only).
# Uses the release build of Portico; prints one line per figure.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
minio=${PORTICO_MINIO:?set PORTICO_MINIO (make bench does this)}
aws_cli=${PORTICO_AWS_CLI:-/usr/bin/aws}
portico="$root/target/release/portico"
work=$(mktemp -d)
user=portico-bench
secret=portico-bench-secret
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
minio_port=$(free_port); s3_port=$(free_port); admin_port=$(free_port)

cleanup() {
  [ -n "${portico_pid:-}" ] && kill "$portico_pid" 2>/dev/null && wait "$portico_pid" 2>/dev/null
  [ -n "${minio_pid:-}" ] && kill "$minio_pid" 2>/dev/null && wait "$minio_pid" 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT

MINIO_ROOT_USER=$user MINIO_ROOT_PASSWORD=$secret MINIO_BROWSER=off \
  "$minio" server "$work/minio" --address "127.0.0.1:$minio_port" --quiet >"$work/minio.log" 2>&1 &
minio_pid=$!
for _ in $(seq 1 100); do curl -fs "http://127.0.0.1:$minio_port/minio/health/ready" >/dev/null && break; sleep 0.1; done

PORTICO_UPSTREAM_ACCESS_KEY_ID=$user PORTICO_UPSTREAM_SECRET_ACCESS_KEY=$secret \
  PORTICO_AUTH_ACCESS_KEY_ID=$user PORTICO_AUTH_SECRET_ACCESS_KEY=$secret \
  PORTICO_UPSTREAM_FORCE_PATH_STYLE=true PORTICO_CACHE_MEMORY_CAPACITY=1GiB PORTICO_CACHE_DISK_CAPACITY=4GiB \
  "$portico" --listen "127.0.0.1:$s3_port" --admin-listen "127.0.0.1:$admin_port" \
  --upstream-endpoint "http://127.0.0.1:$minio_port" --cache-dir "$work/cache" >"$work/portico.out" 2>"$work/portico.log" &
portico_pid=$!
for _ in $(seq 1 100); do curl -fs "http://127.0.0.1:$admin_port/healthz" >/dev/null && break; sleep 0.1; done

direct="http://127.0.0.1:$minio_port"
through="http://127.0.0.1:$s3_port"
export AWS_ACCESS_KEY_ID=$user AWS_SECRET_ACCESS_KEY=$secret AWS_DEFAULT_REGION=us-east-1 \
  AWS_EC2_METADATA_DISABLED=true AWS_CONFIG_FILE=/dev/null AWS_SHARED_CREDENTIALS_FILE=/dev/null
"$aws_cli" --endpoint-url "$direct" s3 mb s3://bench >/dev/null
head -c $((1024 * 1024 * 1024)) /dev/urandom >"$work/1GiB.bin"

put_curl() { # endpoint key → seconds
  curl -fsS -o /dev/null -w '%{time_total}' -T "$work/1GiB.bin" \
    -H 'x-amz-content-sha256: UNSIGNED-PAYLOAD' --aws-sigv4 "aws:amz:us-east-1:s3" \
    --user "$user:$secret" "$1/bench/$2"
}
put_cli() { # endpoint key → seconds
  local started ended
  started=$(date +%s.%N)
  "$aws_cli" --endpoint-url "$1" s3 cp --no-progress "$work/1GiB.bin" "s3://bench/$2" >/dev/null
  ended=$(date +%s.%N)
  echo "$ended - $started" | bc
}
rate() { echo "scale=0; 1024 / $1" | bc; }

for round in 1 2 3; do
  d=$(put_curl "$direct" "curl-direct-$round"); p=$(put_curl "$through" "curl-portico-$round")
  echo "1 GiB PUT, one stream (curl), round $round: direct $(rate "$d") MiB/s, through Portico $(rate "$p") MiB/s"
done
d=$(put_cli "$direct" cli-direct); p=$(put_cli "$through" cli-portico)
echo "1 GiB PUT, aws s3 cp (multipart, 8 MiB parts): direct $(rate "$d") MiB/s, through Portico $(rate "$p") MiB/s"

mkdir -p "$work/tree"
for index in $(seq -w 1 100); do head -c $((64 * 1024 + 10#$index)) /dev/urandom >"$work/tree/file-$index.bin"; done
"$aws_cli" --endpoint-url "$direct" s3 sync --no-progress "$work/tree" s3://bench/tree >/dev/null
upstream_requests() {
  curl -fs "http://127.0.0.1:$admin_port/metrics" \
    | awk '/^portico_upstream_requests_total\{/ && !/ListBuckets/ { sum += $NF } END { print sum + 0 }'
}
upstream_by_operation() {
  curl -fs "http://127.0.0.1:$admin_port/metrics" | grep '^portico_upstream_requests_total{' | grep -v ListBuckets
}
for round in 1 2 3; do
  before=$(upstream_requests)
  "$aws_cli" --endpoint-url "$through" s3 sync --no-progress s3://bench/tree "$work/down-$round" >/dev/null
  after=$(upstream_requests)
  diff -r "$work/tree" "$work/down-$round" >/dev/null
  echo "aws s3 sync of 100 objects into a fresh directory, round $round: $((after - before)) upstream requests"
done
upstream_by_operation
