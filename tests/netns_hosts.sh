# Two "hosts" for MPI on one Linux machine: two network namespaces joined
# by a veth pair, a private /24 that exists only inside them, an rsh agent
# for Open MPI that runs its command in the namespace owning the host's
# address, a hostfile, and two_hosts ARGS...: mpirun -np 2 inside the first
# namespace over TCP on that /24 only.  Sourced (bash) by
# tests/test_mpi_hosts.sh and scripts/bench_dist_netns.sh; needs root.
#
# netns_hosts_up: sets h1 h2 (namespaces), v1 v2 (their veth ends), net
# (the /24's first three bytes with the dot), a1 a2, tmp (a scratch folder),
# and an EXIT trap that kills what runs in the namespaces and removes them.
# Names and the /24 come from this shell's PID: parallel runs don't clash.
# Returns 1 (the reason in netns_why) if the namespaces cannot be made.
netns_hosts_up() {
    local id=$$
    h1=vith1-$id h2=vith2-$id v1=va$id v2=vb$id
    net=10.$((200 + id % 50)).$((id / 50 % 250)).
    a1=${net}1 a2=${net}2
    tmp=$(mktemp -d)
    trap netns_hosts_down EXIT
    trap 'exit 1' INT TERM HUP
    if ! { ip netns add "$h1" && ip netns add "$h2" &&
           ip link add "$v1" type veth peer name "$v2" &&
           ip link set "$v1" netns "$h1" && ip link set "$v2" netns "$h2" &&
           ip -n "$h1" addr add "$a1/24" dev "$v1" && ip -n "$h2" addr add "$a2/24" dev "$v2" &&
           ip -n "$h1" link set lo up && ip -n "$h1" link set "$v1" up &&
           ip -n "$h2" link set lo up && ip -n "$h2" link set "$v2" up; } 2>"$tmp/ns.err"; then
        netns_why=$(head -n 1 "$tmp/ns.err")
        return 1
    fi
    # Open MPI's rsh agent: "AGENT [options] HOST COMMAND...", run in the
    # namespace that owns HOST's address, as ssh would on HOST.
    agent=$tmp/netns_rsh
    cat >"$agent" <<EOF
#!/bin/sh
while [ \$# -gt 0 ]; do case \$1 in -*) shift ;; *) break ;; esac; done
host=\$1; shift
case \$host in $a1) ns=$h1 ;; $a2) ns=$h2 ;; *) echo "netns_rsh: unknown host \$host" >&2; exit 255 ;; esac
exec ip netns exec \$ns /bin/sh -c "\$*"
EOF
    chmod +x "$agent"
    printf '%s slots=1\n%s slots=1\n' "$a1" "$a2" >"$tmp/hosts"
    export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
    return 0
}

netns_hosts_down() {
    ip netns pids "$h1" 2>/dev/null | xargs -r kill -9 2>/dev/null
    ip netns pids "$h2" 2>/dev/null | xargs -r kill -9 2>/dev/null
    ip netns del "$h1" 2>/dev/null
    ip netns del "$h2" 2>/dev/null
    rm -rf "$tmp"
}

# The ranks on the two hosts, over TCP on the private /24 only.
two_hosts() {
    ip netns exec "$h1" mpirun --allow-run-as-root -np 2 --hostfile "$tmp/hosts" \
        --mca plm_rsh_agent "$agent" --mca btl tcp,self \
        --mca btl_tcp_if_include "${net}0/24" --mca oob_tcp_if_include "${net}0/24" \
        -x OMPI_ALLOW_RUN_AS_ROOT -x OMPI_ALLOW_RUN_AS_ROOT_CONFIRM -x ASAN_OPTIONS \
        -x PATH "$@"
}
