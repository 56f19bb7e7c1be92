# Shared by the benchmarks: installing peers, and one nginx to measure against.

sudo_if_needed() { if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi; }

# whyslow_bin: the binary to measure, $BIN if set, else the release build
# (built first).
whyslow_bin() {
  if [ -n "${BIN:-}" ]; then
    realpath "$BIN"
  else
    cargo build --release -q -p whyslow >&2
    echo "$PWD/target/release/whyslow"
  fi
}

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

# timed OUT_PREFIX CMD...: runs CMD $RUNS times (stdout → OUT_PREFIX.out) and
# prints the median wall time and the largest max RSS (KB): "wall rss_kb".
timed() {
  local out=$1; shift
  : >"$out.times"
  for _ in $(seq "${RUNS:-3}"); do
    /usr/bin/time -f '%e %M' -o "$out.time" "$@" >"$out.out" 2>"$out.err" || true
    # A non-zero exit puts "Command exited with non-zero status N" first.
    tail -n 1 "$out.time" >>"$out.times"
  done
  sort -n "$out.times" | awk '{w[NR] = $1; if ($2 > m) m = $2} END {print w[int((NR + 1) / 2)], m}'
}

# settle CAP: the capture written back to disk (sync), then read into the
# page cache, so that no tool's timing shares the machine with the writeback
# of a file just written, and every tool reads it from memory.
settle() {
  sync
  cat "$1" >/dev/null
}

# flatness BIN CAP PACKETS DIR: whyslow analyze on the first quarter and the
# first half of the packets (editcap -r): "quarter_s quarter_kb half_s half_kb".
flatness() {
  local bin=$1 cap=$2 packets=$3 dir=$4 part
  for part in 4 2; do
    editcap -r "$cap" "$dir/part.pcapng" "1-$((packets / part))"
    settle "$dir/part.pcapng"
    timed "$dir/part$part" "$bin" analyze "$dir/part.pcapng"
  done | tr '\n' ' '
  rm -f "$dir/part.pcapng"
  echo
}

# print_vs PEER_LABEL PEER_S PEER_KB WHYSLOW_S WHYSLOW_KB Q_S Q_KB H_S H_KB:
# the wall/RSS table, the speed and memory ratios, and memory flatness (RSS
# on a quarter, half and all of the packets; goal: all within 1.1x a quarter).
# SPEED_GOAL: the speed ratio the script's protocol aims at (20 unless set).
print_vs() {
  local peer=$1 t_s=$2 t_kb=$3 w_s=$4 w_kb=$5 q_s=$6 q_kb=$7 h_s=$8 h_kb=$9
  printf '%-44s %10s %12s\n' "" "wall (s)" "max RSS (MB)"
  printf '%-44s %10s %12d\n' "$peer" "$t_s" $((t_kb / 1024))
  printf '%-44s %10s %12d\n' "whyslow analyze" "$w_s" $((w_kb / 1024))
  awk -v t="$t_s" -v w="$w_s" -v tk="$t_kb" -v wk="$w_kb" -v g="${SPEED_GOAL:-20}" 'BEGIN {
    printf "whyslow is %.1fx faster (goal >= %dx) and uses %.1fx less memory\n", t / (w > 0 ? w : 0.01), g, tk / wk }'
  awk -v q="$q_kb" -v h="$h_kb" -v f="$w_kb" -v qs="$q_s" -v hs="$h_s" -v fs="$w_s" 'BEGIN {
    printf "memory flatness: RSS %d MB on a quarter of the packets (%.2f s), %d MB on half (%.2f s), %d MB on all (%.2f s): all/quarter x%.2f (goal <= 1.10)\n", q / 1024, qs, h / 1024, hs, f / 1024, fs, f / q }'
}

# start_backed_service DIR PORT: bench/apps/item_service.py on 127.0.0.1:PORT
# with its own Redis on PORT+1 and PostgreSQL on PORT+2 (a cluster in DIR,
# run as the postgres user); its pid in DIR/service.pid. Stopped by
# stop_backed_service DIR.
start_backed_service() {
  local dir=$1 port=$2 bin=/usr/lib/postgresql/15/bin
  [ -x "$bin/initdb" ] || bin=$(dirname "$(ls /usr/lib/postgresql/*/bin/initdb | tail -1)")
  mkdir -p "$dir/pg"
  chmod 755 "$dir"
  [ "$(id -u)" -eq 0 ] && chown postgres:postgres "$dir/pg"
  as_postgres() { if [ "$(id -u)" -eq 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi; }
  as_postgres "$bin/initdb" -D "$dir/pg/data" --auth=trust -U postgres --no-sync >/dev/null
  as_postgres "$bin/postgres" -D "$dir/pg/data" -p "$((port + 2))" -k "$dir/pg" \
    -c listen_addresses=127.0.0.1 -c fsync=off >"$dir/pg.log" 2>&1 &
  echo $! >"$dir/postgres.pid"
  redis-server --port "$((port + 1))" --bind 127.0.0.1 --save '' --appendonly no >"$dir/redis.log" 2>&1 &
  echo $! >"$dir/redis.pid"
  for _ in $(seq 100); do
    psql -h 127.0.0.1 -p "$((port + 2))" -U postgres -qtAc 'SELECT 1' >/dev/null 2>&1 && break
    sleep 0.1
  done
  /usr/bin/python3 bench/apps/item_service.py "$port" "$((port + 1))" "$((port + 2))" >"$dir/service.log" 2>&1 &
  echo $! >"$dir/service.pid"
  for _ in $(seq 50); do curl -sf -o /dev/null "http://127.0.0.1:$port/item/1" && return 0; sleep 0.1; done
  echo "the service did not start on $port: $(cat "$dir/service.log")" >&2
  return 1
}

# start_tls_postgres DIR PORT: a PostgreSQL cluster in DIR/pg serving TLS
# (ssl=on, a self-signed certificate) on 127.0.0.1:PORT, stopped by
# stop_backed_service DIR.
start_tls_postgres() {
  local dir=$1 port=$2 bin=/usr/lib/postgresql/15/bin
  [ -x "$bin/initdb" ] || bin=$(dirname "$(ls /usr/lib/postgresql/*/bin/initdb | tail -1)")
  mkdir -p "$dir/pg"
  chmod 755 "$dir"
  openssl req -x509 -newkey rsa:2048 -nodes -keyout "$dir/pg/key.pem" -out "$dir/pg/cert.pem" \
    -days 2 -subj /CN=localhost >/dev/null 2>&1
  chmod 600 "$dir/pg/key.pem"
  [ "$(id -u)" -eq 0 ] && chown -R postgres:postgres "$dir/pg"
  as_postgres() { if [ "$(id -u)" -eq 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi; }
  as_postgres "$bin/initdb" -D "$dir/pg/data" --auth=trust -U postgres --no-sync >/dev/null
  as_postgres "$bin/postgres" -D "$dir/pg/data" -p "$port" -k "$dir/pg" \
    -c listen_addresses=127.0.0.1 -c fsync=off -c ssl=on \
    -c ssl_cert_file="$dir/pg/cert.pem" -c ssl_key_file="$dir/pg/key.pem" >"$dir/pg.log" 2>&1 &
  echo $! >"$dir/postgres.pid"
  for _ in $(seq 100); do
    psql -h 127.0.0.1 -p "$port" -U postgres -qtAc 'SELECT 1' >/dev/null 2>&1 && return 0
    sleep 0.1
  done
  echo "PostgreSQL did not start on $port: $(cat "$dir/pg.log")" >&2
  return 1
}

stop_backed_service() {
  local f pids=()
  for f in service redis postgres; do
    [ -f "$1/$f.pid" ] && pids+=("$(cat "$1/$f.pid")")
  done
  # The postgres.pid is runuser's: the server's own pid is in its data
  # directory. Fast shutdown, and wait for it (a second run reuses its port).
  [ -f "$1/pg/data/postmaster.pid" ] && pids+=("$(head -1 "$1/pg/data/postmaster.pid")")
  [ "${#pids[@]}" -gt 0 ] || return 0
  # TERM for the service and Redis, INT (fast shutdown) for the postmaster.
  for p in "${pids[@]:0:${#pids[@]}-1}"; do kill -TERM "$p" 2>/dev/null || true; done
  kill -INT "${pids[-1]}" 2>/dev/null || true
  for _ in $(seq 100); do
    local alive=0
    for p in "${pids[@]}"; do kill -0 "$p" 2>/dev/null && alive=1; done
    [ "$alive" -eq 0 ] && return 0
    sleep 0.1
  done
  for p in "${pids[@]}"; do kill -KILL "$p" 2>/dev/null || true; done
}

# start_lab BIN SCENARIO DIR: `BIN lab run SCENARIO` in the background; sets
# lab_pid and lab_url (the first URL it prints), or fails with its output.
start_lab() {
  local bin=$1 name=$2 dir=$3
  "$bin" lab run "$name" >"$dir/lab.out" 2>&1 &
  lab_pid=$!
  lab_url=
  for _ in $(seq 100); do
    lab_url=$(grep -oE 'http://127\.0\.0\.1:[0-9]+/[^ ]*' "$dir/lab.out" | head -1 || true)
    [ -n "$lab_url" ] && return 0
    sleep 0.1
  done
  echo "the lab did not start: $(cat "$dir/lab.out")" >&2
  return 1
}
