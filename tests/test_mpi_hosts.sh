#!/usr/bin/env bash
# Data-parallel training across two hosts over TCP.  Two Linux network
# namespaces joined by a veth pair are the hosts: each has its own network
# stack, and the only way between them is the veth link and a private /24
# that exists inside those two namespaces alone (nothing reaches the
# machine's own network).  Open MPI reaches the second host through an rsh
# agent that runs its command with `ip netns exec` in the namespace owning
# the host's address; mpirun itself runs inside the first.  Shared memory is
# off (--mca btl tcp,self), so the ranks talk over TCP only.
#
# Checks: the 2-host run finishes with --check-replicas on, its checkpoint
# is bitwise the one of the same 2-rank job on one host, and its losses are
# those of one process within test_mpi.sh's bound (1e-3 relative); the
# gradients' sum overlapped with the backward is bitwise the blocking one.
# A lost rank (kill -9 of one rank mid-run) is then tested on the same two
# hosts: the survivor stops within 10 s, mpirun names the lost rank in one
# line, the last checkpoint is whole, and resuming it on one host with 2
# ranks, and with 1 rank, ends bitwise equal to an uninterrupted run of that
# rank count started from the same checkpoint.
#
# Skipped (exit 77, with the reason) unless root, with `ip netns`, and with
# vit_train built with MPI and mpirun present.  The namespaces and the veth
# pair are named after this shell's PID (parallel runs don't clash) and are
# removed on every exit.
#
# Usage: test_mpi_hosts.sh BUILD/tools/vit_train
set -u
train=$1
. "$(dirname "$0")/mpi_util.sh"
mpi_require "$train"
if [ "$(id -u)" -ne 0 ]; then
    echo "network namespaces need root: skipped"; exit 77
fi
if ! command -v ip >/dev/null || ! ip netns list >/dev/null 2>&1; then
    echo "ip netns (iproute2) is not available: skipped"; exit 77
fi

. "$(dirname "$0")/netns_hosts.sh"
if ! netns_hosts_up; then
    # A container may forbid namespaces even to root: that is this machine's
    # limit, not a failure of the code under test.
    echo "could not make two network namespaces joined by veth ($netns_why): skipped"
    exit 77
fi
export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0"
one_host() { mpirun --oversubscribe --allow-run-as-root -np "$1" "${@:2}"; }

pass=0 fail=0
start=$(date +%s)
stamp() { echo "     | $(( $(date +%s) - start )) s: $*"; }
ok() { pass=$((pass + 1)); echo "ok   $*"; }
bad() { fail=$((fail + 1)); echo "FAIL $*"; }

model=(--dim 32 --depth 2 --heads 2 --mlp 64 --batch 64 --seed 7 --quiet --threads 1
       --patch 2 --patch-stride 0 --patch-pad 0 --tta none)
epochs=3
args=("${model[@]}" --epochs $epochs)

"$train" "${args[@]}" --out "$tmp/one" >"$tmp/one.log" 2>&1 || { cat "$tmp/one.log"; exit 1; }
one_host 2 "$train" "${args[@]}" --check-replicas --out "$tmp/local" >"$tmp/local.log" 2>&1 ||
    { echo "FAIL the 2-rank run on one host:"; cat "$tmp/local.log"; exit 1; }
stamp "2 hosts"
two_hosts "$train" "${args[@]}" --check-replicas --out "$tmp/hosts2" >"$tmp/hosts2.log" 2>&1
rc=$?
# Where each rank ran: its network namespace (the files under
# /proc/self/ns name them); both must differ, so the run crossed the veth.
nsids=$(two_hosts sh -c 'readlink /proc/self/ns/net' 2>/dev/null | sort -u | wc -l)
if [ $rc -eq 0 ] && [ "$nsids" -eq 2 ]; then
    ok "2 ranks on 2 hosts (2 network namespaces) over TCP finished with identical replicas"
else
    bad "2-host run exited $rc, ranks in $nsids namespaces (want 2):"; cat "$tmp/hosts2.log"
fi
if cmp -s "$tmp/hosts2/last.ckpt" "$tmp/local/last.ckpt"; then
    ok "the 2-host checkpoint is bitwise the 1-host 2-rank job's"
else
    bad "the 2-host and 1-host 2-rank checkpoints differ"
fi
if losses_close "$tmp/one/metrics.csv" "$tmp/hosts2/metrics.csv" $epochs; then
    ok "the 2-host losses are one process's within 1e-3 relative ($epochs epochs)"
else
    bad "the 2-host losses differ from one process's"
fi

# The gradients' sum overlapped with the backward (vit_dist_buckets, 16 KiB
# buckets: 35 of them on this model) against one blocking MPI_Allreduce
# after it: three training steps from the same start end bitwise equal,
# every gradient reported final during the steps, across the two hosts and
# on 3 ranks of one host, with one slice a rank and with two (--threads 2:
# each chunk added up over the slices as both report it).
bench=$(dirname "$train")/vit_bench_dist
for where in two_hosts "one_host 3"; do
    for threads in 1 2; do
        if $where "$bench" --config digits --check --steps 3 --bucket-kb 16 --batch 48 \
               --threads $threads >"$tmp/check.log" 2>&1 && grep -q "bitwise equal$" "$tmp/check.log"; then
            ok "overlapped and blocking sums, $where: $(grep -o '[0-9] rank.*' "$tmp/check.log")"
        else
            bad "overlapped and blocking sums, $where, --threads $threads:"; cat "$tmp/check.log"
        fi
    done
done

# A lost rank.  A 2-host run is started, and after its second epoch row
# the rank on the second host is killed (kill -9: no handler, no goodbye).
# mpirun learns it from that host's daemon and takes the job down: the
# survivor must be gone within 10 s, the job exit non-zero, and mpirun's
# notice name the lost rank.  Checkpoints are written to a temporary file
# and renamed (src/core/atomic_file.c), so last.ckpt is a whole one whatever
# the moment of the kill: it must load, and a 2-rank resume must end
# bitwise on the uninterrupted 2-rank run of the same length; a resume on 1
# rank must finish the same epochs with the losses of that run (the bound
# above: only the order of the gradient sums differs).
lost_epochs=15
lost=("${model[@]}" --epochs $lost_epochs)
stamp "lost rank: reference run"
one_host 2 "$train" "${lost[@]}" --out "$tmp/ref" >"$tmp/ref.log" 2>&1 ||
    { echo "FAIL the uninterrupted reference run:"; cat "$tmp/ref.log"; exit 1; }
# One lost-rank run: starts the 2-host job, kills rank 1 after the third
# metrics line, times the survivor's end.  Sets victim, survivor, ms, rc,
# rows, named.
lost_run() {
    rm -rf "$tmp/lost"
    two_hosts "$train" "${lost[@]}" --out "$tmp/lost" >"$tmp/lost.log" 2>&1 &
    job=$!
    for ((i = 0; i < 3000; i++)); do
        [ "$({ wc -l <"$tmp/lost/metrics.csv"; } 2>/dev/null || echo 0)" -ge 3 ] && break
        kill -0 $job 2>/dev/null || break
        sleep 0.01
    done
    victim=$(ip netns pids "$h2" | while read -r p; do
                 [ "$(cat /proc/"$p"/comm 2>/dev/null)" = vit_train ] && echo "$p"; done | head -n 1)
    survivor=$(ip netns pids "$h1" | while read -r p; do
                   [ "$(cat /proc/"$p"/comm 2>/dev/null)" = vit_train ] && echo "$p"; done | head -n 1)
    if [ -z "$victim" ] || [ -z "$survivor" ]; then
        wait $job
        return 1
    fi
    t0=$(date +%s%N)
    kill -9 "$victim"
    # The survivor's end, timed by polling its /proc entry.
    while kill -0 "$survivor" 2>/dev/null && [ $(( $(date +%s%N) - t0 )) -lt 20000000000 ]; do
        sleep 0.05
    done
    ms=$(( ($(date +%s%N) - t0) / 1000000 ))
    wait $job
    rc=$?
    rows=$(($(wc -l <"$tmp/lost/metrics.csv") - 1))
    named=$(grep -cE "process rank 1 .*exited on signal 9" "$tmp/lost.log")
    return 0
}
stamp "lost rank: the run"
lost_run
started=$?
# Open MPI 4.1's mpirun itself sometimes crashes (SIGSEGV in PMIx's
# pmix_server_log, reached from the lost daemon's report) before it prints
# its notice: seen once in about five runs here.  That is the runtime's
# fault, not the survivor's (which was gone in time all the same), so the
# scenario is run once more, and says so, rather than fail on it.
if [ $started -eq 0 ] && [ "$named" -eq 0 ] && grep -q "pmix_server_log" "$tmp/lost.log"; then
    echo "     mpirun itself crashed in PMIx's log path (Open MPI's fault; survivor gone in $ms ms): once more"
    stamp "lost rank: the run, again"
    lost_run
    started=$?
fi
if [ $started -ne 0 ]; then
    bad "the lost-rank run: no rank to kill (it ended before its third epoch row?)"; cat "$tmp/lost.log"
else
    if [ $rc -ne 0 ] && [ $ms -le 10000 ] && [ "$named" -eq 1 ] && [ "$rows" -lt $lost_epochs ]; then
        ok "rank 1 killed (kill -9) after $rows epochs: the survivor was gone in $ms ms, exit $rc, mpirun named rank 1 once"
    else
        bad "lost rank: survivor gone after $ms ms (want <= 10000), exit $rc, $named lines naming rank 1, $rows epochs"
        cat "$tmp/lost.log"
    fi
    stamp "resumes"
    cp "$tmp/lost/last.ckpt" "$tmp/lost.ckpt"
    if "$(dirname "$train")/vit_eval" "$tmp/lost/last.ckpt" --data digits >/dev/null 2>&1 &&
       one_host 2 "$train" "${lost[@]}" --check-replicas --resume "$tmp/lost/last.ckpt" \
           >"$tmp/lost.resume.log" 2>&1 &&
       cmp -s "$tmp/lost/last.ckpt" "$tmp/ref/last.ckpt"; then
        ok "the last checkpoint loads, and its 2-rank resume ends bitwise equal to the uninterrupted run"
    else
        bad "the lost run's checkpoint: 2-rank resume not bitwise equal to the uninterrupted run"
        cat "$tmp/lost.resume.log"
    fi
    mkdir "$tmp/lost1" && cp "$tmp/lost.ckpt" "$tmp/lost1/last.ckpt"
    if "$train" "${lost[@]}" --resume "$tmp/lost1/last.ckpt" >"$tmp/lost1.log" 2>&1 &&
       losses_close "$tmp/ref/metrics.csv" "$tmp/lost1/metrics.csv" -1; then
        ok "resumed on 1 rank instead: to epoch $lost_epochs, the losses within 1e-3 of the uninterrupted 2-rank run"
    else
        bad "the 1-rank resume of the lost run:"; tail -n 3 "$tmp/lost1.log"; paste -d"|" "$tmp/ref/metrics.csv" "$tmp/lost1/metrics.csv" | tail -n 4
    fi
fi

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
