#!/usr/bin/env bash
# The tools' main paths on a tiny model: train, stop, resume, evaluate,
# predict, a run that diverges, and a few bad inputs; and the README's C
# examples.  Under `meson test --setup valgrind` (which sets
# VIT_UNDER_VALGRIND=1) every tool
# runs under valgrind memcheck and must show no memory error and no definite
# or indirect leak: this is how the training loop, checkpoints and resume
# get checked by memcheck, since the suites that train real models
# (test_train, test_seq) are too slow for it.  In other builds the same
# commands run natively (the sanitizer build checks them with ASan).
# Usage: test_tools_memcheck.sh TOOLS_DIR BAD_DIR EXAMPLES_DIR
set -u
tools=$1 bad=$2 examples=$3
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
pass=0 fail=0
memcheck=()
if [ "${VIT_UNDER_VALGRIND:-0}" = 1 ]; then
    # 99, not 1, so that a memcheck finding differs from a tool's own error
    memcheck=(valgrind --error-exitcode=99 --leak-check=full
              --errors-for-leak-kinds=definite,indirect --show-leak-kinds=definite,indirect
              --quiet)
    echo "tools run under: ${memcheck[*]}"
fi

# run NAME WANT_EXIT PATTERN TOOL ARGS...: the tool's exit status must be
# WANT_EXIT and its output (stdout and stderr) must match PATTERN.  TOOL is a
# name in TOOLS_DIR or a path.
run() {
    local name=$1 want=$2 pat=$3 tool=$4
    shift 4
    local out rc
    case $tool in */*) ;; *) tool=$tools/$tool ;; esac
    out=$("${memcheck[@]}" "$tool" "$@" 2>&1)
    rc=$?
    if [ $rc -eq "$want" ] && grep -qE -- "$pat" <<<"$out"; then
        pass=$((pass + 1))
        echo "ok   $name"
    else
        fail=$((fail + 1))
        echo "FAIL $name: exit $rc (want $want), output:"
        sed 's/^/     /' <<<"$out"
    fi
}

small=(--dim 8 --depth 1 --heads 2 --mlp 8 --threads 1 --quiet)
run "train one epoch of two" 0 "test accuracy" vit_train "${small[@]}" --epochs 2 --stop-after 1 \
    --out "$tmp/run"
run "resume to the end" 0 "test accuracy .*2 epochs" vit_train "${small[@]}" --epochs 2 \
    --resume "$tmp/run/last.ckpt" --out "$tmp/run"
run "evaluate" 0 "test split: 360 images" vit_eval "$tmp/run/last.ckpt" --threads 1
run "plot with the run's final.csv" 0 "final.csv: final test accuracy" vit_plot "$tmp/run/metrics.csv" \
    --out "$tmp/curves.png"
run "attention on one figure scale" 0 "scale figure" vit_attn "$tmp/run/last.ckpt" --digit 0 \
    --scale figure --out "$tmp/attn.png"
mkdir -p "$tmp/png4/train/a" "$tmp/png4/train/b" "$tmp/png4/test/a" "$tmp/png4/test/b"
for f in "$tmp"/png4/*/*/; do cp "$bad/gray4x4.png" "$f/1.png"; done
run "export, logits of data the model cannot take" 1 "nothing written" vit_export \
    "$tmp/run/last.ckpt" --out "$tmp/m.safetensors" --logits "$tmp/l.csv" --data "$tmp/png4"
run "predict" 0 "gray4x4.png [01] [0-9.]+" vit_predict "$bad/other_config_4x4.ckpt" "$bad/gray4x4.png"
run "diverging run stops" 1 "diverged.*step [0-9]+" vit_train "${small[@]}" --epochs 3 --lr 10 \
    --weight-decay 10 --warmup 100 --out "$tmp/nan"
run "resume from a checkpoint of another model" 1 "checkpoint's run has dim = 8, this run asks for 16" \
    vit_train "${small[@]}" --dim 16 --resume "$tmp/run/last.ckpt" --out "$tmp/other"
head -c 200 "$tmp/run/last.ckpt" >"$tmp/cut.ckpt"
run "truncated checkpoint" 1 "truncated at byte 200" vit_eval "$tmp/cut.ckpt"
run "checkpoint of an absurd model" 1 "stored config describes" vit_eval "$bad/huge_config.ckpt"
run "PNG of absurd size" 1 "header claims 100000x100000" vit_predict "$bad/other_config_4x4.ckpt" \
    "$bad/huge_header.png"
mkdir -p "$tmp/png/train/a" "$tmp/png/train/b" "$tmp/png/test/a" "$tmp/png/test/b"
for f in "$tmp"/png/*/*/; do cp "$bad/gray4x4.png" "$f/1.png"; done
cp "$bad/gray5x5.png" "$tmp/png/train/b/2.png"
cp "$bad/rgb4x4.png" "$tmp/png/test/a/2.png"
echo "not a picture" >"$tmp/png/train/a/3.png"
run "PNG folder of mixed images, a broken one skipped" 0 "skipped 1 unreadable file \(--skip-bad\)" \
    vit_train "${small[@]}" --data "$tmp/png" --out "$tmp/pngrun" --skip-bad
run "predict a folder into CSV" 1 "3 of 4 images classified into" vit_predict \
    "$tmp/pngrun/last.ckpt" "$tmp/png/train" --csv "$tmp/p.csv" --topk 2 --tta none
printf '1,2,3\n' >"$tmp/bad.csv"
VIT_DIGITS=$tmp/bad.csv run "garbled digits file" 1 "bad.csv:1: 3 fields" vit_train "${small[@]}" \
    --out "$tmp/csvrun"

# The README's examples: the model example trains, scores and saves its
# tensors (test_example_model checks its numbers natively).
run "README model example" 0 "held-out: loss 0\.0[0-9]+, accuracy 0\.99" "$examples/example_model" \
    "$tmp/example.ckpt"
run "README attention example" 0 "^y\[0\] = -0\.552" "$examples/example_attention"

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
