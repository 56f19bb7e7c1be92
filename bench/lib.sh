# Shared by the benchmarks: installing peers, and one nginx to measure against.

sudo_if_needed() { if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi; }

# need_packages PKG…: apt-get install the Debian packages that are missing.
need_packages() {
  local missing=() p
  for p in "$@"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
  if [ "${#missing[@]}" -gt 0 ]; then
    sudo_if_needed apt-get update -qq
    sudo_if_needed env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}"
  fi
}

# start_nginx DIR PORT BYTES: nginx with one worker on 127.0.0.1:PORT serving
# a BYTES-long static body, keep-alive (nginx's default of 1000 requests per
# connection), no access log; stopped by stop_nginx DIR.
start_nginx() {
  local dir=$1 port=$2 bytes=$3
  mkdir -p "$dir/www" "$dir/logs"
  chmod 755 "$dir"
  head -c "$bytes" /dev/zero | tr '\0' 'x' >"$dir/www/index.html"
  chmod -R a+rX "$dir/www"   # nginx's worker runs as nobody
  cat >"$dir/nginx.conf" <<EOF
worker_processes 1;
daemon on;
pid $dir/nginx.pid;
error_log $dir/logs/error.log;
events { worker_connections 1024; }
http {
  access_log off;
  keepalive_timeout 60s;
  server {
    listen 127.0.0.1:$port;
    location / { root $dir/www; }
  }
}
EOF
  nginx -p "$dir/" -c "$dir/nginx.conf" -e "$dir/logs/error.log"
  for _ in $(seq 50); do curl -sf -o /dev/null "http://127.0.0.1:$port/" && return 0; sleep 0.1; done
  echo "nginx did not start on $port" >&2
  return 1
}

stop_nginx() {
  [ -f "$1/nginx.pid" ] && kill "$(cat "$1/nginx.pid")" 2>/dev/null
  sleep 0.2
}
