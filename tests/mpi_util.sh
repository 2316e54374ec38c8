# Shared by the MPI tests (sourced, bash): test_mpi.sh, test_mpi_hosts.sh.

# mpi_require TRAIN: exits 77 with the reason unless TRAIN (vit_train) was
# built with MPI and mpirun is on the PATH.
mpi_require() {
    if ! "$1" --version | grep -q MPI; then
        echo "vit_train was built without MPI: skipped"; exit 77
    fi
    if ! command -v mpirun >/dev/null; then
        echo "mpirun not found: skipped"; exit 77
    fi
}

# losses_close REF RUN ROWS: true if every row of metrics file RUN has the
# train loss (column 2) and test loss (column 4) of REF's row of the same
# epoch within 1e-3 relative, and RUN has ROWS rows (any number for -1)
# ending at REF's last epoch.  Runs on different numbers of ranks differ
# only in the order of the float32 additions of the gradients' sum; their
# measured agreement is far tighter than the bound, and a wrong share
# weighting or a missing sum moves the losses by far more.  Prints the
# epochs that differ.
losses_close() {
    awk -F, -v rows="$3" '
        NR == FNR { if (FNR > 1) { l[$1] = $2; t[$1] = $4; end = $1 } next }
        FNR > 1 { n++; last = $1
                  if (!($1 in l)) bad = 1
                  else if ((($2 - l[$1]) ^ 2) > (1e-3 * l[$1]) ^ 2 || (($4 - t[$1]) ^ 2) > (1e-3 * t[$1]) ^ 2) {
                      printf "epoch %s: %s/%s against %s/%s\n", $1, l[$1], t[$1], $2, $4; bad = 1 } }
        END { exit (bad || last != end || (rows >= 0 && n != rows)) }' "$1" "$2"
}
