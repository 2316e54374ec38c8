#!/usr/bin/env bash
# Data-parallel training over MPI: a 2-rank run must give the losses of a
# single process with the same global batch (up to the order of summation),
# and the ranks' parameters must stay bitwise identical.
# Skipped (exit 77) when the tools were built without MPI or mpirun is absent.
set -u
train=$1
if ! "$train" --version | grep -q MPI; then
    echo "vit_train was built without MPI: skipped"; exit 77
fi
if ! command -v mpirun >/dev/null; then
    echo "mpirun not found: skipped"; exit 77
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# Open MPI refuses root without these; harmless otherwise.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# Open MPI's own allocations are not ours to judge under LeakSanitizer.
export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0"
args=(--dim 32 --depth 2 --heads 2 --mlp 64 --epochs 3 --batch 64 --seed 7 --quiet --threads 1)
pass=0 fail=0

"$train" "${args[@]}" --out "$tmp/one" >"$tmp/one.log" 2>&1 || { cat "$tmp/one.log"; exit 1; }
mpirun --oversubscribe --allow-run-as-root -np 2 "$train" "${args[@]}" --check-replicas \
    --out "$tmp/two" >"$tmp/two.log" 2>&1
rc=$?
if [ $rc -eq 0 ]; then
    pass=$((pass + 1)); echo "ok   2-rank run finished with identical replicas after every epoch"
else
    fail=$((fail + 1)); echo "FAIL 2-rank run exited $rc:"; cat "$tmp/two.log"
fi

# Same losses and accuracies per epoch: the gradient sums differ only in the
# order of float32 additions, so allow 1e-3 relative on the losses (measured
# agreement is far tighter; a wrong share weighting or a missing reduction
# moves them by far more).
if awk -F, 'NR == FNR { if (FNR > 1) { l[$1] = $2; t[$1] = $4 } next }
            FNR > 1 { n++
                      if (!($1 in l)) bad = 1
                      else if ((($2 - l[$1]) ^ 2) > (1e-3 * l[$1]) ^ 2 || (($4 - t[$1]) ^ 2) > (1e-3 * t[$1]) ^ 2) {
                          printf "epoch %s: one rank %s/%s, two ranks %s/%s\n", $1, l[$1], t[$1], $2, $4; bad = 1 } }
            END { exit (bad || n != 3) }' "$tmp/one/metrics.csv" "$tmp/two/metrics.csv"; then
    pass=$((pass + 1)); echo "ok   losses of 2 ranks match one process (train and test loss, 3 epochs)"
else
    fail=$((fail + 1)); echo "FAIL losses differ"; paste -d'|' "$tmp/one/metrics.csv" "$tmp/two/metrics.csv"
fi

# Rank 0 alone writes: one checkpoint that loads.
if "$(dirname "$train")/vit_eval" "$tmp/two/last.ckpt" --data digits >/dev/null 2>&1; then
    pass=$((pass + 1)); echo "ok   the 2-rank checkpoint loads"
else
    fail=$((fail + 1)); echo "FAIL the 2-rank checkpoint does not load"
fi
# What a 2-rank run prints to a file: Open MPI gives rank 0 a pseudo-terminal
# even then, which must not bring the \r bar into the log; rank 0 alone
# prints (one header, one row per epoch).
mpirun --oversubscribe --allow-run-as-root -np 2 "$train" --dim 16 --depth 1 --heads 2 --mlp 16 \
    --epochs 2 --batch 64 --threads 1 --out "$tmp/log" >"$tmp/log.txt" 2>&1
sed 's/^/     | /' "$tmp/log.txt" | head -5
if ! grep -q $'\r' "$tmp/log.txt" && [ "$(grep -c '^epoch  train loss' "$tmp/log.txt")" -eq 1 ] &&
    [ "$(grep -cE '^ *[12]/2  ' "$tmp/log.txt")" -eq 2 ] && [ "$(grep -c '^data: ' "$tmp/log.txt")" -eq 1 ]; then
    pass=$((pass + 1)); echo "ok   2 ranks to a file: no \\r, rank 0 alone prints"
else
    fail=$((fail + 1)); echo "FAIL 2 ranks to a file:"; cat -A "$tmp/log.txt" | head -20
fi
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
