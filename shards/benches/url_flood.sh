#!/bin/bash
# Usage (root): unshare -n shards/benches/url_flood.sh target/release/coral 40
# A memory measurement for issue 23 item 5 (SECURITY.md, "Figures"), not a
# speed benchmark: run it on a quiet machine for the request rate to mean anything.
# Runs inside its own network namespace: nginx origin on 127.0.0.2:80, one
# coral node on 127.0.0.1, a wrk flood of distinct URLs; prints RSS.
BIN=$1; SECS=${2:-40}
set -u
ip link set lo up
D=$(mktemp -d /tmp/coral-flood-XXXX)
mkdir -p $D/nginx $D/cache
cat > $D/nginx/nginx.conf <<EOF
worker_processes 1; pid $D/nginx/nginx.pid; error_log $D/nginx/error.log;
events { worker_connections 4096; }
http { access_log off; client_body_temp_path $D/nginx/body; proxy_temp_path $D/nginx/proxy;
 fastcgi_temp_path $D/nginx/f; uwsgi_temp_path $D/nginx/u; scgi_temp_path $D/nginx/s;
 server { listen 127.0.0.2:80; location / { add_header Cache-Control "max-age=3600"; return 200 "x"; } } }
EOF
cat > $D/flood.lua <<'EOF'
counter = 0
math.randomseed(os.time() + tonumber(tostring({}):sub(8), 16))
request = function()
  counter = counter + 1
  return wrk.format("GET", "/u/" .. math.random(1, 1000000000) .. "-" .. counter, {["Host"]="www.origin.test.80.coral.test:8090"})
end
EOF
/usr/sbin/nginx -p $D/nginx -c $D/nginx/nginx.conf -g 'daemon off;' &
NGINX=$!
$BIN node --cores 1 --dsht 127.0.0.1:7000 --admin 127.0.0.1:7080 --http 127.0.0.1:8090 \
  --cache-dir $D/cache --cache-size 1GiB --allow-private-origins --resolve www.origin.test=127.0.0.2 2> $D/node.log &
NODE=$!
for i in $(seq 1 600); do curl -s -o /dev/null -w '%{http_code}' http://127.0.0.1:7080/readyz 2>/dev/null | grep -q 200 && break; sleep 0.1; done
rss() { echo "$1: $(grep -E '^(VmRSS|RssAnon)' /proc/$NODE/status | tr -s ' \t' ' ' | tr '\n' ' ')"; }
curl -s -o /dev/null -w 'probe %{http_code}\n' -H 'Host: www.origin.test.80.coral.test:8090' http://127.0.0.1:8090/u/probe
rss "ready"
wrk -t2 -c32 -d${SECS}s -s $D/flood.lua http://127.0.0.1:8090/ | grep -E "requests in|Requests/sec|Non-2xx|Socket errors"
rss "after flood"
curl -s http://127.0.0.1:7080/metrics | grep -E "^coral_cache_objects |^coral_dsht_store" | head -8
sleep 35
rss "35 s after"
kill $NODE; wait $NODE; kill $NGINX; wait $NGINX 2>/dev/null
tail -3 $D/node.log
rm -rf $D
