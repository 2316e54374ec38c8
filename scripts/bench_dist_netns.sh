#!/usr/bin/env bash
# The time a data-parallel step waits for the gradients' sum over a real
# network stack: vit_bench_dist on two "hosts" (two network namespaces
# joined by veth, TCP only, tests/netns_hosts.sh), the link limited by a
# token bucket (tc qdisc tbf) at each RATE on both ends.  Needs root.
#
#   scripts/bench_dist_netns.sh BUILD/tools/vit_bench_dist "1gbit 10gbit" \
#       "digits medium large" [vit_bench_dist options...]
#
# Prints vit_bench_dist's table for every rate and configuration.
set -eu
bench=$1 rates=$2 configs=$3
shift 3
. "$(dirname "$0")/../tests/netns_hosts.sh"
export ASAN_OPTIONS=${ASAN_OPTIONS-}
netns_hosts_up || { echo "cannot make the namespaces: $netns_why"; exit 1; }
for rate in $rates; do
    for ns_dev in "$h1 $v1" "$h2 $v2"; do
        read -r ns dev <<<"$ns_dev"
        # burst: at least rate / HZ (250) bytes, or tbf cannot reach its rate
        ip netns exec "$ns" tc qdisc replace dev "$dev" root tbf rate "$rate" burst 8mbit latency 50ms
    done
    echo "=== link $rate ($(ip netns exec "$h1" tc qdisc show dev "$v1" | head -n 1))"
    for c in $configs; do
        two_hosts "$bench" --config "$c" "$@"
    done
done
