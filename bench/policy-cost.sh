#!/usr/bin/env bash
# policy-cost.sh: what three local policies cost an h3edge, as the ratio of its
# throughput with them to its throughput without them (issue: ≥ 0.9).
#
#   bench/policy-cost.sh [-p h3|h3q|h2|h1] [-s SECONDS] [-r ROUNDS] [-B OTHER] [H3EDGE]
#
# With -B OTHER it compares two builds instead: OTHER and H3EDGE both serve the three
# policies, side by side as below, and each round prints H3EDGE's throughput ÷ OTHER's
# (a new Go or a change against the build before it).
#
# The two configurations run at the same time, each in its own h3edge pinned to CPU 0
# and each loaded by its own client pinned to CPU 1 (gtlsclient for h3, one connection;
# h3bench, the quic-go client, with 16 connections × 16 streams for h3q; h2load for h2
# and h1), so both meet the same machine: on a shared VM whose speed swings by 2× within
# seconds, runs one after the other (A B A B) scatter by ±30 %, runs side by side by ±2 %.
# Each server is CPU-bound and gets half of CPU 0, so the ratio of requests served is
# the inverse ratio of CPU per request; both are printed per round, then the median.
# Where they differ, the clients set the pace (h3q: two quic-go clients on one core
# cannot keep two servers busy; its CPU ratio is the figure to read).
#
# H3EDGE defaults to a build of ./cmd/h3edge. Needs taskset, curl, and gtlsclient
# (ngtcp2-client) or h2load (nghttp2-client). Traffic stays on 127.0.0.1; every run
# stops by itself.
set -euo pipefail
export GOTOOLCHAIN=go1.27.3 # go.mod's Go (README)

proto=h3 secs=5 rounds=3 other=""
while getopts "p:s:r:B:" o; do
	case $o in
	p) proto=$OPTARG ;;
	s) secs=$OPTARG ;;
	r) rounds=$OPTARG ;;
	B) other=$OPTARG ;;
	*) exit 2 ;;
	esac
done
shift $((OPTIND - 1))
case $proto in h3 | h3q | h2 | h1) ;; *) echo "policy-cost: -p h3, h3q, h2 or h1" >&2; exit 2 ;; esac

dir=$(mktemp -d)
pids=()
cleanup() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	wait 2>/dev/null || true
	rm -rf "$dir"
}
trap cleanup EXIT

bin=${1:-}
if [ -z "$bin" ]; then
	bin=$dir/h3edge
	(cd "$(dirname "$0")/.." && go build -o "$bin" ./cmd/h3edge)
fi
if [ "$proto" = h3q ]; then
	(cd "$(dirname "$0")/.." && go build -o "$dir/h3bench" ./cmd/h3bench)
fi

# Per-source budgets raised (one client is not their subject), admin on loopback for
# the request counters; "three" adds the policies, never denying at these rates.
cat >"$dir/none.yaml" <<'EOF'
ip:
  connections: {rate: 100000, burst: 100000}
  streams: {rate: 1000000, burst: 1000000}
  max_connections: 100000
  max_streams_per_connection: 1000
abuse:
  rejections: 1000000000
EOF
cp "$dir/none.yaml" "$dir/three.yaml"
cat >>"$dir/three.yaml" <<'EOF'
policies:
  - {name: burst, algorithm: token_bucket, key: ["header:X-API-Key", ip], quota: 100000000, window: 1s}
  - {name: daily, algorithm: fixed_window, quota: 100000000, window: 24h}
  - {name: per-ip, algorithm: sliding_window, key: [ip], quota: 100000000, window: 60s}
EOF

port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
served() { curl -sf "http://$1/metrics" | awk '/^h3edge_requests_total/ {s += $2} END {print s + 0}'; }
cputicks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
load() { # port count
	case $proto in
	h3) taskset -c 1 gtlsclient -q --exit-on-all-streams-close -n "$2" 127.0.0.1 "$1" "https://127.0.0.1:$1/" ;;
	h3q) taskset -c 1 "$dir/h3bench" -proto h3 -insecure -c 16 -m 16 -n "$2" -warmup 0s -url "https://127.0.0.1:$1/" ;;
	h2) taskset -c 1 h2load -c 16 -m 16 -n "$2" "https://127.0.0.1:$1/" ;;
	h1) taskset -c 1 h2load --h1 -c 64 -n "$2" "https://127.0.0.1:$1/" ;;
	esac >/dev/null 2>&1 || true
}

# The two servers of a round: "none" is the baseline, "three" the one measured.
declare -A B F
if [ -n "$other" ]; then
	B[none]=$other F[none]=three B[three]=$bin F[three]=three
	label=new/old
else
	B[none]=$bin F[none]=none B[three]=$bin F[three]=three
	label=three/none
fi

ratios=()
for r in $(seq "$rounds"); do
	declare -A P A S C
	for c in none three; do
		P[$c]=$(port) A[$c]=127.0.0.1:$(port)
		taskset -c 0 "${B[$c]}" -config "$dir/${F[$c]}.yaml" -listen "127.0.0.1:${P[$c]}" -admin "${A[$c]}" 2>"$dir/$c.log" &
		S[$c]=$!
		pids+=("${S[$c]}")
	done
	for c in none three; do
		for _ in $(seq 200); do curl -sf -o /dev/null "http://${A[$c]}/readyz" && break; sleep 0.05; done
		load "${P[$c]}" 3000 # warm-up
	done
	for c in none three; do
		load "${P[$c]}" 100000000 &
		C[$c]=$!
		pids+=("${C[$c]}")
	done
	sleep 0.5
	n0=$(served "${A[none]}") t0=$(served "${A[three]}") un0=$(cputicks "${S[none]}") ut0=$(cputicks "${S[three]}")
	sleep "$secs"
	n1=$(served "${A[none]}") t1=$(served "${A[three]}") un1=$(cputicks "${S[none]}") ut1=$(cputicks "${S[three]}")
	for c in none three; do
		pkill -P "${C[$c]}" 2>/dev/null || true
		kill "${S[$c]}" 2>/dev/null || true
	done
	wait 2>/dev/null || true
	pids=()
	line=$(awk -v la="${label#*/}" -v lb="${label%/*}" -v n=$((n1 - n0)) -v t=$((t1 - t0)) -v un=$((un1 - un0)) -v ut=$((ut1 - ut0)) -v hz="$(getconf CLK_TCK)" 'BEGIN {
		if (n == 0 || t == 0) { print "no requests served"; exit 1 }
		printf "%.3f  %s %d req/s (%.1f µs CPU/req)  %s %d req/s (%.1f µs CPU/req)  CPU ratio %.3f",
			t / n, la, n / '"$secs"', un * 1e6 / hz / n, lb, t / '"$secs"', ut * 1e6 / hz / t, (un / n) / (ut / t) }')
	echo "round $r: $label $line"
	ratios+=("${line%% *}")
done
printf '%s\n' "${ratios[@]}" | sort -n | awk '{a[NR] = $1} END {m = NR % 2 ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2; printf "'"$proto $label"' median of %d rounds: %.3f\n", NR, m}'
