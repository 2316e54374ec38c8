#!/usr/bin/env bash
# What vit_train prints, as a person reads it:
#   1. in a pseudo-terminal of 80 columns (and of 40): the progress bar is
#      there and no line, nor any piece of one redrawn after a \r, is wider
#      than the terminal's width - 1, so nothing wraps; the ETA reads h:mm:ss;
#      the result line with a long checkpoint path fits 79 columns but for
#      the path, on a line of its own and whole (never shortened: it must
#      paste), the data line is broken at spaces to fit, Ctrl-C's message
#      starts on a fresh line with the resume command as the tool was
#      started, and the epoch table
#      at 75, 60, 40 and 20 columns drops columns rather than wrap.
#   2. to a pipe (COLUMNS=60, no terminal): no \r at all, no line over 100
#      columns, plain progress lines at the VIT_PROGRESS_SECONDS interval
#      and none in a short run at the default 30 s.
#   3. --val N: N on the data line, val loss and val acc columns whose
#      figures are the val_loss and val_acc columns of metrics.csv
#      (appended after the old columns), and a resume that would drop the
#      validation set refused.
# Usage: test_terminal.sh TOOLS_DIR
set -u
tools=$1
. "$(dirname "$0")/check.sh"

# widest FILE [PATTERN]: the longest piece between \r and \n (of those
# matching PATTERN).
widest() { tr '\r' '\n' <"$1" | awk -v p="${2:-}" '$0 ~ p { if (length($0) > m) m = length($0) } END { print m + 0 }'; }
# but_path FILE PATH: widest FILE but for the lines that are PATH alone
# (a path is never cut: the terminal wraps it).
# screen FILE: the lines a terminal shows, each \r going back to the
# line's start and overwriting (trailing spaces dropped).
screen() { awk '{ n = split($0, seg, "\r"); line = ""
                  for (i = 1; i <= n; i++) line = seg[i] substr(line, length(seg[i]) + 1)
                  sub(/ +$/, "", line); print line }' "$1"; }
but_path() { tr '\r' '\n' <"$1" | grep -vxF -- "$2" | awk '{ if (length($0) > m) m = length($0) } END { print m + 0 }'; }
show() { echo "     $1:"; tr '\r' '\n' <"$2" | grep -v '^ *$' | head -"${3:-12}" | sed 's/^/     | /'; }

if ! command -v script >/dev/null; then
    echo "script (util-linux) not found: skipped"; exit 77
fi
cd "$tmp" || exit 1
train=$(printf %q "$tools/vit_train")
# The old recipe's shape and one-pass evaluation, whatever the defaults
# become (the result line's one-pass form and the validation figures below
# are about it); the tta form of the last lines has its own runs.
small="--dim 16 --depth 1 --heads 2 --mlp 16 --threads 1 --batch 8 --patch 2 --patch-stride 0 --patch-pad 0 --tta none"
eta='ETA [0-9]+:[0-5][0-9]:[0-5][0-9]'

# ---- 1. a terminal ------------------------------------------------------
# (--out in a short folder: the last line names the checkpoint's path.)
for cols in 80 40; do
    mkdir "c$cols"
    script -q -e -c "stty cols $cols rows 24; cd c$cols && $train $small --epochs 2 --out t" /dev/null \
        </dev/null >"tty$cols.out" 2>&1
    rc=$?
    show "$cols columns, each \\r a new line" "tty$cols.out" 6
    check "$cols-column terminal: run exits 0" '[ $rc -eq 0 ]'
    check "$cols-column terminal: no bar piece wider than $((cols - 1)) ($(widest "tty$cols.out" ETA))" \
        '[ "$(widest "tty$cols.out" ETA)" -le $((cols - 1)) ] && [ "$(widest "tty$cols.out" ETA)" -gt 0 ]'
done
check "80 columns: no line or piece wider than 79 ($(widest tty80.out))" '[ "$(widest tty80.out)" -le 79 ]'
check "80 columns: the bar is drawn in place, with its 20 cells, steps, loss, speed and ETA" \
    'tr "\r" "\n" <tty80.out | grep -qE "^epoch 1/2 \[[#.]{20}\] step [0-9]+/180 loss [0-9]+\.[0-9]{4} [0-9]+ img/s $eta *$"'
check "40 columns: the bar shrinks to what fits (epoch, ETA kept)" \
    'tr "\r" "\n" <tty40.out | grep -qE "^epoch [12]/2 .*$eta *$"'

# The last line at 80 columns: with a short path, one line; with a path too
# long for it, the checkpoint on its own line within 79 columns, shortened
# in the middle (its start and its end kept).
check "80 columns: one result line with a short path" \
    'tr -d "\r" <tty80.out | grep -qE "^test accuracy [01]\.[0-9]{4} \(2 epochs, [0-9.]+ s, [0-9]+ images/s\); checkpoint t/last.ckpt$"'
long=runs/a_folder_name_long_enough_that_the_whole_result_line/cannot_fit_in_eighty_columns
mkdir long
script -q -e -c "stty cols 80 rows 24; cd long && $train $small --epochs 1 --out $long" /dev/null \
    </dev/null >long.out 2>&1
show "80 columns, a long --out" long.out 4
last=$(tr -d '\r' <long.out | tail -n 3)
check "long path: the checkpoint exists" '[ -f "long/$long/last.ckpt" ]'
check "long path: no line but the path's wider than 79 ($(but_path long.out $long/last.ckpt))" \
    '[ "$(but_path long.out $long/last.ckpt)" -le 79 ]'
check "long path: accuracy, then 'checkpoint' and the whole path on a line of its own (no ...)" \
    '[[ $(head -n 1 <<<"$last") =~ ^test\ accuracy\ [01]\.[0-9]{4}\ \(1\ epochs,\ [0-9.]+\ s,\ [0-9]+\ images/s\)$ ]] &&
     [ "$(sed -n 2p <<<"$last")" = checkpoint ] && [ "$(sed -n 3p <<<"$last")" = "$long/last.ckpt" ]'

# With tta the labelled figures alone fill a line: at 80 columns they stay
# on the first line, the timing and the checkpoint on the second, or the
# checkpoint on a third (shortened) when the path is long.
script -q -e -c "stty cols 80 rows 24; cd c80 && $train $small --tta shift9 --epochs 1 --out tta" /dev/null \
    </dev/null >tta80.out 2>&1
script -q -e -c "stty cols 80 rows 24; cd long && $train $small --tta shift9 --epochs 1 --out tta_$long" \
    /dev/null </dev/null >ttalong.out 2>&1
show "80 columns, tta" tta80.out 3
show "80 columns, tta, a long --out" ttalong.out 3
check "tta, 80 columns: no line wider than 79 ($(widest tta80.out), $(but_path ttalong.out tta_$long/last.ckpt))" \
    '[ "$(widest tta80.out)" -le 79 ] && [ "$(but_path ttalong.out tta_$long/last.ckpt)" -le 79 ]'
acc_re='^test accuracy [01]\.[0-9]{4} \(tta shift9; one pass [01]\.[0-9]{4}\)$'
time_re='^1 epochs, [0-9.]+ s, [0-9]+ images/s'
check "tta, 80 columns: the labelled figures, then the timing and the checkpoint" \
    '[[ $(tr -d "\r" <tta80.out | tail -n 2 | head -n 1) =~ $acc_re ]] &&
     [[ $(tr -d "\r" <tta80.out | tail -n 1) =~ $time_re\;\ checkpoint\ tta/last\.ckpt$ ]]'
check "tta, long path: the figures, the timing, then 'checkpoint' and the whole path" \
    '[[ $(tr -d "\r" <ttalong.out | tail -n 4 | head -n 1) =~ $acc_re ]] &&
     [[ $(tr -d "\r" <ttalong.out | tail -n 3 | head -n 1) =~ $time_re$ ]] &&
     [ "$(tr -d "\r" <ttalong.out | tail -n 2 | head -n 1)" = checkpoint ] &&
     [ "$(tr -d "\r" <ttalong.out | tail -n 1)" = "tta_$long/last.ckpt" ] && [ -f "long/tta_$long/last.ckpt" ]'

# Messages a person copies, by value at 40 and 80 columns and in a pipe:
# the data line broken at spaces to fit; after Ctrl-C typed on the
# terminal (^C echoed after the bar) the message on a fresh line, then the
# resume command as the tool was started (its path, not a bare name), whole
# on a line of its own when the lead does not leave it room.
data_line="data: 1437 train, 360 test images of 8x8x1, 10 classes"
check "80 columns: the data line whole" 'tr -d "\r" <tty80.out | grep -qxF "$data_line"'
check "40 columns: the data line broken at a space, within 39" \
    '[ "$(tr -d "\r" <tty40.out | grep -A1 "^data: " | tr "\n" "|")" = "data: 1437 train, 360 test images of|  8x8x1, 10 classes|" ]'
cmd_want="$tools/vit_train --data digits --resume t/last.ckpt --threads 1"
for cols in 80 40; do
    mkdir "i$cols"
    # ^C once the bar is up (the run is long enough to be inside it).
    (for _ in $(seq 300); do grep -q "ETA" "int$cols.out" 2>/dev/null && break; sleep 0.1; done
     printf '\003'; sleep 1) |
        script -q -e -c "stty cols $cols rows 24; cd i$cols && $train $small --epochs 3000 --out t" /dev/null \
            >"int$cols.out" 2>&1
    rc=$?
    # What the screen shows from the bar's last line on (the ^C may land
    # on the bar, or after an epoch row at the start of a line; and the
    # terminal discards output it has not shown yet when it echoes ^C,
    # so the bar may still be on screen when the program has wiped it).
    lines=$(screen "int$cols.out" | grep -B1 -A3 '^vit_train: interrupted at epoch ')
    show "Ctrl-C at $cols columns, as the screen shows it" <(echo "$lines") 5
    check "$cols columns, Ctrl-C: exit 130, the message at the start of a screen line" \
        '[ $rc -eq 130 ] && [[ $(sed -n 2p <<<"$lines") == "vit_train: interrupted at epoch "* ]]'
    check "$cols columns, Ctrl-C: the message is not written after ^C on the bar's line" \
        '! screen "int$cols.out" | grep -q "\^C *vit_train"'
    check "$cols columns, Ctrl-C: the resume command, with the tool's path, whole on its own line" \
        'tr -d "\r" <"int$cols.out" | grep -qxF "$cmd_want" &&
         tr -d "\r" <"int$cols.out" | grep -qxF "vit_train: continue with:"'
    msg=$(screen "int$cols.out" | sed -n '/^vit_train: interrupted at epoch /,$p')
    check "$cols columns, Ctrl-C: from the message on, no line but the command's wider than $((cols - 1)), no ..." \
        '[ "$(grep -vxF -- "$cmd_want" <<<"$msg" | awk "{ if (length(\$0) > m) m = length(\$0) } END { print m + 0 }")" -le $((cols - 1)) ] &&
         ! grep -qF ... <<<"$msg"'
done
# In a pipe: the message and the command each on one line, the path whole.
mkdir ipipe
(cd ipipe && exec "$tools/vit_train" $small --epochs 3000 --out t >out 2>err) &
pid=$!
for _ in $(seq 300); do [ -s ipipe/t/last.ckpt ] || grep -q "1/3000" ipipe/out 2>/dev/null && break; sleep 0.1; done
kill -INT $pid
wait $pid
rc=$?
show "pipe, SIGINT: stderr" ipipe/err 2
check "pipe, SIGINT: exit 130; the message, then 'continue with:' and the command on one line" \
    '[ $rc -eq 130 ] && [ "$(wc -l <ipipe/err)" -eq 2 ] &&
     [[ $(head -n 1 ipipe/err) =~ ^vit_train:\ interrupted\ at\ epoch\ [0-9]+,\ step\ [0-9]+\ of\ 180\;\ checkpoint\ t/last\.ckpt$ ]] &&
     [ "$(tail -n 1 ipipe/err)" = "vit_train: continue with: $cmd_want" ]'

# The epoch table narrower than its 71 columns: columns give way (img/s,
# lr, time, train acc, test loss, train loss) and nothing wraps; each row
# is as wide as its header.
want_head() {
    case $1 in
        75) echo "epoch  train loss     acc  test loss     acc     time        lr   img/s" ;;
        60) echo "epoch  train loss     acc  test loss     acc     time" ;;
        40) echo "epoch  train loss  test loss     acc" ;;
        20) echo "epoch  test acc" ;;
    esac
}
for cols in 75 60 40 20; do
    script -q -e -c "stty cols $cols rows 24; mkdir -p c$cols && cd c$cols && $train $small --epochs 2 --out t$cols" \
        /dev/null </dev/null >"table$cols.out" 2>&1
    table=$(tr '\r' '\n' <"table$cols.out" | grep -E '^(epoch  |  [12]/2  )')
    head=$(head -n 1 <<<"$table")
    widths=$(awk '{ print length($0) }' <<<"$table" | sort -u | tr '\n' ' ')
    check "$cols columns: the table's header is '$(want_head $cols)'" '[ "$head" = "$(want_head $cols)" ]'
    check "$cols columns: header and 2 rows, all ${#head} wide, under $cols ($widths)" \
        '[ "$(wc -l <<<"$table")" -eq 3 ] && [ "$widths" = "${#head} " ] && [ ${#head} -lt $cols ]'
done

# ---- 2. a pipe ----------------------------------------------------------
COLUMNS=60 VIT_PROGRESS_SECONDS=0.002 "$tools/vit_train" $small --epochs 2 --out p >pipe.out 2>&1
show "to a pipe, VIT_PROGRESS_SECONDS=0.002" pipe.out 5
check "pipe: no \\r" '! grep -q $'"'"'\r'"'"' pipe.out'
check "pipe: no line over 100 columns ($(widest pipe.out))" '[ "$(widest pipe.out)" -le 100 ]'
# tta and ema labelled: the whole result does not fit 100 columns, the
# figures with the timing do; the checkpoint on the next line, whole.
"$tools/vit_train" $small --tta shift9 --ema 0.9 --epochs 1 --out pipe_tta_ema >pipetta.out 2>&1
show "to a pipe, tta and ema" pipetta.out 2
check "pipe, tta and ema: no line over 100 columns ($(widest pipetta.out))" '[ "$(widest pipetta.out)" -le 100 ]'
check "pipe, tta and ema: figures and timing, then the checkpoint" \
    '[[ $(tail -n 2 pipetta.out | head -n 1) =~ ^test\ accuracy\ [01]\.[0-9]{4}\ \(ema\ 0\.9,\ tta\ shift9\;\ one\ pass\ [01]\.[0-9]{4}\;\ 1\ epochs,\ [0-9.]+\ s,\ [0-9]+\ images/s\)$ ]] &&
     [ "$(tail -n 1 pipetta.out)" = "checkpoint pipe_tta_ema/last.ckpt" ]'
check "pipe: plain progress lines inside the epochs" \
    '[ "$(grep -cE "^epoch [12]/2 step [0-9]+/180 loss [0-9]+\.[0-9]{4} [0-9]+ img/s $eta$" pipe.out)" -ge 2 ]'
check "pipe: one row per epoch under the header" \
    '[ "$(grep -c "^epoch  train loss     acc  test loss     acc     time" pipe.out)" -eq 1 ] && [ "$(grep -cE "^ *[12]/2  " pipe.out)" -eq 2 ]'

# ---- 3. --val -----------------------------------------------------------
"$tools/vit_train" $small --epochs 3 --val 100 --out v >val.out 2>&1
show "--val 100, to a pipe (default interval)" val.out 6
check "--val: the data line counts the validation images" \
    'grep -qx "data: 1337 train, 100 val, 360 test images of 8x8x1, 10 classes" val.out'
check "--val: no progress lines in a short run at the default 30 s" '! grep -q "step" val.out'
check "--val: no line over 100 columns" '[ "$(widest val.out)" -le 100 ]'
check "--val: metrics.csv keeps its columns and appends val_acc, val_loss" \
    '[ "$(head -1 v/metrics.csv)" = "epoch,train_loss,train_acc,test_loss,test_acc,lr,seconds,val_acc,val_loss" ]'
# With a validation set the table shows it in the test set's place: row
# "e/3 train_loss train_acc val_loss val_acc time ..." against metrics.csv's
# fields 1, 2, 3, 9 (val_loss) and 8 (val_acc), at the 4 printed decimals.
check "--val: the table heads validation, not test" \
    'grep -qE "^ *epoch +train loss +acc +val loss +acc +time" val.out && ! grep -q "test loss" val.out'
rows=$(grep -E "^ *[0-9]+/3 " val.out | awk '{ split($1, e, "/"); print e[1], $2, $3, $4, $5 }')
want=$(awk -F, 'NR > 1 { printf "%d %.4f %.4f %.4f %.4f\n", $1, $2, $3, $9, $8 }' v/metrics.csv)
echo "     printed: $(tr '\n' ';' <<<"$rows")"
echo "     metrics: $(tr '\n' ';' <<<"$want")"
check "--val: each epoch's figures, val acc too, are metrics.csv's" '[ -n "$rows" ] && [ "$rows" = "$want" ] && [ "$(wc -l <<<"$rows")" -eq 3 ]'
check "--val: the final validation accuracy is the last epoch's" \
    'grep -qx "validation accuracy $(tail -1 <<<"$want" | cut -d" " -f5)" val.out'
"$tools/vit_train" $small --epochs 4 --val 50 --resume v/last.ckpt >drop.out 2>&1
rc=$?
cat drop.out | sed 's/^/     | /'
check "--val: a resume with another count is refused, naming both, metrics untouched" \
    '[ $rc -ne 0 ] && grep -q "held out its last 100 training images for validation, this resume asks for 50" drop.out && [ "$(wc -l <v/metrics.csv)" -eq 4 ]'
"$tools/vit_train" $small --epochs 4 --resume v >keep.out 2>&1
rc=$?
check "--val: a resume of the run's folder, without --val, keeps the run's: epoch 4 with its val_acc, val_loss" \
    '[ $rc -eq 0 ] && [ "$(wc -l <v/metrics.csv)" -eq 5 ] && [ "$(tail -1 v/metrics.csv | tr -cd , | wc -c)" -eq 8 ] && [ -n "$(tail -1 v/metrics.csv | cut -d, -f8)" ]'

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
