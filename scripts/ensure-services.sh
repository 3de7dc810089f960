#!/usr/bin/env bash
# Make sure PostgreSQL (127.0.0.1:5432, trust auth) and Redis (127.0.0.1:6379) answer, starting
# or installing them (Debian packages) when they do not, and that the prometheus and chromium
# binaries are installed. Used by `make test`.
set -euo pipefail

port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
as_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }
wait_port() {
  for _ in $(seq 1 60); do port_open "$1" && return 0; sleep 0.5; done
  echo "service on port $1 did not come up" >&2
  return 1
}

if ! port_open 5432; then
  if ! ls /etc/postgresql/*/main >/dev/null 2>&1; then
    echo "Installing PostgreSQL (apt)..."
    as_root apt-get update -qq
    as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >/dev/null
  fi
  version=$(ls /etc/postgresql | sort -V | tail -1)
  conf="/etc/postgresql/$version/main"
  # Local trust auth, as on the development machines.
  if ! as_root grep -q '^host all all 127.0.0.1/32 trust' "$conf/pg_hba.conf"; then
    as_root sed -i '1i host all all 127.0.0.1/32 trust\nhost all all ::1/128 trust\nlocal all all trust' "$conf/pg_hba.conf"
  fi
  as_root pg_ctlcluster --skip-systemctl-redirect "$version" main start || true
  wait_port 5432
fi

if ! port_open 6379; then
  if ! command -v redis-server >/dev/null 2>&1; then
    echo "Installing Redis (apt)..."
    as_root apt-get update -qq
    as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq redis-server >/dev/null
  fi
  redis-server --daemonize yes --bind 127.0.0.1 --port 6379 --save "" --appendonly no \
    --dir /tmp --logfile /tmp/gpuportal-redis.log
  wait_port 6379
fi
# Prometheus (Debian's package) for the GPU metrics tests of the Prometheus source; the tests
# start their own server, so only the binary is needed.
if ! command -v prometheus >/dev/null 2>&1; then
  echo "Installing Prometheus (apt)..."
  as_root apt-get update -qq
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
    prometheus >/dev/null
  # The package's own service is not needed (and would hold port 9090).
  as_root systemctl disable --now prometheus >/dev/null 2>&1 || true
fi
# Debian's chromium for the browser tests: Playwright drives it (no browser download).
if [ ! -x "${PORTAL_CHROMIUM:-/usr/bin/chromium}" ]; then
  echo "Installing chromium (apt)..."
  as_root apt-get update -qq
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
    chromium >/dev/null
fi
echo "PostgreSQL and Redis are reachable; prometheus and chromium are installed."
