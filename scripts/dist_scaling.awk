#!/usr/bin/awk -f
# The scaling model of docs/distributed.md: weak scaling of a data-parallel
# step on p ranks, each with the same share of images.  Per configuration:
# its parameters n, its compute per step tc (seconds, one rank's share),
# the backward's part of it fb, the link's rate beta (bytes/s), the
# latency alpha (seconds) of one step of a ring, and the bucket size.
# Ring all-reduce of m bytes: 2 (p - 1) alpha + 2 (p - 1) / p * m / beta.
# Blocking: one all-reduce of all 4 n bytes after the backward.  Overlap:
# k buckets, ready at even intervals over the backward (last block first),
# summed one after another; what runs past the backward's end is exposed.
# Prints the efficiency tc / (tc + exposed) for each p.
#
#   awk -v name=large -v n=2693578 -v tc=0.206 -f scripts/dist_scaling.awk
function ring(m, p) { return 2 * (p - 1) * alpha + 2 * (p - 1) / p * m / beta }
BEGIN {
    if (fb == "") fb = 2 / 3
    if (alpha == "") alpha = 50e-6
    if (bucket == "") bucket = 1048576
    if (ps == "") ps = "2 4 16 64"
    if (rates == "") rates = "1e9 10e9"
    bytes = 4 * n
    k = int((bytes + bucket - 1) / bucket)
    tb = fb * tc
    np = split(ps, P, " ")
    nr = split(rates, R, " ")
    for (r = 1; r <= nr; r++) {
        beta = R[r] / 8
        for (i = 1; i <= np; i++) {
            p = P[i]
            block = ring(bytes, p)
            done = 0
            for (j = 1; j <= k; j++) {
                m = j < k ? bucket : bytes - (k - 1) * bucket
                ready = tb * j / k
                done = (done > ready ? done : ready) + ring(m, p)
            }
            over = done - tb
            if (over < 0) over = 0
            printf "%-7s %5.0f Gbit/s p=%-3d comm %7.1f ms  blocking %5.1f%%  overlap %5.1f%%  exposed %6.2f ms\n",
                   name, R[r] / 1e9, p, 1e3 * block, 100 * tc / (tc + block), 100 * tc / (tc + over), 1e3 * over
        }
    }
}
