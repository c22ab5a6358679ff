#!/usr/bin/env bash
# Start (or stop) a throw-away Distribution v2 registry (Debian's `docker-registry`) on 127.0.0.1.
#
#   scripts/registry.sh [--port PORT] [--dir DIR] [--user USER] [--tls] [--quiet]
#       Starts the registry and prints shell assignments (eval-able):
#         REGISTRY=127.0.0.1:PORT  REGISTRY_DIR=DIR  REGISTRY_PID=PID  REGISTRY_SCHEME=http|https  [REGISTRY_CA=FILE]
#       --port 0 (the default) picks a free port. --dir keeps config, storage, logs and the pidfile there (default: a
#       new temp dir). --user USER turns on htpasswd auth (bcrypt, `htpasswd -B`); the password is read from the
#       environment variable REGISTRY_PASSWORD, else from stdin (first line): never from the command line.
#       --tls makes a CA and a server certificate for 127.0.0.1/localhost with openssl and serves HTTPS; the CA is
#       DIR/ca.crt (give it to clients: `imagebuild push --ca-file`, curl --cacert, /etc/docker/certs.d/HOST/ca.crt).
#       Returns once GET /v2/ answers (200 or 401), or fails with the registry's log.
#   scripts/registry.sh --stop --dir DIR
#       Stops the registry started with that DIR and removes DIR.
#
# Docker 20.10+ treats 127.0.0.0/8 registries as insecure-allowed, so plain HTTP on 127.0.0.1 works for push/pull.
set -euo pipefail

PORT=0
DIR=""
USER_NAME=""
TLS=0
STOP=0
QUIET=0
BIN="${DOCKER_REGISTRY_BIN:-/usr/bin/docker-registry}"

die() { echo "registry.sh: $*" >&2; exit 1; }

while [ $# -gt 0 ]; do
  case "$1" in
    --port) PORT="$2"; shift 2 ;;
    --dir) DIR="$2"; shift 2 ;;
    --user) USER_NAME="$2"; shift 2 ;;
    --tls) TLS=1; shift ;;
    --stop) STOP=1; shift ;;
    --quiet) QUIET=1; shift ;;
    -h|--help) sed -n '2,20p' "$0"; exit 0 ;;
    *) die "unknown option: $1" ;;
  esac
done

if [ "$STOP" = 1 ]; then
  [ -n "$DIR" ] || die "--stop needs --dir DIR"
  [ -d "$DIR" ] || exit 0
  if [ -f "$DIR/registry.pid" ]; then
    pid="$(cat "$DIR/registry.pid")"
    if kill -0 "$pid" 2>/dev/null; then
      kill "$pid" 2>/dev/null || true
      for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
      kill -9 "$pid" 2>/dev/null || true
    fi
  fi
  [ -f "$DIR/.made-by-registry-sh" ] || die "$DIR was not made by registry.sh; not removing it"
  rm -rf "$DIR"
  exit 0
fi

[ -x "$BIN" ] || die "$BIN not found: apt-get install docker-registry"

if [ -z "$DIR" ]; then
  DIR="$(mktemp -d /tmp/ib-registry.XXXXXX)"
else
  mkdir -p "$DIR"
fi
touch "$DIR/.made-by-registry-sh"
mkdir -p "$DIR/storage"

if [ "$PORT" = 0 ]; then
  PORT="$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()')"
fi

AUTH_BLOCK=""
if [ -n "$USER_NAME" ]; then
  command -v htpasswd >/dev/null || die "htpasswd not found: apt-get install apache2-utils"
  if [ -n "${REGISTRY_PASSWORD:-}" ]; then
    pw="$REGISTRY_PASSWORD"
  else
    IFS= read -r pw || true
  fi
  [ -n "$pw" ] || die "--user needs a password in REGISTRY_PASSWORD or on stdin"
  # -i: password from stdin (never in the process list); -B: bcrypt (the only scheme Distribution accepts)
  printf '%s\n' "$pw" | htpasswd -iBc "$DIR/htpasswd" "$USER_NAME" 2>/dev/null
  unset pw
  AUTH_BLOCK="auth:
  htpasswd:
    realm: imagebuild-test
    path: $DIR/htpasswd"
fi

TLS_BLOCK=""
SCHEME=http
if [ "$TLS" = 1 ]; then
  SCHEME=https
  (
    cd "$DIR"
    openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj "/CN=imagebuild test CA" \
      -keyout ca.key -out ca.crt >/dev/null 2>&1
    openssl req -newkey rsa:2048 -nodes -subj "/CN=127.0.0.1" -keyout server.key -out server.csr >/dev/null 2>&1
    printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n' \
      > server.ext
    openssl x509 -req -in server.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 2 \
      -extfile server.ext -out server.crt >/dev/null 2>&1
    rm -f server.csr server.ext ca.srl
  ) || die "openssl failed to make the test CA"
  TLS_BLOCK="  tls:
    certificate: $DIR/server.crt
    key: $DIR/server.key"
fi

cat > "$DIR/config.yml" <<EOF
version: 0.1
log:
  level: info
  accesslog:
    disabled: false
  fields:
    service: registry
storage:
  filesystem:
    rootdirectory: $DIR/storage
  delete:
    enabled: true
  maintenance:
    uploadpurging:
      enabled: false
http:
  addr: 127.0.0.1:$PORT
  secret: $(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')
  headers:
    X-Content-Type-Options: [nosniff]
$TLS_BLOCK
$AUTH_BLOCK
EOF

# setsid: own process group, so the caller's Ctrl-C does not hit it and --stop ends exactly this process
setsid "$BIN" serve "$DIR/config.yml" >"$DIR/registry.log" 2>&1 < /dev/null &
echo $! > "$DIR/registry.pid"

curl_opts=(-s -o /dev/null -w '%{http_code}' --max-time 2)
[ "$TLS" = 1 ] && curl_opts+=(--cacert "$DIR/ca.crt")
ok=0
for _ in $(seq 100); do
  if ! kill -0 "$(cat "$DIR/registry.pid")" 2>/dev/null; then break; fi
  code="$(curl "${curl_opts[@]}" "$SCHEME://127.0.0.1:$PORT/v2/" || true)"
  if [ "$code" = 200 ] || [ "$code" = 401 ]; then ok=1; break; fi
  sleep 0.1
done
if [ "$ok" != 1 ]; then
  echo "registry.sh: registry did not answer on $SCHEME://127.0.0.1:$PORT/v2/; log:" >&2
  tail -n 20 "$DIR/registry.log" >&2 || true
  "$0" --stop --dir "$DIR" || true
  exit 1
fi

echo "REGISTRY=127.0.0.1:$PORT"
echo "REGISTRY_DIR=$DIR"
echo "REGISTRY_PID=$(cat "$DIR/registry.pid")"
echo "REGISTRY_SCHEME=$SCHEME"
[ "$TLS" = 1 ] && echo "REGISTRY_CA=$DIR/ca.crt"
[ "$QUIET" = 1 ] || echo "registry.sh: serving $SCHEME://127.0.0.1:$PORT (dir $DIR)" >&2
exit 0
