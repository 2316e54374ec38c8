#!/usr/bin/env bash
# Runs a person can trust, on vit_train:
#   1. a folder that holds a run is never silently overwritten: a fresh run
#      there stops before training with one line naming --resume and
#      --force; --force starts over; --resume continues in the checkpoint's
#      own folder (or in --out, with the checkpoint's metrics rows only).
#   2. recipe flags on resume: --epochs extends the run (said so, and
#      stored in its checkpoints, so a later resume goes on to the new
#      end), other differing keys are refused, a finished run says it is
#      complete.
#   3. SIGINT / SIGTERM at a random step: a checkpoint of that step (inside
#      the epoch), the resume command printed, exit 130 / 143, and resuming
#      it ends bitwise equal to an uninterrupted run; a second SIGINT quits
#      at once with nothing written; --ckpt-minutes writes checkpoints
#      inside a long epoch; format-1 and format-2 checkpoints still resume;
#      with weight averaging (ema) a signal-stopped run resumes exactly too.
# Usage: test_runs.sh TOOLS_DIR V1_CKPT V2_CKPT
# Set RUNS_SEED to replay the random signal moments of an earlier run.
set -u
tools=$1
v1=$2
v2=$3
. "$(dirname "$0")/check.sh"
seed=${RUNS_SEED:-$$}
RANDOM=$seed
echo "random seed $seed (RUNS_SEED=$seed replays the signal moments)"


# (The old shape and one pass: the checks read the one-line result.)
small=(--dim 16 --depth 1 --heads 2 --mlp 16 --threads 1 --quiet --patch 2 --patch-stride 0 --patch-pad 0 --tta none)
train() { "$tools/vit_train" "${small[@]}" "$@"; }
rows() { cut -d, -f1-6 "$1"; } # metrics without the wall-clock column
calc() { awk "BEGIN { print $1 }"; }

# ---- 1. no silent overwrite ---------------------------------------------
train --epochs 4 --out "$tmp/ref4" >/dev/null 2>&1 || bad "reference run"
train --epochs 4 --stop-after 2 --out "$tmp/a" >/dev/null 2>&1 || bad "run a"
cp "$tmp/a/last.ckpt" "$tmp/a2.ckpt"
cp "$tmp/a/metrics.csv" "$tmp/a2.csv"
err=$(train --epochs 9 --out "$tmp/a" 2>&1 >/dev/null)
rc=$?
echo "     stderr: $err"
check "fresh run into a folder with a run: refused" '[ $rc -ne 0 ]'
check "refusal: one line naming the folder, --resume and --force" \
    '[ "$(wc -l <<<"$err")" -eq 1 ] && grep -qF -- "$tmp/a already holds a run" <<<"$err" && grep -q -- "--resume $tmp/a/last.ckpt" <<<"$err" && grep -q -- "--force" <<<"$err"'
check "refusal: checkpoint and metrics untouched" \
    'cmp -s "$tmp/a/last.ckpt" "$tmp/a2.ckpt" && cmp -s "$tmp/a/metrics.csv" "$tmp/a2.csv"'
mkdir "$tmp/cwd"
(cd "$tmp/cwd" && "$tools/vit_train" "${small[@]}" --epochs 4 --resume "$tmp/a/last.ckpt" >/dev/null 2>&1)
check "--resume without --out: continues in the checkpoint's folder" \
    'cmp -s "$tmp/a/last.ckpt" "$tmp/ref4/last.ckpt" && [ ! -e "$tmp/cwd/runs" ]'
check "--resume: metrics are the run's own, each epoch once" 'diff <(rows "$tmp/a/metrics.csv") <(rows "$tmp/ref4/metrics.csv")'
# --resume into another folder that holds a different run: refused.
cp "$tmp/a2.ckpt" "$tmp/b.ckpt"
cp "$tmp/a2.csv" "$tmp/metrics.csv"
err=$(train --resume "$tmp/b.ckpt" --out "$tmp/a" 2>&1 >/dev/null)
check "--resume into a folder holding another run: refused, nothing written" \
    '[ $? -ne 0 ] && grep -q -- "--force" <<<"$err" && cmp -s "$tmp/a/last.ckpt" "$tmp/ref4/last.ckpt"'
# ... into a new folder: the rows come from the checkpoint's folder only.
train --resume "$tmp/b.ckpt" --out "$tmp/c" >/dev/null 2>&1
check "--resume --out NEW: final checkpoint equals the uninterrupted run's" 'cmp -s "$tmp/c/last.ckpt" "$tmp/ref4/last.ckpt"'
check "--resume --out NEW: metrics rows 1-2 from the checkpoint's run, 3-4 new" \
    'diff <(rows "$tmp/c/metrics.csv") <(rows "$tmp/ref4/metrics.csv")'
# Metrics of a later run in the folder are cut back to the checkpoint's epoch.
cp "$tmp/a2.ckpt" "$tmp/a/last.ckpt"
train --epochs 4 --resume "$tmp/a/last.ckpt" >/dev/null 2>&1
check "resume of an older checkpoint: metrics cut back, no epoch twice" \
    'diff <(rows "$tmp/a/metrics.csv") <(rows "$tmp/ref4/metrics.csv")'
train --epochs 4 --force --out "$tmp/a" >/dev/null 2>&1
check "--force starts over (equals a fresh run)" \
    'cmp -s "$tmp/a/last.ckpt" "$tmp/ref4/last.ckpt" && diff <(rows "$tmp/a/metrics.csv") <(rows "$tmp/ref4/metrics.csv")'

# --force into a folder with a run, killed -9 before the new run's first
# checkpoint (one step of this wide model over the whole set takes
# seconds): the old run's checkpoint and its metrics stay together, in the
# folder or moved aside into it, never the checkpoint without its history.
mkdir "$tmp/f"
cp "$tmp/ref4/last.ckpt" "$tmp/ref4/metrics.csv" "$tmp/f/"
"$tools/vit_train" --dim 128 --depth 4 --heads 4 --mlp 256 --batch 1437 --threads 1 --quiet \
    --epochs 3 --force --out "$tmp/f" >/dev/null 2>&1 &
pid=$!
waited=0
while [ "$(tail -n +2 "$tmp/f/metrics.csv" | cmp -s - <(tail -n +2 "$tmp/ref4/metrics.csv") && echo same)" = same ] \
    && [ ! -d "$tmp/f/replaced-1" ] && [ $waited -lt 3000 ]; do sleep 0.01; waited=$((waited + 1)); done
sleep 0.3
kill -9 $pid 2>/dev/null
wait $pid 2>/dev/null
whole=no
for c in $(find "$tmp/f" -name last.ckpt); do
    cmp -s "$c" "$tmp/ref4/last.ckpt" && cmp -s "$(dirname "$c")/metrics.csv" "$tmp/ref4/metrics.csv" && whole=yes
done
echo "     after kill -9: $(cd "$tmp/f" && find . -type f | sort | tr '\n' ' ')"
check "--force, kill -9 before the first checkpoint: the old checkpoint keeps its metrics beside it" \
    '[ $whole = yes ]'

# --stop-after: the stop prints the command that continues the run; a
# resume whose checkpoint has already reached the stop epoch is refused at
# once (it used to train nothing, evaluate and exit 0), nothing written.
out=$(train --epochs 4 --stop-after 2 --out "$tmp/sa" 2>&1)
cmd=$(sed -n 's/.*continue with: //p' <<<"$out")
echo "     stdout: $out"
check "--stop-after 2: says it stopped and prints the resume command" \
    'grep -q "stopped after epoch 2 of 4" <<<"$out" && [ -n "$cmd" ]'
cp "$tmp/sa/last.ckpt" "$tmp/sa2.ckpt"
cp "$tmp/sa/metrics.csv" "$tmp/sa2.csv"
for n in 1 2; do
    err=$(train --resume "$tmp/sa/last.ckpt" --stop-after $n 2>&1 >/dev/null)
    rc=$?
    echo "     stderr: $err"
    check "--stop-after $n on a run at epoch 2: refused in one line saying why, nothing written" \
        '[ $rc -ne 0 ] && [ "$(wc -l <<<"$err")" -eq 1 ] && grep -q "already done 2 epochs.*already reached" <<<"$err" && cmp -s "$tmp/sa/last.ckpt" "$tmp/sa2.ckpt" && cmp -s "$tmp/sa/metrics.csv" "$tmp/sa2.csv"'
done
cmd=${cmd/#vit_train/$tools/vit_train}
$cmd --quiet >/dev/null 2>&1
check "the printed command continues to the uninterrupted run's checkpoint and metrics" \
    'cmp -s "$tmp/sa/last.ckpt" "$tmp/ref4/last.ckpt" && diff <(rows "$tmp/sa/metrics.csv") <(rows "$tmp/ref4/metrics.csv")'

# ---- 2. recipe flags on resume ------------------------------------------
cp "$tmp/ref4/last.ckpt" "$tmp/done.ckpt"
out=$(train --resume "$tmp/ref4/last.ckpt" 2>&1)
rc=$?
echo "     stdout: $out"
check "finished run resumed: exit 0, a line saying it is complete and one with its figure, nothing trained" \
    '[ $rc -eq 0 ] && [ "$(wc -l <<<"$out")" -eq 2 ] && grep -q "already complete (4 of 4 epochs)" <<<"$out" &&
     grep -qE "^its test accuracy: [01]\.[0-9]{4} \(.*the model of epoch 4; final.csv\)$" <<<"$out" && cmp -s "$tmp/ref4/last.ckpt" "$tmp/done.ckpt"'
for flag in "--lr 0.01" "--batch 16" "--seed 7" "--dim 32"; do
    err=$(train --resume "$tmp/ref4/last.ckpt" $flag 2>&1 >/dev/null)
    rc=$?
    key=${flag%% *}
    key=${key#--}
    check "resume with $flag: refused naming $key and both values, checkpoint untouched" \
        '[ $rc -ne 0 ] && [ "$(wc -l <<<"$err")" -eq 1 ] && grep -q "has $key = .*asks for ${flag#* }" <<<"$err" && cmp -s "$tmp/ref4/last.ckpt" "$tmp/done.ckpt"'
done
echo "     stderr: $err"
out=$(train --resume "$tmp/ref4/last.ckpt" --epochs 6 2>&1)
rc=$?
echo "     stdout: $out"
check "--epochs 6 on a 4-epoch run: extended, said so with the schedule" \
    '[ $rc -eq 0 ] && grep -q "epochs: 4 -> 6: the run is extended; the cosine schedule is recomputed for 6 epochs" <<<"$out" && grep -q "(6 epochs" <<<"$out"'
check "--epochs 6: metrics hold epochs 1-6 once each" \
    '[ "$(cut -d, -f1 "$tmp/ref4/metrics.csv" | tail -n +2 | tr "\n" " ")" = "1 2 3 4 5 6 " ]'
# The extension is the run's from then on: its checkpoints store the new
# epochs (the config text is plain "key = value" lines inside the file), so
# a later resume without --epochs (the command printed on Ctrl-C has none)
# goes on to the new end instead of finding the run "complete" at epoch 5.
stored() { grep -a "^$1 = " "$2"; } # KEY CKPT: the stored config's line
check "--epochs 6: the final checkpoint stores epochs = 6" \
    '[ "$(stored epochs "$tmp/ref4/last.ckpt")" = "epochs = 6" ]'
mkdir "$tmp/ext"
cp "$tmp/done.ckpt" "$tmp/ext/last.ckpt"
train --resume "$tmp/ext/last.ckpt" --epochs 6 --stop-after 5 >/dev/null 2>&1
check "--epochs 6 --stop-after 5: the epoch-5 checkpoint stores epochs = 6" \
    '[ "$(stored epochs "$tmp/ext/last.ckpt")" = "epochs = 6" ] && grep -q "^5," "$tmp/ext/metrics.csv"'
out=$(train --resume "$tmp/ext/last.ckpt" 2>&1)
rc=$?
echo "     stdout: $out"
check "... resumed without --epochs: goes on to epoch 6, equal to the run extended in one go" \
    '[ $rc -eq 0 ] && ! grep -q "already complete" <<<"$out" && cmp "$tmp/ext/last.ckpt" "$tmp/ref4/last.ckpt"'
mkdir "$tmp/cm"
cp "$tmp/done.ckpt" "$tmp/cm/last.ckpt"
train --resume "$tmp/cm/last.ckpt" --epochs 5 --ckpt-minutes 7 >/dev/null 2>&1
check "--ckpt-minutes 7 on resume: stored in the checkpoint with epochs = 5" \
    '[ "$(stored ckpt_minutes "$tmp/cm/last.ckpt")" = "ckpt_minutes = 7" ] && [ "$(stored epochs "$tmp/cm/last.ckpt")" = "epochs = 5" ]'

# ---- 3. signals ----------------------------------------------------------
# Batches of 4: 360 steps per epoch, so a random moment is almost always
# inside an epoch; a stop that lands on an epoch's end is tried again.  The
# moment is counted from the end of epoch 1 (its metrics row): a delay
# counted from the start raced the run's own start-up and, when the
# reference run had been slowed by other tests, its end.
sigrun=(--epochs 10 --batch 4)
t0=$(date +%s.%N)
train "${sigrun[@]}" --out "$tmp/ref" >/dev/null 2>&1 || bad "reference run"
ref_time=$(calc "$(date +%s.%N) - $t0")
echo "reference run: $ref_time s"
# The third case averages the weights and scores with test-time
# augmentation: the checkpoint then holds the average and the trained
# weights, and both must resume exactly.
ema=(--ema 0.99 --tta shift9)
train "${sigrun[@]}" "${ema[@]}" --out "$tmp/refema" >/dev/null 2>&1 || bad "reference run with ema"
for case in INT TERM INT-ema; do
    sig=${case%-ema}
    extra=() ref=$tmp/ref
    [ "$case" != "$sig" ] && extra=("${ema[@]}") ref=$tmp/refema
    want=$([ $sig = INT ] && echo 130 || echo 143)
    for attempt in 1 2 3 4 5 6; do
        rm -rf "$tmp/s"
        "$tools/vit_train" "${small[@]}" "${sigrun[@]}" ${extra[@]+"${extra[@]}"} --out "$tmp/s" >/dev/null 2>"$tmp/err" &
        pid=$!
        waited=0
        while [ "$(wc -l <"$tmp/s/metrics.csv" 2>/dev/null || echo 0)" -lt 2 ] && [ $waited -lt 6000 ]
        do sleep 0.01; waited=$((waited + 1)); done
        # past the row's checkpoint write, inside the next epoch's steps
        delay=$(calc "$ref_time / 10 * (0.2 + 0.5 * $RANDOM / 32768)")
        sleep "$delay"
        kill -$sig $pid
        wait $pid
        rc=$?
        echo "     SIG$sig after ${delay}s: exit $rc: $(cat "$tmp/err")"
        # Tried again: a stop on an epoch's end, and a run that ended before
        # the signal came (on a loaded machine this shell can sleep past
        # the run's whole 0.2 s); six misses still fail the checks below.
        grep -q "step 0 of" "$tmp/err" || [ $rc -eq 0 ] || break
    done
    check "$case: exit $want" '[ $rc -eq $want ]'
    cmd=$(sed -n 's/.*continue with: //p' "$tmp/err")
    check "$case: stopped inside an epoch, says where and the resume command" \
        'grep -q "at epoch [0-9]*, step [1-9][0-9]* of 360; checkpoint $tmp/s/last.ckpt" "$tmp/err" && [ -n "$cmd" ]'
    check "$case: no temporary file left" '! ls "$tmp/s" | grep -q tmp'
    # The printed command, with the tool's folder and the model flags.
    cmd=${cmd/#vit_train/$tools/vit_train}
    $cmd --quiet >/dev/null 2>&1
    check "$case: the printed command resumes to a final checkpoint equal to the uninterrupted run's" \
        'cmp "$tmp/s/last.ckpt" "$ref/last.ckpt"'
    check "$case: metrics equal the uninterrupted run's" 'diff <(rows "$tmp/s/metrics.csv") <(rows "$ref/metrics.csv")'
done
check "ema: the averaged run differs from the plain one" '! cmp -s "$tmp/ref/last.ckpt" "$tmp/refema/last.ckpt"'

# A second SIGINT quits at once: one step of this model over the whole
# training set takes seconds, the second signal comes 0.1 s after the first.
rm -rf "$tmp/slow"
"$tools/vit_train" --dim 128 --depth 4 --heads 4 --mlp 256 --batch 1437 --threads 1 --quiet \
    --epochs 3 --out "$tmp/slow" >/dev/null 2>&1 &
pid=$!
sleep 0.5
kill -INT $pid
sleep 0.1
t0=$(date +%s.%N)
kill -INT $pid
wait $pid
rc=$?
secs=$(calc "$(date +%s.%N) - $t0")
echo "     second SIGINT: exit $rc after ${secs}s"
check "second SIGINT: exit 130 at once, no checkpoint or temporary written" \
    '[ $rc -eq 130 ] && [ ! -e "$tmp/slow/last.ckpt" ] && ! ls "$tmp/slow" | grep -q tmp'

# --ckpt-minutes: checkpoints inside the epochs (0.0002 min = 12 ms; an
# epoch of 1437 single-image steps of this wider model lasts ~10 times
# longer, so the first timed checkpoint lands well inside epoch 1 even on
# a fast machine); killed -9 right after it, the run resumes from inside
# an epoch to the uninterrupted result.
timed=(--epochs 3 --batch 1 --dim 48 --mlp 96 --ckpt-minutes 0.0002)
train "${timed[@]}" --out "$tmp/tref" >/dev/null 2>&1
"$tools/vit_train" "${small[@]}" "${timed[@]}" --out "$tmp/t" >/dev/null 2>&1 &
pid=$!
waited=0
while [ ! -e "$tmp/t/last.ckpt" ] && [ $waited -lt 1000 ]; do sleep 0.01; waited=$((waited + 1)); done
kill -9 $pid 2>/dev/null
wait $pid 2>/dev/null
out=$("$tools/vit_train" --threads 1 "${timed[@]}" --resume "$tmp/t/last.ckpt" 2>&1)
echo "     $(grep resuming <<<"$out")"
check "--ckpt-minutes: the checkpoint was taken inside an epoch" \
    'grep -q "resuming inside epoch [0-9] at step [1-9][0-9]* of 1437" <<<"$out"'
check "--ckpt-minutes: resumed from inside the epoch, equal to the uninterrupted run" \
    'cmp "$tmp/t/last.ckpt" "$tmp/tref/last.ckpt"'

# ---- format 1 ------------------------------------------------------------
# $v1: epoch 1 of 2 of --dim 8 --depth 1 --heads 2 --mlp 8, written before
# the format gained the position inside an epoch.  Its epoch 1 came from one
# build on one machine; another build's floats round differently, so the
# checks are that it resumes, trains epoch 2, and does so the same way twice
# (test_checkpoint reads its fields one by one).
mkdir "$tmp/v1" "$tmp/v1b"
cp "$v1" "$tmp/v1/last.ckpt"
cp "$v1" "$tmp/v1b/last.ckpt"
"$tools/vit_train" --threads 1 --quiet --resume "$tmp/v1/last.ckpt" >/dev/null 2>&1
rc1=$?
"$tools/vit_train" --threads 1 --quiet --resume "$tmp/v1b/last.ckpt" >/dev/null 2>&1
rc2=$?
check "a format-1 checkpoint resumes: exit 0, epoch 2 trained and written" \
    '[ $rc1 -eq 0 ] && [ $rc2 -eq 0 ] && ! cmp -s "$v1" "$tmp/v1/last.ckpt" && grep -q "^2," "$tmp/v1/metrics.csv"'
check "a format-1 checkpoint resumes the same way twice" \
    'cmp "$tmp/v1/last.ckpt" "$tmp/v1b/last.ckpt" && cmp <(rows "$tmp/v1/metrics.csv") <(rows "$tmp/v1b/metrics.csv")'

# ---- format 2 ------------------------------------------------------------
# $v2: --dim 8 --depth 1 --heads 2 --mlp 8 --batch 4 --epochs 3, SIGINT
# inside epoch 2 at step 270 of 360, written by the format-2 code (before
# weight averaging).  As for format 1: it resumes from inside its epoch,
# trains to the end, the same way twice, and writes the current format (5).
mkdir "$tmp/v2" "$tmp/v2b"
cp "$v2" "$tmp/v2/last.ckpt"
cp "$v2" "$tmp/v2b/last.ckpt"
out=$("$tools/vit_train" --threads 1 --resume "$tmp/v2/last.ckpt" 2>&1)
rc1=$?
"$tools/vit_train" --threads 1 --quiet --resume "$tmp/v2b/last.ckpt" >/dev/null 2>&1
rc2=$?
check "a format-2 checkpoint resumes inside its epoch: exit 0, epoch 3 trained and written" \
    '[ $rc1 -eq 0 ] && [ $rc2 -eq 0 ] && grep -q "resuming inside epoch 2 at step 270 of 360" <<<"$out" && grep -q "^3," "$tmp/v2/metrics.csv"'
check "a format-2 checkpoint resumes the same way twice, into format 5" \
    'cmp "$tmp/v2/last.ckpt" "$tmp/v2b/last.ckpt" && [ "$(od -A n -t u1 -j 8 -N 1 "$tmp/v2/last.ckpt" | tr -d " ")" = 5 ]'

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
