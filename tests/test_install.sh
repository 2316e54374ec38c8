#!/usr/bin/env bash
# A program outside the project, built the way a user builds one: nothing but
# `cc prog.c $(pkg-config --cflags --libs vit)`.  Usage:
#   test_install.sh PC_DIR SOURCE SEQ_MAIN SEQ_MODEL SANITIZE BUILD_ROOT MESON README CC...
#  1. against the build tree: PKG_CONFIG_PATH=PC_DIR (meson's
#     meson-uninstalled folder, whose vit-uninstalled.pc pkg-config prefers
#     over vit.pc when asked for vit);
#  2. against an installed tree: `meson install --destdir` into a temporary
#     folder, checking that the headers, both libraries (shared and static)
#     and both .pc files are there, then building SOURCE from the installed
#     vit.pc, once linked to the shared and once to the static library;
#  3. a whole model written by a user: SEQ_MODEL (examples/seq_model.c, the
#     causal sequence model on the tape) with SEQ_MAIN (a main that trains it
#     for a few steps and checks its loss falls), built from the installed
#     vit.pc alone - proof that the public headers suffice to write one;
#     then one program of two files, float32 and float64 (<vit/f64.h>),
#     linked with vit.pc and vit-f64.pc together, computing in both; and a
#     float64 program linked to libvit-f64.a by vit-f64.pc's --static flags,
#     which (like libvit-f64.so) name no libxsmm, oneDNN or libgomp;
#  4. `pkg-config --cflags` of the installed vit.pc and vit-f64.pc is the
#     installed include folder and nothing else (no -DVIT_DOUBLE: see
#     vit/f64.h), no
#     OpenBLAS, libpng or Open MPI include folders users never include;
#  5. README's "into a prefix of your own" recipe, its lines run as written
#     (see the section below for the one step that is stood in for).
# SANITIZE is meson's b_sanitize ("none", "address,undefined", ...): a
# library built with sanitizers can only be linked by a program built with
# them, so the same -fsanitize flags are added - the one flag not from
# pkg-config.  CC is meson's C compiler command (the same runtime).
set -u
pcdir=$1 src=$2 seq_main=$3 seq_model=$4 sanitize=$5 build=$6 meson=$7 readme=$8
shift 8
cc=("$@")
. "$(dirname "$0")/check.sh"

san=()
if [ "$sanitize" != none ] && [ -n "$sanitize" ]; then
    san=("-fsanitize=$sanitize" -fno-omit-frame-pointer)
fi
echo "compiler: ${cc[*]}   sanitizer flags: ${san[*]:-none}"

# run_consumer NAME EXE [LD_LIBRARY_PATH]: runs EXE with exactly that library
# path (not the one meson test sets for its own programs), wants exit 0 and
# PASS.
run_consumer() {
    local name=$1 exe=$2 lib=${3:-} out rc
    if [ -n "$lib" ]; then
        out=$(LD_LIBRARY_PATH="$lib" "$exe" 2>&1)
    else
        out=$(env -u LD_LIBRARY_PATH "$exe" 2>&1)
    fi
    rc=$?
    while IFS= read -r line; do echo "     $line"; done <<<"$out"
    if [ $rc -eq 0 ] && [ "$(tail -n 1 <<<"$out")" = PASS ]; then
        ok "$name"
    else
        bad "$name: exit $rc"
    fi
}

# The -L folders of a flag list, joined with ':' for LD_LIBRARY_PATH.
lib_path() {
    local p="" f
    for f in "$@"; do
        case $f in -L*) p="$p${p:+:}${f#-L}" ;; esac
    done
    echo "$p"
}

# ---- 1. the build tree, through the uninstalled .pc ------------------------
if flags=$(PKG_CONFIG_PATH="$pcdir" pkg-config --cflags --libs vit); then
    echo "pkg-config --cflags --libs vit (uninstalled): $flags"
    # shellcheck disable=SC2086  # the flags are meant to split into words
    if "${cc[@]}" "${san[@]}" -o "$tmp/consumer" "$src" $flags; then
        ok "build tree: compiled and linked with pkg-config's flags only"
        # shellcheck disable=SC2086
        run_consumer "build tree: consumer" "$tmp/consumer" "$(lib_path $flags)"
    else
        bad "build tree: compiling $src failed"
    fi
else
    bad "pkg-config does not find vit in $pcdir"
fi

# ---- 2. an installed tree ----------------------------------------------------
root=$tmp/root
if ! "$meson" install -C "$build" --destdir "$root" --no-rebuild --quiet >"$tmp/install.log" 2>&1; then
    bad "meson install --destdir failed:"
    sed 's/^/     /' "$tmp/install.log"
else
    ok "meson install --destdir"
    pc=$(find "$root" -name vit.pc -path '*/pkgconfig/*' | head -n 1)
    if [ -z "$pc" ]; then
        bad "no vit.pc installed"
    else
        pcd=$(dirname "$pc")
        libdir=$(dirname "$pcd")
        want=("$pcd/vit-f64.pc" "$libdir/libvit.a" "$libdir/libvit-f64.a")
        for f in "$libdir/libvit.so" "$libdir/libvit-f64.so"; do
            want+=("$f")
        done
        for h in "$(dirname "$src")"/../include/vit/*.h; do
            want+=("$(find "$root" -path "*/include/vit/$(basename "$h")" | head -n 1)")
        done
        missing=0
        for f in "${want[@]}"; do
            if [ -z "$f" ] || [ ! -e "$f" ]; then
                missing=$((missing + 1))
                echo "     missing: ${f:-a header}"
            fi
        done
        if [ $missing -eq 0 ]; then
            ok "installed: headers, libvit and libvit-f64 (shared and static), vit.pc, vit-f64.pc"
        else
            bad "installed tree lacks $missing files"
        fi
        # The .pc files name paths under the prefix; the sysroot moves them
        # into the destdir.
        export PKG_CONFIG_SYSROOT_DIR=$root
        export PKG_CONFIG_PATH=$pcd
        if flags=$(pkg-config --cflags --libs vit) && sflags=$(pkg-config --static --libs vit); then
            echo "pkg-config --cflags --libs vit (installed): $flags"
            # shellcheck disable=SC2086
            if "${cc[@]}" "${san[@]}" -o "$tmp/consumer_shared" "$src" $flags; then
                # shellcheck disable=SC2086
                run_consumer "installed, shared library" "$tmp/consumer_shared" "$(lib_path $flags)"
            else
                bad "installed: compiling against the shared library failed"
            fi
            # Static: the same flags with libvit.a for -lvit, plus the
            # private libraries pkg-config --static lists.
            cflags=$(pkg-config --cflags vit)
            static=()
            for f in $sflags; do
                if [ "$f" = -lvit ]; then static+=("$libdir/libvit.a"); else static+=("$f"); fi
            done
            # shellcheck disable=SC2086
            if "${cc[@]}" "${san[@]}" -o "$tmp/consumer_static" "$src" $cflags "${static[@]}"; then
                if LC_ALL=C readelf -d "$tmp/consumer_static" | grep -q 'NEEDED.*libvit'; then
                    bad "installed, static: the program still needs a shared libvit"
                fi
                run_consumer "installed, static library (no LD_LIBRARY_PATH)" "$tmp/consumer_static"
            else
                bad "installed: linking the static library failed"
            fi
            # ---- 3. the sequence model, from the installed headers only ----
            # Every header it pulls in must come from the installed tree, none
            # from the source tree (its include/ or src/).
            srcroot=$(cd "$(dirname "$seq_model")/.." && pwd)
            # shellcheck disable=SC2086
            if deps=$("${cc[@]}" $cflags -MM "$seq_main" "$seq_model"); then
                # Only the two sources themselves and seq_model.h may come from the project.
                leaked=$(tr ' \\' '\n\n' <<<"$deps" | grep -v ':$' | grep -F "$srcroot/" \
                         | grep -v -e '/examples/seq_model\.[ch]$' -e '/tests/seq_consumer\.c$' | sort -u)
                if [ -z "$leaked" ]; then
                    ok "sequence model: every vit header it includes is the installed one"
                else
                    bad "sequence model includes headers from the source tree: $leaked"
                fi
            else
                bad "sequence model: the preprocessor failed on the installed headers"
            fi
            # shellcheck disable=SC2086
            if "${cc[@]}" "${san[@]}" -o "$tmp/seq_model" "$seq_main" "$seq_model" $flags; then
                ok "sequence model: compiled and linked with the installed vit.pc's flags only"
                # shellcheck disable=SC2086
                run_consumer "installed, sequence model trains (loss falls)" "$tmp/seq_model" \
                    "$(lib_path $flags)"
            else
                bad "sequence model: compiling $seq_model against the installed tree failed"
            fi
            # ---- 3b. one program, both precisions ----
            # Two files: one includes <vit/vit.h> (float32, libvit), the other
            # <vit/f64.h> first (float64, libvit-f64, whose symbols are
            # vit_f64_*); linked together with both .pc files' flags, each
            # computes the same softmax in its own precision.
            cat >"$tmp/both_f32.c" <<'SRC'
#include <vit/vit.h>
double softmax_f32(int k) {
    vit_real x[3] = {0.5, -1.25, 2}, y[3];
    return vit_softmax_forward(y, x, 1, 3) == VIT_OK ? (double)y[k] + 100 * sizeof(vit_real) : -1;
}
SRC
            cat >"$tmp/both_f64.c" <<'SRC'
#include <vit/f64.h>
#include <stdio.h>
#include <math.h>
double softmax_f32(int k);
int main(void) {
    vit_real x[3] = {0.5, -1.25, 2}, y[3];
    if (vit_softmax_forward(y, x, 1, 3) != VIT_OK) return 1;
    for (int k = 0; k < 3; k++) {
        double f = softmax_f32(k) - 400; /* float32's vit_real is 4 bytes */
        printf("softmax[%d]: float32 %.9f, float64 %.17f\n", k, f, (double)y[k]);
        if (sizeof(vit_real) != 8 || !(fabs(f - (double)y[k]) < 1e-6) || f == (double)y[k]) return 1;
    }
    printf("PASS\n");
    return 0;
}
SRC
            if both=$(pkg-config --cflags --libs vit vit-f64) &&
               "${cc[@]}" "${san[@]}" -o "$tmp/both" "$tmp/both_f32.c" "$tmp/both_f64.c" $both -lm; then
                ok "one program linked against libvit and libvit-f64 together"
                # shellcheck disable=SC2086
                run_consumer "installed, both precisions in one process" "$tmp/both" "$(lib_path $both)"
            else
                bad "one program against both libraries: compiling or linking failed"
            fi
            # ---- 3c. float64 alone, static ----
            # libvit-f64.a with vit-f64.pc's private libraries links a
            # float64 program, and neither the .pc nor the shared library
            # names what float64 never calls (libxsmm, oneDNN, libgomp: their
            # products are float32's and bf16's).
            cat >"$tmp/f64_alone.c" <<'SRC'
#include <vit/f64.h>
#include <stdio.h>
int main(void) {
    vit_real x[2] = {0.25, 0.25}, y[2];
    if (vit_softmax_forward(y, x, 1, 2) != VIT_OK || sizeof(vit_real) != 8 || y[0] != 0.5) return 1;
    printf("PASS\n");
    return 0;
}
SRC
            if f64s=$(pkg-config --static --libs vit-f64); then
                unused=$(tr ' ' '\n' <<<"$f64s" | grep -E -e '^-l(xsmm|dnnl|gomp)$' | tr '\n' ' ')
                needed=$(LC_ALL=C readelf -d "$libdir/libvit-f64.so" | grep -E -o 'lib(xsmm|dnnl|gomp)[^]]*')
                if [ -z "$unused$needed" ]; then
                    ok "vit-f64.pc and libvit-f64.so name no libxsmm, oneDNN or libgomp"
                else
                    bad "libvit-f64 links what it never calls: ${unused}${needed}"
                fi
                f64static=()
                for f in $f64s; do
                    if [ "$f" = -lvit-f64 ]; then f64static+=("$libdir/libvit-f64.a"); else f64static+=("$f"); fi
                done
                # shellcheck disable=SC2086
                if "${cc[@]}" "${san[@]}" -o "$tmp/f64_static" "$tmp/f64_alone.c" \
                       $(pkg-config --cflags vit-f64) "${f64static[@]}"; then
                    run_consumer "installed, float64 static library alone" "$tmp/f64_static"
                else
                    bad "installed: linking libvit-f64.a with vit-f64.pc's --static flags failed"
                fi
            else
                bad "pkg-config cannot read the installed vit-f64.pc"
            fi
            # ---- 4. --cflags: the installed include folder, nothing else ----
            incdir=$(find "$root" -type d -path '*/include/vit' | head -n 1)
            incdir=${incdir%/vit}
            for name in vit vit-f64; do
                # No -DVIT_DOUBLE for vit-f64: a file picks float64 by
                # including <vit/f64.h>, so one program can use both.
                want="-I$incdir"
                got=$(pkg-config --cflags $name | sed 's/ *$//')
                if [ "$got" = "$want" ]; then
                    ok "pkg-config --cflags $name is '$got' alone"
                else
                    bad "pkg-config --cflags $name is '$got', want '$want'"
                fi
            done
            unset PKG_CONFIG_SYSROOT_DIR PKG_CONFIG_PATH
        else
            bad "pkg-config cannot read the installed vit.pc"
        fi
    fi
fi

# ---- 5. README's recipe for a prefix of your own, as written ---------------
# The sh block after "Into a prefix of your own" is read from the README and
# its lines are run by bash, unchanged, with HOME a temporary folder, in a
# folder holding SOURCE as app.c.  Stood in for: its first two lines (a fresh
# `meson setup --prefix=$HOME/.local` + compile + install would rebuild the
# whole project); this build is installed with --destdir instead, $HOME/.local
# is made a link to the installed prefix, and PKG_CONFIG_SYSROOT_DIR maps the
# .pc's /usr/local paths there.  Those two lines are checked to be exactly the
# README's, and the libdir they imply to be this build's.  `cc` is CC (with
# the sanitizer flags), so the recipe's compile line is the user's.
recipe=$(awk '/Into a prefix of your own/ { f = 1 } f && /^```sh$/ { g = 1; next }
              g && /^```$/ { exit } g { print }' "$(dirname "$readme")/docs/extending.md")
mapfile -t lines <<<"$recipe"
libdir_opt=$("$meson" introspect --buildoptions "$build" | tr '{' '\n' |
             sed -n 's/.*"name": "libdir", "value": "\([^"]*\)".*/\1/p')
prefix_opt=$("$meson" introspect --buildoptions "$build" | tr '{' '\n' |
             sed -n 's/.*"name": "prefix", "value": "\([^"]*\)".*/\1/p')
if [ ${#lines[@]} -ne 5 ] || [ "${lines[0]}" != 'meson setup build --prefix=$HOME/.local' ] ||
   [ "${lines[1]}" != 'meson compile -C build && meson install -C build' ]; then
    bad "README recipe: not the 5 lines this test knows (got ${#lines[@]}: ${lines[0]:-})"
elif [ "$libdir_opt" != lib/x86_64-linux-gnu ]; then
    echo "skip README recipe: this build's libdir is '$libdir_opt', the README's lib/x86_64-linux-gnu"
elif [ ! -d "$root$prefix_opt" ]; then
    bad "README recipe: nothing installed under $root$prefix_opt"
else
    home=$tmp/home
    mkdir -p "$home" "$tmp/app"
    ln -s "$root$prefix_opt" "$home/.local"
    cp "$src" "$tmp/app/app.c"
    # run_recipe LINES: bash runs LINES in the app folder, `cc` being CC.
    cc_def="cc() { command $(printf '%q ' "${cc[@]}" "${san[@]}")\"\$@\"; }"
    run_recipe() {
        (cd "$tmp/app" && env -u LD_LIBRARY_PATH -u PKG_CONFIG_PATH HOME="$home" \
            PKG_CONFIG_SYSROOT_DIR="$root" bash -c "$cc_def
set -e
$1") 2>&1
    }
    out=$(run_recipe "${lines[2]}
${lines[3]}
${lines[4]}")
    rc=$?
    indent "$out"
    if [ $rc -eq 0 ] && [ "$(tail -n 1 <<<"$out")" = PASS ]; then
        ok "README recipe: PKG_CONFIG_PATH, cc with the rpath, ./app, as written"
    else
        bad "README recipe (lines 3-5) failed: exit $rc"
    fi
    # The comment's alternative: built without the rpath, the program must
    # fail to start alone (or the test proves nothing) and run with the
    # README's LD_LIBRARY_PATH line.
    alt=${lines[4]#*without the rpath: }
    norpath=$(sed 's/ -Wl,-rpath,[^ ]*//' <<<"${lines[3]}")
    if [ "$alt" = "${lines[4]}" ] || [ "$norpath" = "${lines[3]}" ]; then
        bad "README recipe: no 'without the rpath:' alternative or no -Wl,-rpath to drop"
    else
        out=$(run_recipe "${lines[2]}
$norpath
./app")
        rc=$?
        if [ $rc -eq 0 ]; then
            bad "README recipe: built without the rpath, ./app still ran alone (the check proves nothing)"
        else
            out=$(run_recipe "${lines[2]}
$norpath
$alt")
            rc=$?
            indent "$out"
            if [ $rc -eq 0 ] && [ "$(tail -n 1 <<<"$out")" = PASS ]; then
                ok "README recipe: without the rpath, '$alt' runs it"
            else
                bad "README recipe: '$alt' failed: exit $rc"
            fi
        fi
    fi
fi

echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
