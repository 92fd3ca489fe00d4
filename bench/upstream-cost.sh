#!/usr/bin/env bash
# upstream-cost.sh: what h3edge's proxy leg costs in one build against another, as the
# ratio of CPU per proxied request (issue 12 kept the proxy path of `upstream: URL`).
#
#   bench/upstream-cost.sh [-p h2|h3|h1] [-s SECONDS] [-r ROUNDS] [-o CPU] BASE NEW
#
# BASE and NEW are h3edge binaries. Each serves `upstream:` to its own Go HTTP/1.1
# origin (net/http, "ok"); both h3edges run side by side on CPU 0, the origins on CPU 1
# (-o 0 puts them on CPU 0 beside the h3edges, as `h3bench scenario proxy` does) and one
# client each on CPU 1, so both meet the same machine: h2load -c 16 -m 16 for h2 (the
# default), h2load --h1 -c 64 for h1, h3bench (the quic-go client, built from this
# module) -c 16 -m 16 for h3. Each round prints both builds' CPU µs per request
# (utime+stime from /proc ÷ requests the client saw succeed) and NEW ÷ BASE. Run it
# with BASE as NEW too to see the script's own bias (on the VM of 2026-12-01 the second
# slot read 0.98–0.99). Needs taskset and h2load; traffic stays on 127.0.0.1; every
# run stops by itself.
set -euo pipefail
export GOTOOLCHAIN=go1.27.3 # go.mod's Go (README)
secs=4 rounds=3 proto=h2 ocpu=1
while getopts "p:s:r:o:" o; do
	case $o in
	p) proto=$OPTARG ;;
	s) secs=$OPTARG ;;
	r) rounds=$OPTARG ;;
	o) ocpu=$OPTARG ;;
	*) exit 2 ;;
	esac
done
shift $((OPTIND - 1))
[ $# -eq 2 ] || { echo "usage: upstream-cost.sh [-p h2|h3|h1] [-s SECONDS] [-r ROUNDS] [-o CPU] BASE NEW" >&2; exit 2; }
case $proto in h2 | h3 | h1) ;; *) echo "upstream-cost: -p h2, h3 or h1" >&2; exit 2 ;; esac
base=$1 new=$2
d=$(mktemp -d)
pids=()
trap 'for p in "${pids[@]}"; do kill $p 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$d"' EXIT
cat >"$d/origin.go" <<'GO'
package main

import (
	"net/http"
	"os"
)

func main() {
	http.ListenAndServe(os.Args[1], http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("ok")) }))
}
GO
(cd "$d" && go build -o origin origin.go)
if [ "$proto" = h3 ]; then
	(cd "$(dirname "$0")/.." && go build -o "$d/h3bench" ./cmd/h3bench)
fi
# load PORT OUT: one client's run against PORT; OUT gets a line "N succeeded".
load() {
	case $proto in
	h2) taskset -c 1 h2load -c 16 -m 16 -D "$secs" "https://127.0.0.1:$1/" >"$2" 2>&1 ;;
	h1) taskset -c 1 h2load --h1 -c 64 -D "$secs" "https://127.0.0.1:$1/" >"$2" 2>&1 ;;
	h3) taskset -c 1 "$d/h3bench" -proto h3 -insecure -c 16 -m 16 -d "${secs}s" -warmup 0s \
		-url "https://127.0.0.1:$1/" 2>&1 | awk '/^status/ {for (i = 2; i < NF; i += 2) if ($i == "200:") n = $(i + 1)} END {print n + 0, "succeeded"}' >"$2" ;;
	esac
}
port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
# start BINARY: an origin and an h3edge proxying to it; sets spid and sport. Not in a
# subshell, so that the trap knows every process to stop.
start() {
	local o
	sport=$(port) o=$(port)
	taskset -c "$ocpu" "$d/origin" "127.0.0.1:$o" &
	pids+=($!)
	cat >"$d/$sport.yaml" <<Y
listen: "127.0.0.1:$sport"
admin: {listen: "off"}
ip: {connections: {rate: 100000, burst: 100000}, streams: {rate: 1000000, burst: 1000000}, max_connections: 100000, max_streams_per_connection: 1000}
abuse: {rejections: 1000000000}
upstream: http://127.0.0.1:$o
Y
	XDG_CACHE_HOME=$d/cache taskset -c 0 "$1" -config "$d/$sport.yaml" >"$d/$sport.log" 2>&1 &
	spid=$!
	pids+=($spid)
}
start "$base"
pb=$spid portb=$sport
start "$new"
pn=$spid portn=$sport
for _ in $(seq 100); do
	curl -sk -o /dev/null "https://127.0.0.1:$portb/" && curl -sk -o /dev/null "https://127.0.0.1:$portn/" && break
	sleep 0.1
done
cpu() { awk '{print $14+$15}' "/proc/$1/stat"; }
for _ in $(seq "$rounds"); do
	b0=$(cpu "$pb") n0=$(cpu "$pn")
	load "$portb" "$d/b.txt" &
	h1=$!
	load "$portn" "$d/n.txt" &
	h2=$!
	wait $h1 $h2
	b1=$(cpu "$pb") n1=$(cpu "$pn")
	rb=$(grep -o '[0-9]* succeeded' "$d/b.txt" | awk '{print $1}') rn=$(grep -o '[0-9]* succeeded' "$d/n.txt" | awk '{print $1}')
	hz=$(getconf CLK_TCK)
	awk -v b=$((b1 - b0)) -v n=$((n1 - n0)) -v rb="$rb" -v rn="$rn" -v hz="$hz" 'BEGIN {
		cb = b * 1e6 / hz / rb; cn = n * 1e6 / hz / rn
		printf "base %d req %.1f µs/req   new %d req %.1f µs/req   new÷base %.3f\n", rb, cb, rn, cn, cn / cb }'
done
