#!/usr/bin/env bash
# The recipe derived from the data and the time budget, through vit_train:
#   1. --budget 10s on the digits ends within it (wall time of the whole
#      command, a ceiling) but not far under (its first plan predicts half
#      of it at least; the wall time is at least 3 s: see below), says
#      its plan in one line, and its last epoch's learning rate is the
#      cosine's end (min_lr within a hair; when a slowdown late in the run
#      made it end inside its last epoch, within 1% of the way from lr to
#      min_lr at the step it ended); with a busy loop competing for
#      a core (started here, killed at the end) a 6 s budget still holds;
#      on a small folder the recipe line says the epochs are as the
#      budget allows (the recipe's 140 no ceiling), and the warm-up is a
#      28th of the epochs planned, as it says (not the recipe's own
#      figure), and no second stem (gray), where a small colour set gets
#      it and local_conv; a budget shorter
#      than one epoch ends inside it, scored, within the budget, its plan
#      line predicting no more than the budget and saying what gives way,
#      every progress line's ETA within it, its cosine laid out to end
#      where it ended (2 steps at most before the steps laid out);
#   2. --epochs with --budget is the most the plan takes; the plan is the
#      run's, and a resume without --budget trains to it;
#   3. a bad duration is refused naming the flag;
#   4. the recipe line: none for the digits (their recipe is the
#      defaults; the warm-up of a run given --epochs, a 28th of them, is
#      not about the data); for 28x28 images the keys it changes (shift 2), and
#      nothing for a key set by flag or in the --config file.
# Skipped under valgrind (tests/valgrind_wrap.sh): it measures wall time.
# Usage: test_budget.sh TOOLS_DIR
set -u
tools=$1
. "$(dirname "$0")/check.sh"
now() { date +%s.%N; }
# near_end LR TOP S K: LR, the learning rate of step S (counted from 1)
# where a budgeted run ended inside an epoch, is the cosine's end from TOP
# to min_lr 1e-05: at most K steps before the end it was laid out to (its
# last step is the plan's; the backstop between steps may cut a few
# before if the pace slows), over at least 0.9 S steps (the warm-up is at
# most a tenth): (1 - cos((K + 1) pi / (0.9 S))) / 2 of the way from
# min_lr to TOP at most.
near_end() {
    awk -v r="$1" -v t="$2" -v s="$3" -v k="$4" 'BEGIN {
        if (!(s > 0)) exit 1
        a = (k + 1) * 3.14159265358979 / (0.9 * s); if (a > 3.14159265358979) a = 3.14159265358979
        exit !(r >= 1e-05 && r <= 1e-05 + (t - 1e-05) * (1 - cos(a)) / 2) }'
}
# timed OUT CMD...: runs CMD with its output into OUT; sets rc and wall
# (the seconds it took).
timed() {
    local out=$1 t0 t1
    shift
    t0=$(now)
    "$@" >"$out" 2>&1
    rc=$?
    t1=$(now)
    wall=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.2f", b - a }')
}

# ---- 1. a 10 s budget -------------------------------------------------------
timed "$tmp/b.txt" "$tools/vit_train" --data digits --budget 10s --out "$tmp/b" --threads 2
echo "wall time $wall s for --budget 10s"
grep -E "^budget" "$tmp/b.txt"
check "budget run exits 0" '[ $rc -eq 0 ]'
# The floor is loose: the plan aims at 95% of the budget at the pace it
# measured, but on a loaded machine a load that lifts mid-run makes the
# epochs faster than planned, and a plan past its middle is not lengthened
# (its cosine is well on), so the run ends early by as much (4.8 s once,
# at 2 tests a core).  A plan that does not use the budget fails the plan
# line's check below (predicted 5-10 s), a run that stops before its plan
# the epochs' check; this one catches a run ended far before either.
check "wall time within 10 s, and over 3" 'awk -v w="$wall" "BEGIN { exit !(w >= 3 && w <= 10) }"'
# (Under load the final views may cost a fifth of the few epochs that fit:
# then the line says they are left out.)
check "the plan in one line" 'grep -qE "^budget 0:00:10: [0-9]+ epochs, [0-9]+ steps, predicted 0:00:(0[5-9]|10) with the scoring \(measured [0-9]+ img/s\)(; the final test-time augmented scoring is left out \(it does not fit, or would take a fifth of the epochs or more\): the figures will be one pass)?$" "$tmp/b.txt"'
planned=$(grep -E "^budget [0-9]" "$tmp/b.txt" | tail -1 | sed -E 's/.* ([0-9]+) epochs.*/\1/')
rows=$(($(wc -l <"$tmp/b/metrics.csv") - 1))
cut=$(grep -E "^budget: it ran out inside epoch" "$tmp/b.txt")
if [ -z "$cut" ]; then
    check "the run did the last plan's epochs ($planned)" '[ "$rows" = "$planned" ]'
    last_lr=$(tail -1 "$tmp/b/metrics.csv" | cut -d, -f6)
    check "the last epoch ends at min_lr ($last_lr)" 'awk -v r="$last_lr" "BEGIN { exit !(r >= 1e-05 && r < 1.1e-05) }"'
else
    # A slowdown late in the run (the sanitizer build beside other tests)
    # left less than the plan's last epoch: the run goes into it and ends
    # inside it, its cosine laid out to end there (or the checks between
    # steps cut it a few steps before a whole last epoch's end, under a
    # sudden load); before, it ended at once with the learning rate 16%
    # of the way down from lr to min_lr (0.00033 of 0.002).  Within 1%:
    # ASan runs beside two busy loops started late ended at 1.01e-05 and
    # 1.76e-05.
    check "the run did the last plan's epochs but the one it ended inside ($planned)" \
        '[ "$rows" = $((planned - 1)) ]'
    last_lr=$(echo "$cut" | sed -E 's/.*learning rate ([0-9.e+-]+) \(min_lr.*/\1/')
    top=$(grep -a -m1 "^lr = " "$tmp/b/last.ckpt" | cut -d' ' -f3)
    check "the epoch it ended inside ends near min_lr ($last_lr, lr $top)" \
        'awk -v r="$last_lr" -v t="$top" "BEGIN { exit !(r >= 1e-05 && r <= 1e-05 + 0.01 * (t - 1e-05)) }"'
fi

# ---- 1b. a ceiling on a busy machine ----------------------------------------
# A loop that keeps one core busy for the whole run (the first plan is
# measured under it; the final shift9 scoring is part of the plan).
( while :; do :; done ) &
busy=$!
timed "$tmp/busy.txt" "$tools/vit_train" --data digits --budget 6s --out "$tmp/busy" --threads 2
kill "$busy" 2>/dev/null
wait "$busy" 2>/dev/null
echo "wall time $wall s for --budget 6s beside a busy loop"
grep -E "^budget|^tta|^test" "$tmp/busy.txt"
check "busy: exits 0" '[ $rc -eq 0 ]'
check "busy: ends within the 6 s budget" 'awk -v w="$wall" "BEGIN { exit !(w <= 6) }"'

# ---- 1c. a small folder: epochs as the budget allows, the warm-up planned --
"$tools/vit_make_data" gray28 "$tmp/small" --count 40 --seed 2 >/dev/null 2>&1
"$tools/vit_train" --data "$tmp/small" --dim 16 --depth 1 --heads 2 --mlp 16 --tta none \
    --budget 8s --out "$tmp/sm" --threads 2 >"$tmp/sm.txt" 2>&1
grep -E "^budget|^recipe" "$tmp/sm.txt"
check "small folder: the recipe line says the epochs are the budget's, the recipe's 140 no ceiling" \
    'grep -qE "^recipe .*epochs as the budget allows \(the recipe.s 140 is no ceiling" "$tmp/sm.txt" &&
     ! grep -qE "^recipe .*at most 140" "$tmp/sm.txt"'
last=$(grep -E "^budget [0-9]" "$tmp/sm.txt" | tail -1 | sed -E 's/.* ([0-9]+) epochs.*/\1/')
warm=$(grep -a "^warmup = " "$tmp/sm/last.ckpt" | sed 's/warmup = //')
check "small folder: the recipe line names the warm-up as the plan's, no recipe figure" \
    'grep -qE "^recipe .*warmup a 28th of the epochs planned" "$tmp/sm.txt" &&
     ! grep -qE "^recipe .*warmup [0-9]" "$tmp/sm.txt"'
check "small folder: the warm-up is a 28th of the $last epochs planned ($warm)" 'awk -v w="$warm" -v e="$last" "BEGIN { exit !(w > 0 && (w - e / 28) < 1e-9 && (e / 28 - w) < 1e-9) }"'
check "small folder, gray: no second stem under the budget" '! grep -qE "^recipe .*stem2" "$tmp/sm.txt"'
# A small colour set under a budget gets the second stem and local_conv,
# said with why; the run has them.
"$tools/vit_make_data" rgb32 "$tmp/rgb" --count 200 >/dev/null 2>&1
"$tools/vit_train" --data "$tmp/rgb" --dim 16 --depth 1 --heads 2 --mlp 16 --tta none \
    --budget 5s --out "$tmp/rg" --threads 2 >"$tmp/rg.txt" 2>&1
grep -E "^recipe" "$tmp/rg.txt"
check "small colour set: the recipe line gives stem2 32 and local_conv 1, and why" \
    'grep -qE "^recipe .*stem 16, stem2 32 \(a colour set under 10000 images, with a budget: [^)]*\), local_conv 1," "$tmp/rg.txt"'
check "small colour set: the run has them" \
    'grep -aqx "stem2 = 32" "$tmp/rg/last.ckpt" && grep -aqx "local_conv = 1" "$tmp/rg/last.ckpt"'

# ---- 1d. a budget shorter than one epoch ----------------------------------
# 28x28 images at a model four times the recipe's width: an epoch takes
# about 5-11 s on two cores (2.5 s at the recipe's model on a quiet Zen 5,
# which then finished its epoch inside the budget and never met the case),
# so the run ends inside it, scored and checkpointed there, within the budget.
"$tools/vit_make_data" gray28 "$tmp/big" --seed 3 >/dev/null 2>&1
# Progress lines every 0.1 s: their ETAs, like the plan line's
# prediction, stay within the budget (they said 0:02:51 and 0:00:43 for a
# 6 s budget).
VIT_PROGRESS_SECONDS=0.1 timed "$tmp/bg.txt" "$tools/vit_train" --data "$tmp/big" --budget 3s \
    --out "$tmp/bg" --threads 2 --dim 128 --depth 6 --heads 4 --mlp 256
echo "wall time $wall s for --budget 3s, an epoch longer than that"
grep -E "^budget|^tta|^test" "$tmp/bg.txt"
check "under one epoch: exits 0" '[ $rc -eq 0 ]'
# Loose: the measurement's one cold step, the run's one step and the
# final scoring of a large model each take a second or more on a loaded
# machine (7-10 jobs a core here: 3.5-5.1 s; the old planner 5-7 s, alone);
# on a quiet one it ends by 3 s.  Without the check between steps its 45
# steps would take 15 s and more.
check "under one epoch: ends within the 3 s budget (twice that under load)" \
    'awk -v w="$wall" "BEGIN { exit !(w <= 6) }"'
check "under one epoch: said, with the step" 'grep -qE "^budget: it ran out inside epoch 1, at step [0-9]+ of [0-9]+, learning rate [0-9.e+-]+ \(min_lr 1e-05\); the figures score" "$tmp/bg.txt"'
# The plan lays the cosine out over the steps that fit, and the checks
# between this epoch's steps follow the pace: the cut comes at most 2
# steps before its end (before, the backstop cut it at 0.000127 at step 29
# of a cosine laid over the epoch's 45).
bg_lr=$(sed -nE 's/^budget: it ran out inside .*learning rate ([0-9.e+-]+) \(min_lr.*/\1/p' "$tmp/bg.txt")
bg_step=$(sed -nE 's/^budget: it ran out inside epoch 1, at step ([0-9]+) .*/\1/p' "$tmp/bg.txt")
bg_top=$(grep -a -m1 "^lr = " "$tmp/bg/last.ckpt" | cut -d' ' -f3)
check "under one epoch: its cosine laid out to end at the cut ($bg_lr at step $bg_step, lr $bg_top)" \
    'near_end "$bg_lr" "$bg_top" "$bg_step" 2'
check "under one epoch: a test figure" 'grep -qE "^test accuracy [01]\.[0-9]{4} " "$tmp/bg.txt"'
check "under one epoch: the plan line predicts no more than the budget, and says what gives way" \
    'grep -qE "^budget 0:00:03: 1 epochs, [0-9]+ steps, predicted at most 0:00:0[0-3] with the scoring \(measured [0-9]+ img/s\); its last epoch and the final scoring do not fit whole: the run will end inside that epoch, its schedule laid out to end at min_lr there, its figures one pass$" "$tmp/bg.txt"'
etas=$(grep -oE "ETA [0-9]+:[0-9]{2}:[0-9]{2}" "$tmp/bg.txt" | sort -u | tr '\n' ' ')
check "under one epoch: every ETA within the budget (${etas:-none})" \
    '[ -n "$etas" ] && ! grep -oE "ETA [0-9]+:[0-9]{2}:[0-9]{2}" "$tmp/bg.txt" | grep -qvE "ETA 0:00:0[0-3]"'

# ---- 2. --epochs caps the plan ----------------------------------------------
"$tools/vit_train" --data digits --budget 10s --epochs 2 --tta none --out "$tmp/c" \
    --threads 2 >"$tmp/c.txt" 2>&1
check "--epochs 2 caps the plan" 'grep -qE "^budget 0:00:10: 2 epochs, 90 steps" "$tmp/c.txt"'
check "and the run does 2 epochs" '[ "$(($(wc -l <"$tmp/c/metrics.csv") - 1))" = 2 ]'

# ---- 2b. the plan is the run's: a resume without --budget goes on to it ----
"$tools/vit_train" --data digits --budget 8s --stop-after 1 --tta none --out "$tmp/r" \
    --threads 2 >"$tmp/r.txt" 2>&1
plan=$(grep -E "^budget [0-9]" "$tmp/r.txt" | tail -1 | sed -E 's/.* ([0-9]+) epochs.*/\1/')
check "--stop-after 1 names the plan ($plan epochs)" 'grep -q "^stopped after epoch 1 of $plan (--stop-after)" "$tmp/r.txt"'
"$tools/vit_train" --resume "$tmp/r/last.ckpt" --threads 2 >"$tmp/r2.txt" 2>&1
check "the resume without --budget trains to the plan" '[ "$(($(wc -l <"$tmp/r/metrics.csv") - 1))" = "$plan" ] && ! grep -q "^budget" "$tmp/r2.txt"'

# ---- 3. durations --------------------------------------------------------------
for bad_value in 5x 0 1m30 -3s "" 2s1h; do
    "$tools/vit_train" --data digits --budget "$bad_value" --out "$tmp/x" >"$tmp/x.txt" 2>&1
    rc=$?
    check "--budget '$bad_value' refused" '[ $rc -eq 2 ] && grep -q "^vit_train: --budget: expected a duration such as 20m, 90s or 1h30m" "$tmp/x.txt"'
done
check "nothing written for a refused budget" '[ ! -e "$tmp/x" ]'

# ---- 4. the recipe line --------------------------------------------------------
small=(--dim 16 --depth 1 --heads 2 --mlp 16 --threads 1 --tta none --epochs 1)
"$tools/vit_train" --data digits "${small[@]}" --out "$tmp/d" >"$tmp/d.txt" 2>&1
check "digits: no recipe line" '! grep -q "^recipe" "$tmp/d.txt"'
check "digits, --epochs 1: the warm-up is a 28th of it" 'grep -aqx "warmup = 0.03571428571428571" "$tmp/d/last.ckpt"'
"$tools/vit_make_data" gray28 "$tmp/g28" --count 64 --seed 1 >/dev/null 2>&1
"$tools/vit_train" --data "$tmp/g28" "${small[@]}" --out "$tmp/g" >"$tmp/g.txt" 2>&1
check "28x28: the recipe line names shift 2 and stem 16" 'grep -qE "^recipe \(not set by flag or --config\): shift 2, stem 16, for [0-9]+ images of 28x28x1" "$tmp/g.txt"'
check "28x28: the run has the stem" 'grep -aq "^stem = 16$" "$tmp/g/last.ckpt"'
"$tools/vit_train" --data "$tmp/g28" "${small[@]}" --shift 1 --stem 0 --out "$tmp/h" >"$tmp/h.txt" 2>&1
check "28x28 with --shift 1 --stem 0: no recipe line" '! grep -q "^recipe" "$tmp/h.txt"'
check "28x28 with --stem 0: the run has none" 'grep -aq "^stem = 0$" "$tmp/h/last.ckpt"'
printf 'shift = 1   # the user'"'"'s\nstem = 8\n' >"$tmp/s.cfg"
"$tools/vit_train" --data "$tmp/g28" "${small[@]}" --config "$tmp/s.cfg" --out "$tmp/i" >"$tmp/i.txt" 2>&1
check "28x28 with shift and stem in --config: no recipe line" '! grep -q "^recipe" "$tmp/i.txt"'
check "28x28 with stem = 8 in --config: kept" 'grep -aq "^stem = 8$" "$tmp/i/last.ckpt"'

# tta follows flip unless it was chosen: a model trained on mirror images
# is scored on them too.
tiny=(--dim 16 --depth 1 --heads 2 --mlp 16 --threads 1 --epochs 1 --flip 1)
"$tools/vit_train" --data "$tmp/g28" "${tiny[@]}" --out "$tmp/f" >"$tmp/f.txt" 2>&1
check "--flip 1, no --tta: the recipe line names tta shift9flip" 'grep -qE "^recipe \(not set by flag or --config\): .*tta shift9flip" "$tmp/f.txt"'
check "and the run is scored with it" 'grep -qE "^test accuracy [0-9.]+ \(tta shift9flip; one pass" "$tmp/f.txt"'
"$tools/vit_train" --data "$tmp/g28" "${tiny[@]}" --tta shift9 --out "$tmp/t" >"$tmp/t.txt" 2>&1
check "--flip 1 --tta shift9: kept" '! grep -q "tta shift9flip" "$tmp/t.txt" && grep -qE "^test accuracy [0-9.]+ \(tta shift9; one pass" "$tmp/t.txt"'

# The second stem under a budget: kept from 15 minutes on (measured there on
# Fashion-MNIST), dropped below.  Only the recipe line is needed: each run
# is stopped once it has printed it.  Needs the Debian package
# dataset-fashion-mnist (CI installs it); without it these checks are left out.
fashion=/usr/share/datasets/fashion-mnist
# recipe_of BUDGET OUT: the recipe line of a Fashion-MNIST run with BUDGET.
recipe_of() {
    "$tools/vit_train" --data "$fashion" --budget "$1" --threads 1 --out "$tmp/$2" \
        >"$tmp/$2.txt" 2>&1 &
    local pid=$! i
    for i in $(seq 600); do
        grep -q "^recipe" "$tmp/$2.txt" && break
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.1
    done
    kill "$pid" 2>/dev/null
    wait "$pid" 2>/dev/null
    grep "^recipe" "$tmp/$2.txt"
}
if [ -d "$fashion" ]; then
    check "Fashion-MNIST, --budget 15m: the recipe keeps stem2 and local_conv" \
        'recipe_of 15m r15 | grep -q "stem2 32, local_conv 1"'
    check "Fashion-MNIST, --budget 14m: it does not" \
        'recipe_of 14m r14 | grep -q "stem 16" && ! grep -q "stem2" "$tmp/r14.txt"'
else
    echo "note: $fashion missing, the budget's stem2 rule left unchecked"
fi

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
