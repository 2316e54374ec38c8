#!/usr/bin/env bash
# Command-line behaviour of the tools: help, version, and one clear error
# line with a non-zero exit for each kind of bad input.  Usage:
#   test_cli.sh TOOLS_DIR README EXAMPLE_SOURCE MODEL_EXAMPLE_SOURCE EXAMPLES_DIR
set -u
tools=$1 readme=$2 example=$3 model_example=$4 examples=$5
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
pass=0 fail=0

# expect NAME WANT_EXIT PATTERN CMD...: runs CMD, checks the exit status and
# that stdout+stderr match PATTERN (grep -E).  exact: the same, but
# stdout+stderr must be exactly PATTERN (the whole message).
expect() {
    local name=$1 want=$2 pat=$3
    shift 3
    local out rc
    out=$("$@" 2>&1)
    rc=$?
    if { [ "$want" = nonzero ] && [ $rc -ne 0 ]; } || [ "$rc" = "$want" ]; then
        if { [ -n "${whole:-}" ] && [ "$out" = "$pat" ]; } ||
            { [ -z "${whole:-}" ] && grep -qE -- "$pat" <<<"$out"; }; then
            pass=$((pass + 1)); echo "ok   $name"; return
        fi
    fi
    fail=$((fail + 1))
    echo "FAIL $name: exit $rc (want $want), output:"; sed 's/^/     /' <<<"$out"
    if [ -n "${whole:-}" ]; then echo "     want exactly:"; else echo "     want a match of:"; fi
    sed 's/^/     /' <<<"$pat"
}
exact() { whole=1 expect "$@"; }
# in_dir DIR CMD...: CMD run from DIR (expect and exact run it in a subshell).
in_dir() { cd "$1" && shift && "$@"; }

expect "help" 0 "usage: vit_train" "$tools/vit_train" --help
expect "version" 0 "vit_train [0-9]+\.[0-9]+" "$tools/vit_train" --version
# --help shows the defaults as a config file has them, not 1.0000000000000001e-05.
expect "help: lr default" 0 "^  --lr +peak learning rate \(default 0\.002\)$" "$tools/vit_train" --help
expect "help: min-lr default" 0 "^  --min-lr +final learning rate of the cosine decay \(default 1e-05\)$" \
    "$tools/vit_train" --help
expect "help: weight-decay default" 0 "^  --weight-decay +AdamW decoupled weight decay \(default 0\.05\)$" \
    "$tools/vit_train" --help
exact "unknown flag" 2 "vit_train: unknown option --bogus (see --help)" "$tools/vit_train" --bogus 1
exact "flag without value" 2 "vit_train: --epochs: missing value" "$tools/vit_train" --epochs
exact "zero dim" 2 "vit_train: --dim: 0 is out of range [1, 65536]" "$tools/vit_train" --dim 0
exact "negative epochs" 2 "vit_train: --epochs: -3 is out of range [1, 1000000]" "$tools/vit_train" --epochs -3
exact "not a number" 2 "vit_train: --lr: expected a number, got 'fast'" "$tools/vit_train" --lr fast
# The architecture: an unknown one is one line naming the known ones.
expect "unknown arch" 2 "^vit_train: --arch: unknown architecture 'swan' \(known: vit(, [a-z0-9_]+)*\)$" \
    "$tools/vit_train" --arch swan

# Flags as people type them: --key=value and --key value, '-' and '_' alike,
# for config keys and the tools' own flags; the option named once.
exact "--key=value" 2 "vit_train: --epochs: 0 is out of range [1, 1000000]" "$tools/vit_train" --epochs=0
# precision: a bad value is one line; bf16 on a CPU without it (hidden by
# VIT_BF16_CPU=none) trains in float32 and says so in one line on stderr,
# even with --quiet (docs/design.md, "bfloat16 training").  The reason is
# the first that holds: a build without libxsmm names that before the CPU.
exact "bad precision" 2 "vit_train: --precision: expected fp32, bf16 or auto, got 'half'" \
    "$tools/vit_train" --precision half
expect "bf16 falls back" 0 \
    "^vit_train: precision fp32 \(bf16 was asked for, but this (CPU has no AVX-512 BF16|library was built without libxsmm)\)$" \
    env VIT_BF16_CPU=none "$tools/vit_train" --precision bf16 --epochs 1 --quiet --out "$tmp/bf16"
expect "bf16 fallback trained" 0 "last.ckpt" ls "$tmp/bf16"
exact "--key=value, value with '='" 2 "vit_train: --lr: expected a number, got '1=2'" \
    "$tools/vit_train" --lr=1=2
exact "--key= (empty value)" 2 "vit_train: --lr: expected a number, got ''" "$tools/vit_train" --lr=
exact "named once" 2 "vit_train: --lr: expected a number, got '1e-3x'" "$tools/vit_train" --lr 1e-3x
exact "named once, =" 2 "vit_train: --lr: expected a number, got '1e-3x'" "$tools/vit_train" --lr=1e-3x
exact "underscore key" 2 "vit_train: --min-lr: expected a number, got 'x'" "$tools/vit_train" --min_lr x
exact "underscore key=" 2 "vit_train: --weight-decay: 11 is out of range [0, 10]" \
    "$tools/vit_train" --weight_decay=11
exact "tool flag=" 2 "vit_train: --threads: expected an integer in [1, 256], got '0'" \
    "$tools/vit_train" --threads=0
exact "tool flag with underscore" 2 "vit_train: --ckpt-every: expected an integer in [1, 1073741824], got '0'" \
    "$tools/vit_train" --ckpt_every 0
exact "negative value after a flag" 2 "vit_train: --lr: -1 is out of range [1e-12, 10]" "$tools/vit_train" --lr -1
exact "no-value flag given one" 2 "vit_train: --quiet: takes no value, got 'yes'" "$tools/vit_train" --quiet=yes
exact "missing value at the end" 2 "vit_train: --out: missing value" "$tools/vit_train" --quiet --out
exact "suggest a config key" 2 "vit_train: unknown option --epoch; did you mean --epochs?" \
    "$tools/vit_train" --epoch 2
exact "suggest, = form" 2 "vit_train: unknown option --epoch; did you mean --epochs?" \
    "$tools/vit_train" --epochs=2 --epoch=2
exact "suggest, swapped letters" 2 "vit_train: unknown option --ephocs; did you mean --epochs?" \
    "$tools/vit_train" --ephocs 2
exact "suggest, underscores" 2 "vit_train: unknown option --weight-decy; did you mean --weight-decay?" \
    "$tools/vit_train" --weight_decy 0.1
exact "suggest a tool flag" 2 "vit_train: unknown option --chekc-replicas; did you mean --check-replicas?" \
    "$tools/vit_train" --chekc-replicas
exact "vit_import: suggest --out" 2 "vit_import: unknown option --ot; did you mean --out?" \
    "$tools/vit_import" model.safetensors --ot x.ckpt
exact "vit_import: --out needs a value" 2 "vit_import: --out: missing value" \
    "$tools/vit_import" model.safetensors --out
exact "nothing close" 2 "vit_train: unknown option --colour (see --help)" "$tools/vit_train" --colour blue
exact "eval: suggest" 2 "vit_eval: unknown option --splt; did you mean --split?" "$tools/vit_eval" x.ckpt --splt test
exact "eval: flag=" 2 "vit_eval: --split: expected test or train, got 'val'" "$tools/vit_eval" x.ckpt --split=val
exact "predict: suggest" 2 "vit_predict: unknown option --versoin; did you mean --version?" \
    "$tools/vit_predict" --versoin
# One parser for --tta in both scoring tools (cli_tta): the same line,
# "auto" refused (it is the config key's, not theirs), the value kept.
exact "predict: --tta auto" 2 "vit_predict: --tta: expected none, shift9 or shift9flip, got 'auto'" \
    "$tools/vit_predict" x.ckpt a.png --tta auto
exact "eval: --tta=" 2 "vit_eval: --tta: expected none, shift9 or shift9flip, got 'Shift9'" \
    "$tools/vit_eval" x.ckpt --tta=Shift9
exact "attn: flag=" 2 "vit_attn: --digit: expected an integer in [0, 1073741824], got '-1'" \
    "$tools/vit_attn" x.ckpt --digit=-1
exact "plot: suggest" 2 "vit_plot: unknown option --tilte; did you mean --title?" "$tools/vit_plot" m.csv --tilte x
exact "export: suggest" 2 "vit_export: unknown option --logit; did you mean --logits?" \
    "$tools/vit_export" x.ckpt --logit l.csv
exact "seq: flag=" 2 "vit_seq: --task: expected reverse or sort, got 'copy'" "$examples/vit_seq" --task=copy
# The option loop these tools share (cli_arg): --help and -h, --version, and
# one argument more than the tool takes.
for t in "$tools"/vit_eval "$tools"/vit_export "$tools"/vit_plot "$tools"/vit_attn "$examples"/vit_seq; do
    n=${t##*/}
    expect "$n: help" 0 "^usage: $n" "$t" --help
    expect "$n: -h" 0 "^usage: $n" "$t" -h
    expect "$n: version" 0 "^$n [0-9]+\.[0-9]+\.[0-9]+ \(float32\)$" "$t" --version
done
exact "eval: extra argument" 2 "vit_eval: unexpected argument 'b.ckpt' (see --help)" \
    "$tools/vit_eval" a.ckpt b.ckpt
exact "export: extra argument" 2 "vit_export: unexpected argument 'b.ckpt' (see --help)" \
    "$tools/vit_export" a.ckpt b.ckpt --out x.safetensors
exact "plot: extra argument" 2 "vit_plot: unexpected argument 'b.csv' (see --help)" \
    "$tools/vit_plot" a.csv b.csv
exact "attn: third argument" 2 "vit_attn: unexpected argument 'c.png' (see --help)" \
    "$tools/vit_attn" a.ckpt b.png c.png
exact "seq: any argument" 2 "vit_seq: unexpected argument 'reverse' (see --help)" \
    "$examples/vit_seq" reverse
exact "article: flag=" 2 "vit_article: --seed: expected an integer in [0, 2147483647], got 'x'" \
    "$examples/vit_article" --seed=x all
expect "heads not dividing dim" 1 "heads: 3 does not divide dim 64" \
    "$tools/vit_train" --heads 3 --out "$tmp/h" --quiet
expect "patch not dividing image" 1 "patch: 3 does not divide" \
    "$tools/vit_train" --patch 3 --patch-stride 0 --patch-pad 0 --out "$tmp/p" --quiet
expect "missing data folder" 1 "$tmp/none" "$tools/vit_train" --data "$tmp/none" --out "$tmp/o"
expect "missing config" 1 "$tmp/none.cfg: cannot open" "$tools/vit_train" --config "$tmp/none.cfg"
printf 'dim = 64\nheads four\n' >"$tmp/bad.cfg"
expect "garbled config" 1 "bad.cfg:2: expected 'key = value'" "$tools/vit_train" --config "$tmp/bad.cfg"
: >"$tmp/file"
expect "output folder not writable" 1 "$tmp/file/out" \
    "$tools/vit_train" --out "$tmp/file/out" --epochs 1 --quiet
[ -e "$tmp/file/out" ] && { fail=$((fail + 1)); echo "FAIL output folder: something was created"; }

# A tiny real run, then the other tools on its checkpoint.  Without --out it
# writes runs/digits; its flags in both forms (the shape checked below by
# "resume with another shape").
expect "tiny training run" 0 "^test accuracy 0\.[0-9]+ .*; checkpoint runs/digits/last\.ckpt$" \
    in_dir "$tmp" "$tools/vit_train" --data=digits --dim=16 --depth 1 --patch 2 --patch-stride=0 \
    --patch-pad 0 --tta=none \
    --heads=2 --mlp=16 --epochs 1 --quiet --threads=1
mv "$tmp/runs/digits" "$tmp/run"
expect "metrics written" 0 "^epoch,train_loss,train_acc,test_loss,test_acc,lr,seconds" cat "$tmp/run/metrics.csv"
expect "eval" 0 "test split: 360 images, loss [0-9.]+, accuracy 0\.[0-9]+" \
    "$tools/vit_eval" "$tmp/run/last.ckpt" --data digits
expect "eval, --key=value" 0 "^train split: 1437 images, loss [0-9.]+, accuracy 0\.[0-9]+$" \
    "$tools/vit_eval" "$tmp/run/last.ckpt" --data=digits --split=train
expect "eval missing checkpoint" 1 "$tmp/none.ckpt" "$tools/vit_eval" "$tmp/none.ckpt"
# A run's folder stands for its checkpoint: last.ckpt here (no best.ckpt),
# the same figures; a folder without one is refused by name.
by_file=$("$tools/vit_eval" "$tmp/run/last.ckpt" --data digits 2>&1)
by_dir=$("$tools/vit_eval" "$tmp/run" --data digits 2>&1)
if [ -n "$by_file" ] && [ "$by_dir" = "$by_file" ]; then
    pass=$((pass + 1)); echo "ok   eval of the run's folder: last.ckpt's output"
else
    fail=$((fail + 1)); echo "FAIL eval of the run's folder:"; sed 's/^/     /' <<<"$by_dir"
fi
mkdir -p "$tmp/empty"
exact "eval: a folder without a run" 2 "vit_eval: checkpoint $tmp/empty: a folder without last.ckpt, so not a run's folder (give a run's folder or a checkpoint file)" \
    "$tools/vit_eval" "$tmp/empty"
exact "resume: a folder without a run" 2 "vit_train: --resume $tmp/empty: a folder without last.ckpt, so not a run's folder (give a run's folder or a checkpoint file)" \
    "$tools/vit_train" --resume "$tmp/empty"
head -c 100 "$tmp/run/last.ckpt" >"$tmp/cut.ckpt"
expect "eval truncated checkpoint" 1 "cut.ckpt.*truncated" "$tools/vit_eval" "$tmp/cut.ckpt"
echo "not a png" >"$tmp/x.png"
expect "predict not a PNG" 1 "x.png" "$tools/vit_predict" "$tmp/run/last.ckpt" "$tmp/x.png"
# vit_predict on an image of another size and kind: refused, or fitted with
# --fit (the readme's folder is the source tree, where tests/data/bad is).
rgb="$(dirname "$readme")/tests/data/bad/rgb4x4.png"
expect "predict: another size without --fit" 1 "rgb4x4.png: image is 4x4x3 but the model expects 8x8x1 \(--fit" \
    "$tools/vit_predict" "$tmp/run/last.ckpt" "$rgb"
expect "predict --fit" 0 "^[^ ]*rgb4x4.png [0-9] [01]\.[0-9]{4}$" \
    "$tools/vit_predict" --fit "$tmp/run/last.ckpt" "$rgb"
expect "predict --fit --topk 3" 0 "^[^ ]*rgb4x4.png( [0-9] [01]\.[0-9]{4}){3}$" \
    "$tools/vit_predict" --fit "$tmp/run/last.ckpt" --topk 3 "$rgb"
expect "predict --topk 0" 2 "--topk: expected a positive integer, got '0'" \
    "$tools/vit_predict" --topk 0 "$tmp/run/last.ckpt" "$rgb"
expect "resume with another shape" 1 "checkpoint's run has dim = 16, this run asks for 32" \
    "$tools/vit_train" --resume "$tmp/run/last.ckpt" --dim 32 --depth 1 --heads 2 --mlp 16 \
    --out "$tmp/run2" --quiet

# Pictures and export on the same checkpoint.
expect "attention picture" 0 "wrote" "$tools/vit_attn" "$tmp/run/last.ckpt" --digit 0 --out "$tmp/a.png"
[ -s "$tmp/a.png" ] || { fail=$((fail + 1)); echo "FAIL attention picture: no file"; }
expect "attention query out of range" 1 "outside the" \
    "$tools/vit_attn" "$tmp/run/last.ckpt" --digit 0 --query 9,9 --out "$tmp/b.png"
[ -e "$tmp/b.png" ] && { fail=$((fail + 1)); echo "FAIL attention query: a file was written"; }
# A Swin's maps (issue: vit_attn on a Swin): 8x8 digits in patches of 1,
# stage 1 an 8x8 grid in windows of 4 (block 2 shifted by 2), stage 2 a 4x4
# grid in one window with 2 heads.  Query (1,6): block 1's window is rows
# 0..3, columns 4..7; block 2's shifted window holds rows 6,7,0,1 and
# columns 6,7,0,1, of which the region mask leaves the query rows 0..1,
# columns 6..7; stage 2 takes patch (0,3) of its one window.  Every line's
# argmax must lie there; the PNG is as large as it says (its IHDR), 4 rows
# (one heading each) of up to 2 heads.
expect "swin: tiny run" 0 "checkpoint" "$tools/vit_train" --data digits --arch swin --patch 1 \
    --window 4 --stages 2 --depth-2 2 --epochs 1 --quiet --threads 1 --tta none --out "$tmp/swin"
png_size() { od -An -tu1 -j16 -N8 "$1" | awk '{printf "%dx%d", $1*16777216+$2*65536+$3*256+$4, $5*16777216+$6*65536+$7*256+$8}'; }
sw_out=$("$tools/vit_attn" "$tmp/swin" --digit 0 --query 1,6 --out "$tmp/sw.png" 2>&1)
sw_rc=$?
sw_ok=1
[ $sw_rc -eq 0 ] || sw_ok=0
[ "$(grep -c '^L[0-9] H[0-9] ' <<<"$sw_out")" = 6 ] || sw_ok=0
while read -r layer r c; do
    case $layer in
    L0) [ "$r" -le 3 ] && [ "$c" -ge 4 ] ;;
    L1) [ "$r" -le 1 ] && [ "$c" -ge 6 ] ;;
    L2 | L3) [ "$r" -le 3 ] && [ "$c" -le 3 ] ;;
    *) false ;;
    esac || { sw_ok=0; echo "     $layer: argmax ($r,$c) outside the query's window"; }
done < <(sed -nE 's/^(L[0-9]) H[0-9] .*largest on patch \(([0-9]+),([0-9]+)\)$/\1 \2 \3/p' <<<"$sw_out")
grep -qE '^L1 H0 \(stage 1 block 2, shifted, 8x8 grid\): weights 0\.000-' <<<"$sw_out" || sw_ok=0
grep -qE '^L3 H1 \(stage 2 block 2, 4x4 grid\): weights ' <<<"$sw_out" || sw_ok=0
grep -q "class token" <<<"$sw_out" && sw_ok=0
said=$(sed -nE 's/^wrote .* \(([0-9]+x[0-9]+) pixels\): 4 layers x up to 2 heads, query 1,6, scale absolute$/\1/p' <<<"$sw_out")
[ -n "$said" ] && [ "$said" = "$(png_size "$tmp/sw.png")" ] && [ "$said" = 415x699 ] || sw_ok=0
if [ $sw_ok = 1 ]; then pass=$((pass + 1)); echo "ok   swin: vit_attn maps"; else
    fail=$((fail + 1)); echo "FAIL swin: vit_attn maps (exit $sw_rc; png $(png_size "$tmp/sw.png")):"
    sed 's/^/     /' <<<"$sw_out"; fi
expect "swin: default query is the centre patch" 0 "^wrote .*: 4 layers x up to 2 heads, query 4,4 \(centre\), " \
    "$tools/vit_attn" "$tmp/swin" --digit 0 --out "$tmp/sw2.png"
exact "swin: --query cls refused" 1 "vit_attn: --query cls: a swin model has no class token; give --query R,C (a patch of its first 8x8 grid), or leave --query out for the centre patch (4,4)" \
    "$tools/vit_attn" "$tmp/swin" --digit 0 --query cls --out "$tmp/sw3.png"
[ -e "$tmp/sw3.png" ] && { fail=$((fail + 1)); echo "FAIL swin: --query cls wrote a file"; }
expect "training curves" 0 "" "$tools/vit_plot" "$tmp/run/metrics.csv" --out "$tmp/c.png"
[ -s "$tmp/c.png" ] || { fail=$((fail + 1)); echo "FAIL training curves: no file"; }
# A picture's --out that exists (an input image named by mistake, an
# earlier figure) is kept unless --force: its bytes unchanged.
printf 'mine' >"$tmp/mine.png"
exact "attention picture: an existing --out is refused" 2 \
    "vit_attn: --out $tmp/mine.png already exists; pass --force to replace it" \
    "$tools/vit_attn" "$tmp/run/last.ckpt" --digit 0 --out "$tmp/mine.png"
exact "training curves: an existing --out is refused" 2 \
    "vit_plot: --out $tmp/mine.png already exists; pass --force to replace it" \
    "$tools/vit_plot" "$tmp/run/metrics.csv" --out "$tmp/mine.png"
expect "pictures: nothing written when refused" 0 "^mine$" cat "$tmp/mine.png"
expect "attention picture --force replaces it" 0 "wrote" \
    "$tools/vit_attn" "$tmp/run/last.ckpt" --digit 0 --out "$tmp/mine.png" --force
cmp -s "$tmp/a.png" "$tmp/mine.png" || { fail=$((fail + 1)); echo "FAIL attention picture --force: not the picture"; }
expect "training curves --force replaces it" 0 "" \
    "$tools/vit_plot" "$tmp/run/metrics.csv" --out "$tmp/mine.png" --force
cmp -s "$tmp/c.png" "$tmp/mine.png" || { fail=$((fail + 1)); echo "FAIL training curves --force: not the picture"; }
# Time to accuracy (issue 50): the first epoch at or above each target, its
# wall time, and the final figure's from final.csv; a row of exactly the
# target counts, a dip after it does not undo it.
mkdir -p "$tmp/tt"
printf '%s\n' epoch,train_loss,train_acc,test_loss,test_acc,lr,seconds 1,1,0.5,0.9,0.800000,0.001,30.5 \
    2,0.8,0.6,0.7,0.900000,0.001,61.2 3,0.7,0.7,0.6,0.895000,0.001,95 4,0.6,0.8,0.5,0.935000,0.0005,3725.4 \
    >"$tmp/tt/metrics.csv"
printf '%s\n' epoch,train_loss,test_loss,test_acc,tta,ema,test_acc_one_pass,test_loss_one_pass,seconds \
    4,0.6,0.45,0.941200,3,0,0.935,0.5,3790 >"$tmp/tt/final.csv"
times() { "$tools/vit_plot" "$tmp/tt/metrics.csv" --time-to 85,90,93.5,94 --out "$tmp/tt/c.png" |
          sed -n '/^time to/,/whole run$/p'; }
exact "vit_plot --time-to: epochs, wall times, the final figure's" 0 "time to accuracy (test, one pass, first epoch at or above):
   85.00%  epoch    2  0:01:01 (61.2 s)
   90.00%  epoch    2  0:01:01 (61.2 s)
   93.50%  epoch    4  1:02:05 (3725.4 s)
   94.00%  not reached (best 93.50% at epoch 4)
  final test accuracy 94.12% (tta shift9flip): 1:03:10 (3790.0 s), the whole run" times
exact "vit_plot --time-to: a bad target" 2 \
    "vit_plot: --time-to: expected up to 16 percentages in (0, 100] separated by commas, got '94,0'" \
    "$tools/vit_plot" "$tmp/tt/metrics.csv" --time-to 94,0
expect "export" 0 "20 tensors" "$tools/vit_export" "$tmp/run/last.ckpt" --out "$tmp/m.safetensors"
# An existing file is kept unless --force: its bytes unchanged.
printf 'mine' >"$tmp/keep.csv"
exact "export: an existing --out is refused" 2 \
    "vit_export: --out $tmp/m.safetensors already exists; pass --force to replace it" \
    "$tools/vit_export" "$tmp/run/last.ckpt" --out "$tmp/m.safetensors"
exact "export: an existing --logits is refused" 2 \
    "vit_export: --logits $tmp/keep.csv already exists; pass --force to replace it" \
    "$tools/vit_export" "$tmp/run/last.ckpt" --out "$tmp/m2.safetensors" --logits "$tmp/keep.csv"
expect "export: nothing written when refused" 0 "^mine$" cat "$tmp/keep.csv"
expect "export --force replaces it" 0 "20 tensors" \
    "$tools/vit_export" "$tmp/run/last.ckpt" --out "$tmp/m.safetensors" --force
expect "export of a missing checkpoint" 1 "$tmp/none.ckpt" \
    "$tools/vit_export" "$tmp/none.ckpt" --out "$tmp/n.safetensors"

# The run folder is named after the last component of --data, whatever the
# trailing slashes (tab completion adds one): never runs//abs/path/.  Each
# case trains a tiny model on a 4x4 IDX set from a fresh folder holding a
# copy of the set as mn/, and must write runs/mn and nothing else.
be32() { printf "\\x$(printf %02x $(($1 >> 24 & 255)))\\x$(printf %02x $(($1 >> 16 & 255)))\\x$(printf %02x $(($1 >> 8 & 255)))\\x$(printf %02x $(($1 & 255)))"; }
idx=$tmp/idx
mkdir -p "$idx"
{ be32 0x803; be32 6; be32 4; be32 4; head -c 96 /dev/zero | tr '\0' '\200'; } >"$idx/train-images-idx3-ubyte"
{ be32 0x801; be32 6; printf '\0\1\2\0\1\2'; } >"$idx/train-labels-idx1-ubyte"
{ be32 0x803; be32 3; be32 4; be32 4; head -c 48 /dev/zero | tr '\0' '\200'; } >"$idx/t10k-images-idx3-ubyte"
{ be32 0x801; be32 3; printf '\2\1\0'; } >"$idx/t10k-labels-idx1-ubyte"
nrun=0
run_name() { # NAME SPEC [SUBDIR]: --data SPEC from the fresh folder (or its SUBDIR)
    local name=$1 spec=$2 sub=${3:-} d
    nrun=$((nrun + 1)); d=$tmp/cwd$nrun
    mkdir -p "$d" && cp -r "$idx" "$d/mn"
    expect "run name: $name" 0 "; checkpoint runs/mn/last\.ckpt$" in_dir "$d/$sub" "$tools/vit_train" \
        --data "${spec//@/$d}" --dim 4 --heads 1 --mlp 4 --depth 1 --epochs 1 --batch 2 --quiet --threads 1 \
        --patch 2 --patch-stride 0 --patch-pad 0 --tta none
    exact "run name: $name: only runs/mn" 0 "mn" ls "$d/$sub/runs"
}
run_name "relative" mn
run_name "relative/" mn/
run_name "relative//" mn//
run_name "./relative/" ./mn/
run_name "absolute" @/mn
run_name "absolute/" @/mn/
run_name "absolute///" @/mn///
run_name "." . mn
run_name "./" ./ mn

# Each README C example is the file that meson builds and runs: the first
# ```c block under its heading, byte for byte.
# --seeds: one run per seed in OUT/seed-N, each the run --seed N gives
# (bitwise repeatable at one thread), then mean/sd/min/max and seeds.csv.
# (The old shape and one pass: the final lines below are the one-line form.)
tiny=(--dim 16 --depth 1 --heads 2 --mlp 16 --epochs 2 --threads 1 --quiet --patch 2 --patch-stride 0
      --patch-pad 0 --tta none)
out=$("$tools/vit_train" "${tiny[@]}" --seeds 2,5 --out "$tmp/seeds" 2>&1)
echo "$out" | sed 's/^/     /'
single=$("$tools/vit_train" "${tiny[@]}" --seed 5 --out "$tmp/seed5" 2>&1)
# A seed's figure: its result line, or the line before its checkpoint's
# when the checkpoint went on a line of its own (over 100 columns).
acc() {
    awk -v s="seed-$1/last.ckpt" '/^test accuracy [0-9]/ { a = $3 }
        length($0) >= length(s) && substr($0, length($0) - length(s) + 1) == s { print a; exit }' <<<"$out"
}
a2=$(acc 2) a5=$(acc 5)
# The summary from seeds.csv's six decimals: the printed four would round a
# mean twice (0.1861 and 0.3222 average to 0.25415, the run's 0.254167).
full() { awk -F, -v s="$1" '$1 == s { print $2 }' "$tmp/seeds/seeds.csv"; }
f2=$(full 2) f5=$(full 5)
mean=$(awk -v a="$f2" -v b="$f5" 'BEGIN { printf "%.4f", (a + b) / 2 }')
sd=$(awk -v a="$f2" -v b="$f5" 'BEGIN { d = a - b; if (d < 0) d = -d; printf "%.4f", d / sqrt(2) }')
lo=$(awk -v a="$f2" -v b="$f5" 'BEGIN { printf "%.4f", a < b ? a : b }')
s5=$(sed -n 's/^test accuracy \([0-9.]*\) .*/\1/p' <<<"$single")
expect "--seeds: each seed's final line, as --seed N's" 0 "" \
    test -n "$a2" -a "$a5" = "$s5" -a -e "$tmp/seeds/seed-2/last.ckpt"
expect "--seeds: a seed's run is --seed N's, bitwise" 0 "" \
    cmp "$tmp/seeds/seed-5/last.ckpt" "$tmp/seed5/last.ckpt"
expect "--seeds: mean, sd and min of the seeds' accuracies" 0 \
    "^test accuracy mean $mean, sd $sd, min $lo, max " echo "$out"
csv=$(awk -F, 'NR > 1 { printf "%s:%.4f ", $1, $2 }' "$tmp/seeds/seeds.csv")
expect "--seeds: seeds.csv, a row per seed" 0 "" test "$csv" = "2:$a2 5:$a5 "
# --seeds with tta auto: each seed's run chooses by its own validation set
# (seeds 1 and 2 of this tiny run choose differently), so the summary says
# each seed's choice, as its own "tta auto:" line gave it, and seeds.csv
# has it per row; the one-pass spread is the seeds' one-pass figures.
out=$("$tools/vit_train" "${tiny[@]}" --tta auto --val 287 --seeds 1,2 --out "$tmp/seeds-auto" 2>&1)
echo "$out" | sed 's/^/     /'
chose=$(sed -n 's/^tta auto: \(shift9\) chosen.*/\1/p; s/^tta auto: one pass kept.*/none/p' <<<"$out" |
        paste -sd' ')
expect "--seeds, tta auto: seeds 1 and 2 choose differently here" 0 "" \
    test "$chose" = "shift9 none" -o "$chose" = "none shift9"
if [ "$chose" = "shift9 none" ]; then on=1 off=2; else on=2 off=1; fi
expect "--seeds, tta auto: the summary names each seed's own choice" 0 \
    "^tta auto: shift9 on seeds $on; one pass on $off\$" echo "$out"
csv=$(awk -F, 'NR > 1 { printf "%s:%s ", $1, $7 }' "$tmp/seeds-auto/seeds.csv")
expect "--seeds, tta auto: seeds.csv's tta column, each seed's own" 0 "" \
    test "$csv" = "1:${chose%% *} 2:${chose##* } "
plain=$(awk -F, 'NR > 1 { s += $3; n++ } END { printf "%.4f", s / n }' "$tmp/seeds-auto/seeds.csv")
expect "--seeds, tta auto: labelled spreads, and the one-pass one of the one-pass figures" 0 "" \
    bash -c 'grep -q "^test accuracy (tta auto) mean " <<<"$1" &&
             grep -q "^test accuracy (one pass) mean $2, " <<<"$1"' _ "$out" "$plain"
expect "--seeds again into the same folder: refused" 1 "already holds" \
    "$tools/vit_train" "${tiny[@]}" --seeds 2,5 --out "$tmp/seeds"
expect "--seeds with --seed: refused" 2 "give one of them" \
    "$tools/vit_train" "${tiny[@]}" --seeds 1,2 --seed 3 --out "$tmp/seeds9"
expect "--seeds: a malformed list" 2 "expected seeds like 1,2,3 or 1-5, got '1,,2'" \
    "$tools/vit_train" "${tiny[@]}" --seeds 1,,2 --out "$tmp/seeds9"
expect "--seeds: a seed twice" 2 "seed 2 is listed twice" \
    "$tools/vit_train" "${tiny[@]}" --seeds 1-3,2 --out "$tmp/seeds9"
# tta in the checkpoint: vit_eval scores as the run did (its final figure,
# labelled), --tta none gives the one-pass figure the final line names.
out=$("$tools/vit_train" "${tiny[@]}" --tta shift9 --ema 0.9 --out "$tmp/tta" 2>&1)
echo "     $out"
final=$(sed -n 's/^test accuracy \([0-9.]*\) (ema 0.9, tta shift9; one pass \([0-9.]*\); .*/\1 \2/p' <<<"$out")
expect "vit_train --tta --ema: the final line labelled, both figures" 0 "" test -n "$final"
expect "vit_train --tta --ema: the checkpoint on the next line, no line over 100 columns" 0 "" \
    test "$(tail -n 1 <<<"$out")" = "checkpoint $tmp/tta/last.ckpt" -a \
    "$(awk '{ if (length($0) > m) m = length($0) } END { print m + 0 }' <<<"$out")" -le 100
expect "vit_eval: the checkpoint's tta, the run's final figure" 0 \
    "accuracy ${final% *} \(tta shift9\)$" "$tools/vit_eval" "$tmp/tta/last.ckpt" --threads 1
expect "vit_eval --tta none: the one-pass figure" 0 "accuracy ${final#* }$" \
    "$tools/vit_eval" "$tmp/tta/last.ckpt" --tta none --threads 1
expect "vit_eval --tta: a bad value" 2 "expected none, shift9 or shift9flip, got 'shift8'" \
    "$tools/vit_eval" "$tmp/tta/last.ckpt" --tta shift8

readme_block() {
    awk -v h="$1" '$0 == h {sec = 1; next} /^## / {sec = 0}
        sec && /^```c$/ {on = 1; next} on && /^```$/ {exit} on' "${2:-$readme}"
}
check_readme_block() {
    local heading=$1 file=$2 doc=${3:-$readme} out=$tmp/readme_block.c
    readme_block "$heading" "$doc" >"$out"
    if [ -s "$out" ] && diff -q "$out" "$file" >/dev/null; then
        pass=$((pass + 1)); echo "ok   README '$heading' example matches $file"
    else
        fail=$((fail + 1)); echo "FAIL README '$heading' example differs from $file"
        diff "$out" "$file" | head -20 | sed 's/^/     /'
    fi
}
# vit_bench's pieces: set by --micro-batch, or the model's own choice; slices
# of 2 images (32 threads over 64) run whole, unprobed, and say so.
expect "bench: micro-batch pieces" 0 \
    "^  pieces: 4 of at most 8 images a thread's slice of 32 \(--micro-batch\)$" \
    "$tools/vit_bench" --threads 2 --config digits --quick --steps 1 --reps 1 --micro-batch 8
expect "bench: slices too small to probe" 0 \
    "^  pieces: 1 of at most 2 images a thread's slice of 2 \(automatic" \
    "$tools/vit_bench" --threads 32 --config digits --quick --steps 1 --reps 1
exact "bench: bad micro-batch" 2 "vit_bench: --micro-batch needs an integer in [0, 1048576]" \
    "$tools/vit_bench" --micro-batch -1
check_readme_block "## Using attention in your own training code" "$example"
# The model example lives in docs/extending.md, beside the README.
check_readme_block "## Writing your own model" "$model_example" "$(dirname "$readme")/docs/extending.md"
# y[0] = -0.552 recomputed by hand (plain loops over the same weights, W_V read
# as the third column block of W_QKV [8, 24]; -0.496 with the former separate
# W_Q, W_K, W_V); causal query 0 sees only key 0, so its weight is exactly 1.
expect "README example prints true numbers" 0 "^y\[0\] = -0\.55(2|19[0-9]*), weight of token 0 on itself = 1, " \
    "$examples/example_attention"

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
