/*
 * tests/file_util.h - files and temporary folders for the suites that
 * write files: one copy of the folder making, reading, writing, counting
 * and removing that those suites need, each failure a test failure.
 */
#ifndef VIT_TESTS_FILE_UTIL_H
#define VIT_TESTS_FILE_UTIL_H

#include <check.h>
#include <stddef.h>

/* mkdtemp on path (cap bytes), filled from templ ("/tmp/NAME_XXXXXX");
 * fails the test when the folder cannot be made.  Inside a test only. */
void fu_mkdtemp(char *path, size_t cap, const char *templ);

/* Removes path: a file (or link) is unlinked, a folder emptied
 * depth-first and removed.  Missing paths are ignored. */
void fu_remove_tree(const char *path);

/* The whole file at path (malloc'd, one spare byte at the end), its size
 * in *n; fails the test when it cannot be read. */
unsigned char *fu_read(const char *path, size_t *n);

/* Writes b[0..n) as the file at path (replacing it); fails the test on any
 * error, the close included. */
void fu_write(const char *path, const void *b, size_t n);

/* Entries of folder dir besides "." and ".." (hidden ones included, so
 * that a left-over temporary file counts whatever its name). */
int fu_count_entries(const char *dir);

/* Copies the safetensors file src to dst with the first occurrence of
 * `from` in its JSON header replaced by `to` (the header length is fixed
 * up; the data is kept); fails the test when src's header lacks `from`. */
void fu_edit_header(const char *src, const char *dst, const char *from, const char *to);

/* ---- one folder for a whole suite ---- */

/* The folder fu_run_suite made for the suite's tests ("" before). */
extern char fu_suite_dir[64];

/* fu_suite_dir + "/" + rel, in a ring of 8 static buffers (enough for a
 * few paths in one expression). */
const char *fu_path(const char *rel);

/* The main() of a suite whose tests share one temporary folder: makes
 * fu_suite_dir from templ, runs the suite make() returns, removes the
 * folder with all in it.  Returns the exit status: failure when the folder
 * cannot be made or a test failed. */
int fu_run_suite(Suite *(*make)(void), const char *templ);

#endif
