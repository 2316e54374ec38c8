#!/usr/bin/env bash
# A program outside the project, built the way a user builds one: nothing but
# `cc prog.c $(pkg-config --cflags --libs vit)`.  Usage:
#   test_install.sh PC_DIR SOURCE SEQ_MAIN SEQ_MODEL SANITIZE BUILD_ROOT MESON CC...
#  1. against the build tree: PKG_CONFIG_PATH=PC_DIR (meson's
#     meson-uninstalled folder, whose vit-uninstalled.pc pkg-config prefers
#     over vit.pc when asked for vit);
#  2. against an installed tree: `meson install --destdir` into a temporary
#     folder, checking that the headers, both libraries (shared and static)
#     and both .pc files are there, then building SOURCE from the installed
#     vit.pc, once linked to the shared and once to the static library;
#  3. a whole model written by a user: SEQ_MODEL (tools/seq_model.c, the
#     causal sequence model on the tape) with SEQ_MAIN (a main that trains it
#     for a few steps and checks its loss falls), built from the installed
#     vit.pc alone - proof that the public headers suffice to write one.
# SANITIZE is meson's b_sanitize ("none", "address,undefined", ...): a
# library built with sanitizers can only be linked by a program built with
# them, so the same -fsanitize flags are added - the one flag not from
# pkg-config.  CC is meson's C compiler command (the same runtime).
set -u
pcdir=$1 src=$2 seq_main=$3 seq_model=$4 sanitize=$5 build=$6 meson=$7
shift 7
cc=("$@")
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
pass=0 fail=0
ok() { pass=$((pass + 1)); echo "ok   $1"; }
bad() { fail=$((fail + 1)); echo "FAIL $1"; }

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
                         | grep -v -e '/tools/seq_model\.[ch]$' -e '/tests/seq_consumer\.c$' | sort -u)
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
        else
            bad "pkg-config cannot read the installed vit.pc"
        fi
    fi
fi

echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
