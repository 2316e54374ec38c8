#!/usr/bin/env bash
# vit_train --init-from as a user meets it: a tiny run on PNG folders of 4x4
# gray images, then a new run from its checkpoint and from its export on
# 3-class data (a new head; the init: line says so), the file recorded in
# the new run's checkpoint, vit_eval on the result; and each misuse of the
# fine-tuning flags refused with exit 2 and one line.  Usage:
#   test_finetune_cli.sh TOOLS_DIR TESTS_DATA_DIR
set -u
tools=$1 data=$2
. "$(dirname "$0")/check.sh"

# N classes of two 4x4 gray images each, in train/ and test/.
make_set() { # DIR N
    for s in train test; do
        for c in $(seq 1 "$2"); do
            mkdir -p "$1/$s/c$c"
            cp "$data/bad/gray4x4.png" "$1/$s/c$c/1.png"
            cp "$data/bad/gray4x4.png" "$1/$s/c$c/2.png"
        done
    done
}
make_set "$tmp/five" 5
make_set "$tmp/three" 3
tiny=(--dim 4 --heads 1 --mlp 4 --depth 2 --patch 2 --epochs 1 --batch 2 --threads 1)

"$tools/vit_train" --data "$tmp/five" --out "$tmp/src" "${tiny[@]}" --quiet >/dev/null 2>&1
same "source run" 0 $?
"$tools/vit_export" "$tmp/src/last.ckpt" --out "$tmp/src.safetensors" >/dev/null 2>&1
same "source export" 0 $?

for from in "$tmp/src/last.ckpt" "$tmp/src.safetensors"; do
    name=$(basename "$from")
    out=$("$tools/vit_train" --data "$tmp/three" --out "$tmp/ft-$name" --init-from "$from" \
        --epochs 1 --batch 2 --threads 1 --freeze 1 2>&1)
    same "$name: fine-tuned run" 0 $?
    has "$name: init line" "init: $from: our model" "$out"
    has "$name: a new head" "new head (3 classes); the embeddings and 1 block frozen" "$out"
    has "$name: the recipe says why" "lr 0.002 kept, no layer decay (the features must move" "$out"
    has "$name: the file's dim" "dim 4, depth 2, heads 1" "$out"
    rec=$(grep -a "^init_from = " "$tmp/ft-$name/last.ckpt")
    same "$name: recorded" "init_from = $(realpath "$from")" "$rec"
    "$tools/vit_eval" "$tmp/ft-$name/last.ckpt" --threads 1 >/dev/null 2>&1
    same "$name: vit_eval reads it" 0 $?
done

# The timm-layout fixture (224x224 RGB, patch 16, 5 classes) on 32x32 RGB
# pictures of the digits, 10 classes: the grid resampled 14x14 -> 2x2, the
# normalisation folded, a new head.
"$tools/vit_make_data" rgb32 "$tmp/rgb" --count 200 >/dev/null 2>&1
same "rgb32 data" 0 $?
out=$("$tools/vit_train" --data "$tmp/rgb" --out "$tmp/ft-timm" --init-from "$data/timm_vit.safetensors" \
    --init-heads 2 --epochs 1 --batch 8 --threads 1 2>&1)
same "timm: fine-tuned run" 0 $?
has "timm: init line" "timm file" "$out"
has "timm: adapted" "224x224, dim 32, depth 2, heads 2; ImageNet mean/std folded into the patch embedding: position embeddings 14x14 -> 2x2 (bicubic); new head (10 classes)" "$out"
out=$("$tools/vit_train" --data "$tmp/rgb" --out "$tmp/refused-timm" --init-from "$data/timm_vit.safetensors" \
    --epochs 1 --threads 1 2>&1)
same "timm without heads: exit 1" 1 $?
has "timm without heads: says why" "the shapes do not tell the number of heads" "$out"
out=$("$tools/vit_train" --data "$tmp/rgb" --out "$tmp/refused-timm" --init-from "$data/timm_vit.safetensors" \
    --init-arch vit_tiny_patch16_224 --epochs 1 --threads 1 2>&1)
same "timm, wrong arch: exit 1" 1 $?
has "timm, wrong arch: says why" "not a vit_tiny_patch16_224: dim 32 (the file) vs 192" "$out"

# A Swin on 28x28 gray digits (a 14x14 grid in windows of 7), fine-tuned
# on the 32x32 RGB ones from its run's folder: its windows do not tile
# 32x32's 16x16 grid, so the images are fitted to its 28x28, said in the
# images line; --image-size 32x32 asks for the size it cannot take, refused
# naming both sizes; nothing written.
"$tools/vit_make_data" gray28 "$tmp/g28" --count 200 >/dev/null 2>&1
"$tools/vit_train" --data "$tmp/g28" --arch swin --embed-dim 8 --heads-1 1 --heads-2 1 \
    --depth-2 2 --epochs 1 --batch 8 --threads 1 --out "$tmp/swin" --quiet >/dev/null 2>&1
same "swin source run" 0 $?
out=$("$tools/vit_train" --data "$tmp/rgb" --out "$tmp/ft-swin" --init-from "$tmp/swin" \
    --epochs 1 --batch 8 --threads 1 2>&1)
same "swin: fine-tuned run" 0 $?
has "swin: fitted to the weights' size" "all now 28x28x3 (the size of the weights' swin model, which it keeps: --image-size chooses another)" "$out"
has "swin: adapted" "28x28, swin, " "$out"
has "swin: channels and head" "1 -> 3 channels (repeated / 3); new head (10 classes)" "$out"
"$tools/vit_eval" "$tmp/ft-swin" --threads 1 >/dev/null 2>&1
same "swin: vit_eval reads it" 0 $?
out=$("$tools/vit_train" --data "$tmp/rgb" --out "$tmp/refused-swin" --init-from "$tmp/swin" \
    --image-size 32x32 --epochs 1 --threads 1 2>&1)
same "swin at a size its windows do not tile: exit 1" 1 $?
has "swin at a size its windows do not tile: says why" "the swin model of these weights, trained on 28x28 images, does not fit the data's 32x32" "$out"
same "swin: nothing written for the refused run" "" "$(ls "$tmp/refused-swin" 2>/dev/null)"
out=$("$tools/vit_train" --data "$tmp/rgb" --out "$tmp/refused-swin" --init-from "$tmp/swin" \
    --freeze 1 --epochs 1 --threads 1 2>&1)
same "swin with --freeze: exit 1" 1 $?
has "swin with --freeze: says why" "a swin model: freeze counts a ViT's blocks" "$out"

refuse() { # NAME NEEDLE ARGS...
    local name=$1 needle=$2
    shift 2
    local out
    out=$("$tools/vit_train" --data "$tmp/three" --out "$tmp/refused" --epochs 1 --threads 1 "$@" 2>&1)
    same "$name: exit 2" 2 $?
    has "$name: says why" "$needle" "$out"
}
refuse "freeze alone" "--freeze applies to a run started from trained weights" --freeze 1
refuse "probe alone" "--linear-probe applies" --linear-probe
refuse "with resume" "give one of them" --init-from "$tmp/src/last.ckpt" --resume "$tmp/src/last.ckpt"
refuse "layer decay range" "--layer-decay: expected a number in (0, 1], got '2'" \
    --init-from "$tmp/src/last.ckpt" --layer-decay 2
refuse "an architecture flag" "--dim: with --init-from the architecture is the file's" \
    --init-from "$tmp/src/last.ckpt" --dim 8
refuse "init norm" "--init-norm: expected auto, none or imagenet, got 'x'" \
    --init-from "$tmp/src/last.ckpt" --init-norm x
out=$("$tools/vit_train" --data "$tmp/three" --out "$tmp/refused2" --init-from "$tmp/src/last.ckpt" \
    --freeze 3 --epochs 1 --threads 1 2>&1)
same "freeze past the depth: exit 1" 1 $?
has "freeze past the depth: says why" "freeze 3 is not in 0 .. 2" "$out"
same "nothing written for a refused run" "" "$(ls "$tmp/refused2" 2>/dev/null)"

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
