#!/usr/bin/env bash
# Faults during training, and nothing lost:
#   1. kill -9 of vit_train at a random moment (after its first checkpoint),
#      twice, each time followed by --resume: the run that finishes equals an
#      uninterrupted run with the same seed bitwise (final checkpoint byte for
#      byte, metrics apart from the wall-clock column), one thread.
#   2. a full disk while the checkpoint is written (a file-size limit,
#      ulimit -f, smaller than a checkpoint): a clear error, the previous
#      checkpoint unchanged and loadable, no temporary file left; the same
#      when SIGXFSZ is left fatal in the environment (the tools ignore it).
#   3. an output folder that cannot be written, or whose last.ckpt is a
#      folder: a clear error within seconds of the start, before any training
#      time is spent, and nothing written.  (1 also checks that a resume
#      removes the temporary files an interrupted write leaves, and that
#      metrics.csv ends with a whole row after each kill.)
#   4. a loss that turns non-finite (absurd learning rate and weight decay):
#      training stops with a message naming the step, and the checkpoint left
#      behind is exactly the last good one.
# Usage: test_faults.sh TOOLS_DIR   (the folder with vit_train and vit_eval)
# Set FAULTS_SEED to replay the random kill moments of an earlier run.
set -u
tools=$1
. "$(dirname "$0")/check.sh"
seed=${FAULTS_SEED:-$$}
RANDOM=$seed
echo "random seed $seed (FAULTS_SEED=$seed replays the kill moments)"


# A small fast model; one thread so that runs are bitwise reproducible.
small=(--dim 16 --depth 1 --heads 2 --mlp 16 --threads 1 --quiet)
train() { "$tools/vit_train" "${small[@]}" "$@"; }
loads() { "$tools/vit_eval" "$1" >/dev/null 2>&1; }
no_tmp() { ! ls "$1" | grep -q '\.tmp'; }
# A metrics.csv whose every line, the last one too, has its end and the
# header's number of fields (vit_metrics_read refuses a row cut short).
whole_rows() {
    [ -s "$1" ] && [ "$(tail -c 1 "$1" | od -An -c | tr -d ' ')" = '\n' ] &&
        awk -F, 'NR == 1 { n = NF } NF != n { exit 1 }' "$1"
}
now() { date +%s.%N; }
calc() { awk "BEGIN { print $1 }"; } # floating-point arithmetic without bc

# ---- 1. kill -9 and resume ---------------------------------------------------
# Enough epochs that training, not start-up, fills the run: with 16 the
# whole run took 0.4 s, and on a loaded machine a kill aimed within it
# sometimes came after both runs had ended.
epochs=48
t0=$(now)
train --epochs $epochs --out "$tmp/ref" >/dev/null 2>&1 || bad "reference run"
ref_time=$(calc "$(now) - $t0")
echo "reference run: $ref_time s"

# Starts (or resumes) the run in the background, waits for a checkpoint,
# then kills it at a random moment within the time a whole run takes.
# Prints "killed", or "finished" when the run ended before the signal.
kill_randomly() {
    # (vit_train itself in the background, not the train function: $! must
    # be the trainer's pid, not that of a subshell the signal would not reach)
    "$tools/vit_train" "${small[@]}" --epochs $epochs --out "$tmp/run" "$@" >/dev/null 2>&1 &
    local pid=$! waited=0
    while [ ! -e "$tmp/run/last.ckpt" ] && kill -0 $pid 2>/dev/null && [ $waited -lt 1200 ]; do
        sleep 0.05
        waited=$((waited + 1))
    done
    local delay
    delay=$(calc "$ref_time * $RANDOM / 32768 * 0.6")
    sleep "$delay"
    kill -9 $pid 2>/dev/null
    wait $pid 2>/dev/null
    # 128 + 9 when the signal did it; a run that had already ended says 0
    if [ $? -eq 137 ]; then
        echo "killed after a further ${delay}s"
    else
        echo "finished"
    fi
}

interrupted=0
for round in 1 2; do
    if [ $round = 1 ]; then
        what=$(kill_randomly)
    else
        what=$(kill_randomly --resume "$tmp/run/last.ckpt")
    fi
    echo "interruption $round: $what"
    case $what in killed*) interrupted=$((interrupted + 1)) ;; esac
    check "after kill $round the last checkpoint loads" 'loads "$tmp/run/last.ckpt"'
    check "after kill $round metrics.csv ends with a whole row" 'whole_rows "$tmp/run/metrics.csv"'
done
# A killed writer may leave its temporary file; a reader never uses it.
ls "$tmp/run" | grep '\.tmp' | sed 's/^/     left by the kill: /'
check "the run was interrupted at least once (else rerun)" '[ $interrupted -ge 1 ]'
# The kills may or may not have hit a write: plant one such temporary for
# sure, and two files of other names that must be left alone.
: >"$tmp/run/last.ckpt.tmp.Zq81xB"
: >"$tmp/run/metrics.csv.tmp.a8Kx0Q"
: >"$tmp/run/clock.txt.tmp.Pw3n7m"
: >"$tmp/run/last.ckpt.tmp.longer-name"
: >"$tmp/run/notes.txt"
train --epochs $epochs --out "$tmp/run" --resume "$tmp/run/last.ckpt" >/dev/null 2>&1
check "resume to the end exits 0" '[ $? -eq 0 ]'
check "resume removed the temporaries a kill leaves" \
    '! ls "$tmp/run" | grep -qE "^(last\.ckpt|metrics\.csv|clock\.txt)\.tmp\.[A-Za-z0-9]{6}$"'
check "resume left files of other names alone" \
    '[ -e "$tmp/run/last.ckpt.tmp.longer-name" ] && [ -e "$tmp/run/notes.txt" ]'
rm -f "$tmp/run/last.ckpt.tmp.longer-name" "$tmp/run/notes.txt"
check "final checkpoint equals the uninterrupted run's, byte for byte" \
    'cmp "$tmp/ref/last.ckpt" "$tmp/run/last.ckpt"'
check "metrics equal the uninterrupted run's (but for the seconds column)" \
    'diff <(cut -d, -f1-6 "$tmp/ref/metrics.csv") <(cut -d, -f1-6 "$tmp/run/metrics.csv")'

# ---- 2. full disk while the checkpoint is written ------------------------
# The checkpoint of this model is about 28 KB; ulimit -f 8 allows 8 KiB.
train --epochs 3 --stop-after 1 --out "$tmp/disk" >/dev/null 2>&1 || bad "first epoch"
cp "$tmp/disk/last.ckpt" "$tmp/disk.copy"
# With SIGXFSZ ignored (as a subshell trap passes it on), write() fails with
# EFBIG and vit_train must report it.
err=$( (trap '' XFSZ; ulimit -f 8; train --epochs 3 --resume "$tmp/disk/last.ckpt" \
    --out "$tmp/disk") 2>&1 >/dev/null)
rc=$?
echo "     stderr: $err"
check "file-size limit: non-zero exit" '[ $rc -ne 0 ]'
check "file-size limit: one error line naming the checkpoint and the cause" \
    '[ "$(wc -l <<<"$err")" -eq 1 ] && grep -q "last.ckpt.*File too large" <<<"$err"'
check "file-size limit: previous checkpoint unchanged" 'cmp -s "$tmp/disk/last.ckpt" "$tmp/disk.copy"'
check "file-size limit: previous checkpoint loads" 'loads "$tmp/disk/last.ckpt"'
check "file-size limit: no temporary file left" 'no_tmp "$tmp/disk"'
# With SIGXFSZ at its default action (fatal) in the environment: vit_train
# ignores it itself, so the same clean error, not a kill (exit 153).
err=$( (trap - XFSZ; ulimit -f 8; train --epochs 3 --resume "$tmp/disk/last.ckpt" \
    --out "$tmp/disk") 2>&1 >/dev/null)
rc=$?
echo "     stderr (default SIGXFSZ): $err"
check "file-size limit, default SIGXFSZ: not killed by the signal" '[ $rc -ne 153 ]'
check "file-size limit, default SIGXFSZ: non-zero exit" '[ $rc -ne 0 ]'
check "file-size limit, default SIGXFSZ: one error line naming the checkpoint" \
    '[ "$(wc -l <<<"$err")" -eq 1 ] && grep -q "last.ckpt.*File too large" <<<"$err"'
check "file-size limit, default SIGXFSZ: previous checkpoint unchanged" \
    'cmp -s "$tmp/disk/last.ckpt" "$tmp/disk.copy"'
check "file-size limit, default SIGXFSZ: no temporary file left" 'no_tmp "$tmp/disk"'

# ---- 3. output folder that cannot be written ---------------------------
# Root ignores permission bits, so: a folder below a regular file, and an
# output path that is a regular file.  A long run must fail at once.
: >"$tmp/plain"
for out in "$tmp/plain/out" "$tmp/plain"; do
    t0=$(now)
    err=$(train --epochs 1000 --out "$out" 2>&1 >/dev/null)
    rc=$?
    secs=$(calc "$(now) - $t0")
    echo "     stderr: $err ($secs s)"
    check "unwritable --out $out: non-zero exit" '[ $rc -ne 0 ]'
    check "unwritable --out $out: one error line naming it" \
        '[ "$(wc -l <<<"$err")" -eq 1 ] && grep -qF -- "$out" <<<"$err"'
    check "unwritable --out $out: fails before training (${secs}s)" \
        '[ "$(calc "$secs < 10")" = 1 ]'
done
check "unwritable --out: the regular file is untouched" '[ ! -s "$tmp/plain" ]'
# OUT/last.ckpt is a folder: found before training, not after an epoch.
mkdir -p "$tmp/dirckpt/last.ckpt"
t0=$(now)
err=$(train --epochs 1000 --out "$tmp/dirckpt" 2>&1 >/dev/null)
rc=$?
secs=$(calc "$(now) - $t0")
echo "     stderr: $err ($secs s)"
check "last.ckpt is a folder: non-zero exit, one error line naming it" \
    '[ $rc -ne 0 ] && [ "$(wc -l <<<"$err")" -eq 1 ] && grep -q "last.ckpt: exists and is not a regular file" <<<"$err"'
check "last.ckpt is a folder: fails before training (${secs}s)" '[ "$(calc "$secs < 10")" = 1 ]'
if [ "$(id -u)" -ne 0 ]; then
    mkdir "$tmp/ro" && chmod 555 "$tmp/ro"
    err=$(train --epochs 1000 --out "$tmp/ro" 2>&1 >/dev/null)
    check "read-only folder: clear error" '[ $? -ne 0 ] && grep -q "not writable" <<<"$err"'
    check "read-only folder: nothing written" '[ -z "$(ls -A "$tmp/ro")" ]'
fi

# ---- 4. a loss that explodes ---------------------------------------------
# lr 10 with decoupled weight decay 10 multiplies the weights by about
# 1 - lr * wd each step once the warm-up has raised lr: they blow up once
# lr passes 0.2, after good checkpoints have been written, and the epoch's
# mean loss, far over chance's, stops the run.  (A warm-up of 100 epochs,
# a tenth of the run: 0.1 and 0.2 in the first two.)
nan=(--epochs 1000 --lr 10 --weight-decay 10 --warmup 100)
err=$(train "${nan[@]}" --out "$tmp/nan" 2>&1 >/dev/null)
rc=$?
echo "     stderr: $err"
check "diverging run: non-zero exit" '[ $rc -ne 0 ]'
check "diverging run: message names the step" 'grep -qE "diverged.*step [0-9]+" <<<"$err"'
good=$(($(wc -l <"$tmp/nan/metrics.csv") - 1))
echo "     last good epoch: $good"
check "diverging run: at least one good epoch was checkpointed" '[ "$good" -ge 1 ]'
check "diverging run: the checkpoint left behind loads" 'loads "$tmp/nan/last.ckpt"'
check "diverging run: no temporary file left" 'no_tmp "$tmp/nan"'
train "${nan[@]}" --stop-after "$good" --out "$tmp/nan-stop" >/dev/null 2>&1
check "diverging run: its checkpoint is exactly that of a run stopped at epoch $good" \
    'cmp "$tmp/nan/last.ckpt" "$tmp/nan-stop/last.ckpt"'

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
