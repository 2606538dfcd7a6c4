# What the benchmark scripts share; each sources it first:
#     . "$(dirname "$0")/lib.sh"
#
# bench_setup NAME: a scratch folder $TMP (/tmp/coral-NAME.XXXXXX) and the
# lists of what the script starts, PIDS (processes) and PGIDS (process
# groups, for servers started under setsid). At exit, or on TERM, INT or
# HUP, every group and process listed is stopped (TERM) and waited for,
# the script's own `bench_keep` runs if it defines one (to keep logs or
# profiles out of $TMP), and $TMP is removed: nothing the script did not
# start is touched.
bench_setup() {
    TMP=$(mktemp -d "/tmp/coral-$1.XXXXXX")
    PIDS=()
    PGIDS=()
    trap bench_cleanup EXIT
    trap 'exit 143' TERM INT HUP
}

bench_cleanup() {
    for g in "${PGIDS[@]}"; do kill -TERM -- "-$g" 2>/dev/null || true; done
    for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
    wait 2>/dev/null || true
    if declare -F bench_keep >/dev/null; then bench_keep || true; fi
    rm -rf "$TMP"
}

# nginx_static_conf DIR ADDR ROOT: writes DIR/nginx.conf, the static-file
# nginx every benchmark compares against (one worker; sendfile, tcp_nopush
# and tcp_nodelay on; keep-alive without limit; no access log), listening
# on ADDR (ip:port) and serving ROOT. Its pid file, error log and
# temporary folders stay in DIR.
nginx_static_conf() {
    mkdir -p "$1"
    cat >"$1/nginx.conf" <<NGINX
worker_processes 1;
pid $1/nginx.pid;
error_log $1/error.log;
events { worker_connections 4096; }
http {
    access_log off; sendfile on; tcp_nopush on; tcp_nodelay on;
    keepalive_requests 10000000; keepalive_timeout 75s;
    client_body_temp_path $1/body; proxy_temp_path $1/proxy;
    fastcgi_temp_path $1/f; uwsgi_temp_path $1/u; scgi_temp_path $1/s;
    default_type application/octet-stream;
    server { listen $2; root $3; }
}
NGINX
}
