#!/bin/sh
# The exe_wrapper of `meson test --setup valgrind`: runs one test under
# valgrind memcheck, failing on any memory error and on definite or indirect
# leaks.  Check runs the test cases in the test's own process there
# (CK_FORK=no, set by the setup), so that valgrind sees them.
#
# Two suites train real models for seconds of native CPU each, which takes
# memcheck (about 125x slower on this code) far longer than CI allows; they
# are reported as skipped (exit 77).  The code they drive - the training
# loop, checkpoints, resume, divergence - runs under memcheck in
# test_tools_memcheck instead, on a tiny model.  test_budget.sh measures
# wall time, which means nothing beside memcheck's runs.
case $(basename "$1") in
test_train | test_seq | test_budget.sh)
    echo "skipped under valgrind (too slow under memcheck; test_tools_memcheck covers training)"
    exit 77
    ;;
esac
exec valgrind --error-exitcode=1 --leak-check=full --errors-for-leak-kinds=definite,indirect \
    --show-leak-kinds=definite,indirect --quiet "$@"
