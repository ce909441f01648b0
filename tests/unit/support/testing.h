/* Helpers the cmocka unit tests share: throwaway directories for fixtures and
 * deterministic test data. Test code only (library kiln_testsupport, linked into
 * every unit test program); nothing shipped links it.
 */
#ifndef KILN_TESTS_UNIT_SUPPORT_TESTING_H
#define KILN_TESTS_UNIT_SUPPORT_TESTING_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/status.h"

/* Creates a fresh, empty directory <parent>/<prefix>-XXXXXX (mkdtemp: mode 0700)
 * and returns its path. `parent` (an existing directory) and `prefix` are
 * borrowed. The result belongs to the caller, who frees it with free() and removes
 * the directory (kiln_test_remove_tree). Returns NULL, errno set, when memory runs
 * out or mkdtemp fails. Thread-safe. */
char *kiln_test_tmpdir_in(const char *parent, const char *prefix);

/* kiln_test_tmpdir_in under $TMPDIR, or under /tmp when TMPDIR is unset or empty.
 * Same ownership and errors. Thread-safe while nothing changes TMPDIR. */
char *kiln_test_tmpdir(const char *prefix);

/* kiln_file_tree_remove (rm -rf, links not followed) that says so on stderr
 * ("could not remove PATH: WHY") when something of `path` (borrowed) is left; 0
 * when it is gone (also when it never existed), otherwise -1.
 * Thread-safe for distinct trees. */
int kiln_test_remove_tree(const char *path);

/* Advances the xorshift64* generator whose state is *state (nonzero; zero stays
 * zero) and returns its next output. Tests rely on the exact sequence: never
 * change it. Thread-safe for distinct states. */
uint64_t kiln_test_random_next(uint64_t *state);

/* Fills p[0, len) with noise that does not compress: the top byte of each
 * kiln_test_random_next output, from a state derived from `seed` alone. The same
 * (len, seed) always gives the same bytes. Thread-safe. */
void kiln_test_fill_random(unsigned char *p, size_t len, uint64_t seed);

/* Fills p[0, len) with words of MLIR-like text ("kiln ", "func.func ", ...) picked
 * by kiln_test_random_next from a state derived from `seed`: data that compresses
 * well, the same for the same (len, seed). Thread-safe. */
void kiln_test_fill_compressible(unsigned char *p, size_t len, uint64_t seed);

/* Returns len bytes (at least one byte allocated, so len 0 is fine) filled by
 * kiln_test_fill_compressible or kiln_test_fill_random with `seed`. The caller
 * owns the block and frees it with free(). When memory runs out it fails the
 * running cmocka test, so call it where a cmocka assertion may fail. */
unsigned char *kiln_test_make_data(size_t len, bool compressible, uint64_t seed);

/* Runs `fn` in a forked child with stderr silenced and a 10 s alarm (a hang
 * becomes SIGALRM); the child exits 0 if `fn` returns. Returns the child's wait
 * status, or -1 when fork or wait fails. For paths that abort or corrupt memory,
 * so one failure cannot take the test program down. */
int kiln_test_run_in_child(void (*fn)(void));

/* Fails the running cmocka test unless `wstatus` (from kiln_test_run_in_child)
 * says the child died of SIGABRT. */
void kiln_test_assert_died_of_sigabrt(int wstatus);

/* Status assertions. Each takes the status an expression returns, frees it, and
 * fails the running cmocka test at the caller's line, naming the expression:
 *   kiln_test_assert_ok(expr)                 unless it is OK (NULL); the failure
 *                                             names the code, message and origin;
 *   kiln_test_assert_code(expr, want)         unless its code is `want`;
 *   kiln_test_assert_fails(expr, want, text)  unless its code is `want` and its
 *                                             message contains `text` (NULL: any). */
#define kiln_test_assert_ok(expr) kiln_test_assert_ok_at((expr), #expr, __FILE__, __LINE__)
#define kiln_test_assert_code(expr, want) \
  kiln_test_assert_code_at((expr), (want), NULL, #expr, __FILE__, __LINE__)
#define kiln_test_assert_fails(expr, want, text) \
  kiln_test_assert_code_at((expr), (want), (text), #expr, __FILE__, __LINE__)
void kiln_test_assert_ok_at(kiln_status_t status, const char *expr, const char *file, int line);
void kiln_test_assert_code_at(kiln_status_t status, kiln_status_code_t want, const char *needle,
                              const char *expr, const char *file, int line);

#endif /* KILN_TESTS_UNIT_SUPPORT_TESTING_H */
