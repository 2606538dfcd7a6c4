#!/usr/bin/env bash
# The coral lab: §6.1's flash crowd on a small network of Linux network
# namespaces, with every real part in the loop.
#
#   lab.sh up [NODES] [CLIENTS]   build the network and start everything
#   lab.sh run [ROUNDS]           every client fetches every page's images
#                                 through unbound and coral; bytes checked
#   lab.sh browser FILE.png       headless Chromium on client 1 loads page 0
#   lab.sh down                   remove everything `up` created, nothing else
#
# The network (10.99.0.0/24, inside the namespaces only; nothing is routed
# to the host's own interfaces):
#
#   coral-lab-br      a bridge, br0; every host's veth ends here
#   coral-lab-origin  10.99.0.250  nginx serving the demo site on :8080; its
#                                  uplink (eth0 egress) shaped by tbf to 384 kbit/s
#   coral-lab-nK      10.99.0.K    coral node K: DSHT :7000, dnssrv :53,
#                                  proxy :8090, admin 127.0.0.1:7080 in its
#                                  namespace (K = 1..NODES)
#   coral-lab-dns     10.99.0.53   unbound, with stub zones coralcdn.test and
#                                  coral.test pointing at the nodes' dnssrv
#   coral-lab-cK      10.99.0.10K  clients: /etc/netns/coral-lab-cK/resolv.conf
#                                  names unbound, so curl and Chromium resolve
#                                  Coralized names through it
#
# Everything `up` creates is listed in $STATE/created (one line per thing:
# `netns NAME`, `pid PID NAME`, `dir PATH`); `down` removes exactly those, and
# only names with the prefix `up` used. The prefix (default coral-lab-; the
# names above) comes from $CORAL_LAB_PREFIX, so two labs can run at once with
# different prefixes and state directories ($CORAL_LAB_STATE); `up` records
# it in $STATE/prefix and the other commands use the recorded one.
# Needs root (ip netns), iproute2, tc, nginx, unbound, curl, and the coral
# binary ($CORAL, default: coral on PATH).

set -euo pipefail

STATE=${CORAL_LAB_STATE:-/tmp/coral-lab}
# The namespace-name prefix: the one `up` recorded, else $CORAL_LAB_PREFIX.
if [ -e "$STATE/prefix" ]; then PREFIX=$(cat "$STATE/prefix"); else PREFIX=${CORAL_LAB_PREFIX:-coral-lab-}; fi
# Letters, digits, '-' and '_' only, short enough that PREFIX+origin is a
# valid file name under /run/netns and /etc/netns.
case $PREFIX in ''|*[!A-Za-z0-9_-]*) printf 'lab: bad prefix %q\n' "$PREFIX" >&2; exit 2 ;; esac
[ "${#PREFIX}" -le 40 ] || { printf 'lab: prefix %s longer than 40 characters\n' "$PREFIX" >&2; exit 2; }
CORAL=${CORAL:-$(command -v coral || true)}
NET=10.99.0
ORIGIN_IP=$NET.250
RESOLVER_IP=$NET.53
ORIGIN_NAME=origin.lab.test
ORIGIN_PORT=8080
ZONE=coralcdn.test
ALIAS=coral.test
PROXY_PORT=8090
UPLINK=384kbit
CORALIZED=$ORIGIN_NAME.$ORIGIN_PORT.$ALIAS

say() { printf 'lab: %s\n' "$*" >&2; }
die() { say "$*"; exit 1; }
record() { echo "$*" >>"$STATE/created"; }
in_ns() { local ns=$1; shift; ip netns exec "$ns" "$@"; }

# Starts a long-running command in a namespace, logging to $STATE/NAME.log,
# and records its pid.
start() {
  local ns=$1 name=$2; shift 2
  ip netns exec "$ns" setsid "$@" >"$STATE/$name.log" 2>&1 </dev/null &
  record "pid $! $name"
}

# A host: a namespace with lo up and eth0 (IP/24) on the bridge.
add_host() {
  local ns=$PREFIX$1 ip=$2 v=v-$1
  ip netns add "$ns"; record "netns $ns"
  ip link add eth0 netns "$ns" type veth peer name "$v" netns "${PREFIX}br"
  in_ns "$ns" ip link set lo up
  in_ns "$ns" ip addr add "$ip/24" dev eth0
  in_ns "$ns" ip link set eth0 up
  in_ns "${PREFIX}br" ip link set "$v" master br0 up
}

# Whether process PID runs (exists and is not a zombie: an exited process
# whose parent has not reaped it is gone for our purposes).
running() {
  local st
  st=$(sed 's/.*) //' "/proc/$1/stat" 2>/dev/null | cut -c1) || return 1
  [ -n "$st" ] && [ "$st" != Z ]
}

# Waits until COMMAND succeeds (at most 30 s).
wait_for() {
  local what=$1; shift
  for _ in $(seq 300); do "$@" >/dev/null 2>&1 && return 0; sleep 0.1; done
  die "$what did not come up (logs in $STATE)"
}

up() {
  local nodes=${1:-3} clients=${2:-2}
  [ "$(id -u)" = 0 ] || die "needs root (ip netns)"
  [ -x "$CORAL" ] || die "no coral binary (set CORAL=path)"
  [ ! -e "$STATE/created" ] || die "$STATE/created exists: run '$0 down' first"
  mkdir -p "$STATE"; : >"$STATE/created"
  echo "$PREFIX" >"$STATE/prefix"
  echo "$nodes $clients" >"$STATE/size"

  # The bridge.
  ip netns add "${PREFIX}br"; record "netns ${PREFIX}br"
  in_ns "${PREFIX}br" ip link add br0 type bridge
  in_ns "${PREFIX}br" ip link set br0 up

  # The origin: nginx on a 384 kbit/s uplink.
  add_host origin "$ORIGIN_IP"
  in_ns "${PREFIX}origin" tc qdisc add dev eth0 root tbf rate "$UPLINK" burst 4kb latency 2s
  mkdir -p "$STATE/site"
  "$CORAL" demo --write-site "$STATE/site" >/dev/null
  cat >"$STATE/nginx.conf" <<CONF
daemon off;
pid $STATE/nginx.pid;
error_log $STATE/nginx-error.log;
events { worker_connections 256; }
http {
  access_log $STATE/nginx-access.log;
  types { text/html html; image/bmp bmp; }
  client_body_temp_path $STATE/nginx-tmp;
  proxy_temp_path $STATE/nginx-tmp; fastcgi_temp_path $STATE/nginx-tmp;
  uwsgi_temp_path $STATE/nginx-tmp; scgi_temp_path $STATE/nginx-tmp;
  server {
    listen $ORIGIN_IP:$ORIGIN_PORT;
    root $STATE/site;
    add_header Cache-Control "public, max-age=3600";
  }
}
CONF
  mkdir -p "$STATE/nginx-tmp"
  start "${PREFIX}origin" nginx nginx -c "$STATE/nginx.conf"

  # The coral nodes, admitted to one network: the lab's own admission key,
  # which each node self-certifies with (--network-key: labs and tests
  # only; production nodes get certificates, SECURITY.md "Threat model").
  [ -f "$STATE/network.key" ] || "$CORAL" network init --out "$STATE/network.key" >/dev/null
  local k
  for k in $(seq "$nodes"); do
    add_host "n$k" "$NET.$k"
    local boot=()
    [ "$k" = 1 ] || boot=(--bootstrap "$NET.1:7000")
    start "${PREFIX}n$k" "node$k" "$CORAL" node --cores 1 \
      --dsht "$NET.$k:7000" --admin 127.0.0.1:7080 --http "$NET.$k:$PROXY_PORT" \
      --dns "$NET.$k:53" --zone "$ZONE" --alias "$ALIAS" \
      --cache-dir "$STATE/cache$k" --allow-private-origins \
      --state-dir "$STATE/state$k" --network-key "$STATE/network.key" \
      --resolve "$ORIGIN_NAME=$ORIGIN_IP" "${boot[@]}"
  done

  # The resolver: unbound with stub zones for coral's zone and alias.
  add_host dns "$RESOLVER_IP"
  {
    echo "server:"
    echo "  interface: $RESOLVER_IP"
    echo "  access-control: $NET.0/24 allow"
    echo "  do-not-query-localhost: no"
    echo "  username: \"\""
    echo "  chroot: \"\""
    echo "  directory: \"$STATE\""
    echo "  pidfile: \"$STATE/unbound.pid\""
    echo "  logfile: \"\""
    echo "  use-syslog: no"
    echo "  module-config: \"iterator\""
    echo "  qname-minimisation: no"
    echo "  domain-insecure: \"$ZONE\""
    echo "  domain-insecure: \"$ALIAS\""
    echo "  private-domain: \"$ZONE\""
    echo "  private-domain: \"$ALIAS\""
    echo "  local-zone: \"test.\" nodefault   # unbound answers .test (RFC 6761) itself by default"
    for z in "$ZONE" "$ALIAS"; do
      echo "stub-zone:"
      echo "  name: \"$z\""
      for k in $(seq "$nodes"); do echo "  stub-addr: $NET.$k@53"; done
    done
  } >"$STATE/unbound.conf"
  start "${PREFIX}dns" unbound unbound -d -c "$STATE/unbound.conf"

  # The clients, resolving through unbound.
  # A lab that creates /etc/netns marks it (another lab may be starting at
  # the same moment, and it may be the last one down); whichever lab's
  # `down` leaves it holding only the mark removes it.
  if mkdir /etc/netns 2>/dev/null; then : >/etc/netns/.coral-lab-made; fi
  [ -d /etc/netns ] || die "cannot create /etc/netns"
  for k in $(seq "$clients"); do
    add_host "c$k" "$NET.$((100 + k))"
    local etc=/etc/netns/${PREFIX}c$k
    [ ! -e "$etc" ] || die "$etc exists and is not ours"
    mkdir -p "$etc"; record "dir $etc"
    echo "nameserver $RESOLVER_IP" >"$etc/resolv.conf"
  done

  # Ready: the origin answers, every node's proxy and dnssrv answer, and
  # unbound resolves a Coralized name.
  wait_for "nginx" in_ns "${PREFIX}origin" curl -sf -o /dev/null "http://$ORIGIN_IP:$ORIGIN_PORT/page0.html"
  for k in $(seq "$nodes"); do
    wait_for "node $k" in_ns "${PREFIX}n$k" curl -sf -o /dev/null "http://127.0.0.1:7080/levels"
    wait_for "node $k's proxy" in_ns "${PREFIX}c1" curl -s -o /dev/null "http://$NET.$k:$PROXY_PORT/"
  done
  wait_for "unbound" in_ns "${PREFIX}c1" getent ahostsv4 "$CORALIZED"
  say "up: $nodes coral nodes, $clients clients; try: ip netns exec ${PREFIX}c1 curl -v http://$CORALIZED:$PROXY_PORT/page0.html"
}

# Every client fetches every image through coral, checking the bytes against
# the site's files; prints one line per fetch and a summary.
run() {
  local rounds=${1:-1}
  [ -e "$STATE/size" ] || die "not up"
  local nodes clients; read -r nodes clients <"$STATE/size"
  local ok=0 bad=0 out=$STATE/fetched
  local images; images=$(cd "$STATE/site" && ls img*.bmp | sort -V)
  for r in $(seq "$rounds"); do
    for k in $(seq "$clients"); do
      for img in $images; do
        local status
        status=$(in_ns "${PREFIX}c$k" curl -s -o "$out" -D - \
          "http://$CORALIZED:$PROXY_PORT/$img" | tr -d '\r' |
          awk 'NR==1{code=$2} tolower($1)=="cache-status:"{sub(/^[^:]*: */,""); cs=$0} END{print code" "cs}')
        if cmp -s "$out" "$STATE/site/$img"; then ok=$((ok + 1)); else bad=$((bad + 1)); fi
        echo "round $r client c$k $img: $status"
      done
    done
  done
  local fetches; fetches=$(grep -c 'GET /img' "$STATE/nginx-access.log" || true)
  local direct; direct=$(grep -c "^$NET\.1[0-9][0-9] " "$STATE/nginx-access.log" || true)
  echo "lab: $((ok + bad)) fetches, $ok with the right bytes, $bad wrong; origin served $fetches image fetches for $(echo "$images" | wc -w) images, $direct requests straight from clients"
  [ "$bad" = 0 ]
}

# Headless Chromium on client 1 loads page 0 through unbound and coral.
browser() {
  local png=${1:?usage: lab.sh browser FILE.png}
  [ -e "$STATE/size" ] || die "not up"
  mkdir -p "$STATE/chromium"
  in_ns "${PREFIX}c1" chromium --headless --no-sandbox --disable-gpu \
    --disable-background-networking --disable-component-update --no-first-run \
    --user-data-dir="$STATE/chromium" --screenshot="$png" --window-size=1200,900 \
    "http://$CORALIZED:$PROXY_PORT/page0.html" >"$STATE/chromium.log" 2>&1
  [ -s "$png" ] || die "no screenshot (see $STATE/chromium.log)"
  say "screenshot: $png"
}

down() {
  [ -e "$STATE/created" ] || { say "nothing to take down ($STATE/created absent)"; return 0; }
  local kind a b
  # Processes first (only pids we recorded, still in one of our namespaces).
  while read -r kind a b; do
    [ "$kind" = pid ] || continue
    kill -TERM "$a" 2>/dev/null || true
  done <"$STATE/created"
  # Give them up to 10 s to exit on TERM (nodes flush and stop), then KILL
  # whatever is left in our namespaces.
  local alive
  for _ in $(seq 100); do
    alive=0
    while read -r kind a b; do
      if [ "$kind" = pid ] && running "$a"; then alive=1; fi
    done <"$STATE/created"
    [ "$alive" = 0 ] && break
    sleep 0.1
  done
  while read -r kind a b; do
    [ "$kind" = netns ] || continue
    case $a in "$PREFIX"*) ;; *) say "refusing to touch netns $a"; continue ;; esac
    # Anything still running inside our namespace was started by us.
    for p in $(ip netns pids "$a" 2>/dev/null); do kill -KILL "$p" 2>/dev/null || true; done
  done <"$STATE/created"
  tac "$STATE/created" | while read -r kind a b; do
    case $kind in
      netns)
        case $a in "$PREFIX"*) ip netns del "$a" 2>/dev/null || true ;; esac ;;
      dir)
        case $a in /etc/netns/"$PREFIX"*) rm -rf -- "$a" ;; *) say "refusing to remove $a" ;; esac ;;
      emptydir)
        [ "$a" = /etc/netns ] && rmdir -- "$a" 2>/dev/null || true ;;
    esac
  done
  if [ -e /etc/netns/.coral-lab-made ] && [ "$(ls -A /etc/netns)" = .coral-lab-made ]; then
    rm -f /etc/netns/.coral-lab-made; rmdir /etc/netns 2>/dev/null || true
  fi
  rm -rf -- "$STATE"
  say "down: removed everything listed"
}

case ${1:-} in
  up) shift; up "$@" ;;
  run) shift; run "$@" ;;
  browser) shift; browser "$@" ;;
  down) down ;;
  *) sed -n '2,33p' "$0" | sed 's/^# \{0,1\}//'; exit 2 ;;
esac
