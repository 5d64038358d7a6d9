/* A small assertion header for the test programs: each test file is one
 * executable registered with ctest; it prints one line per failed check and
 * ends with "N passed, M failed".
 *
 *   static void test_add(void) { GR_CHECK_EQ_INT(1 + 1, 2); }
 *   int main(void) { GR_RUN(test_add); return gr_test_finish(); }
 *
 * One case by name: GR_TEST_CASE=test_add build/tests/unit/test_x (or
 * GR_TEST_CASE=test_add ctest -R test_x); the others are skipped, and a name
 * that matches no case fails. */
#ifndef GR_TEST_H
#define GR_TEST_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int gr_test_checks_failed_, gr_test_passed_, gr_test_failed_, gr_test_matched_;

/* Whether case `name` runs: every case, or only the one GR_TEST_CASE names. */
static inline int gr_test_selected_(const char *name) {
  const char *want = getenv("GR_TEST_CASE");
  if (!want || !*want) return 1;
  if (strcmp(want, name) != 0) return 0;
  gr_test_matched_++;
  return 1;
}

#define GR_CHECK(cond)                                                                             \
  do {                                                                                             \
    if (!(cond)) {                                                                                 \
      fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond);                     \
      gr_test_checks_failed_++;                                                                    \
    }                                                                                              \
  } while (0)

#define GR_CHECK_MSG(cond, ...)                                                                    \
  do {                                                                                             \
    if (!(cond)) {                                                                                 \
      fprintf(stderr, "%s:%d: check failed: %s: ", __FILE__, __LINE__, #cond);                     \
      fprintf(stderr, __VA_ARGS__);                                                                \
      fprintf(stderr, "\n");                                                                       \
      gr_test_checks_failed_++;                                                                    \
    }                                                                                              \
  } while (0)

#define GR_CHECK_EQ_INT(a, b)                                                                      \
  do {                                                                                             \
    long long a_ = (long long)(a), b_ = (long long)(b);                                            \
    GR_CHECK_MSG(a_ == b_, "%lld != %lld", a_, b_);                                                \
  } while (0)

#define GR_CHECK_NEAR(a, b, tol)                                                                   \
  do {                                                                                             \
    double a_ = (double)(a), b_ = (double)(b);                                                     \
    GR_CHECK_MSG(fabs(a_ - b_) <= (tol), "%.17g vs %.17g (tol %g)", a_, b_, (double)(tol));        \
  } while (0)

#define GR_CHECK_STR_CONTAINS(s, sub)                                                              \
  do {                                                                                             \
    const char *s_ = (s), *sub_ = (sub);                                                           \
    GR_CHECK_MSG(s_ &&strstr(s_, sub_), "'%s' does not contain '%s'", s_ ? s_ : "(null)", sub_);   \
  } while (0)

/* expr returns a gr_status; err is a gr_error whose message is printed on failure */
#define GR_CHECK_OK(expr, err)                                                                     \
  do {                                                                                             \
    gr_status s_ = (expr);                                                                         \
    GR_CHECK_MSG(s_ == GR_OK, "%s: %s", gr_status_name(s_), (err).msg);                            \
  } while (0)

#define GR_RUN(fn)                                                                                 \
  do {                                                                                             \
    if (!gr_test_selected_(#fn)) break;                                                            \
    int before_ = gr_test_checks_failed_;                                                          \
    fn();                                                                                          \
    if (gr_test_checks_failed_ == before_) {                                                       \
      gr_test_passed_++;                                                                           \
    } else {                                                                                       \
      gr_test_failed_++;                                                                           \
      fprintf(stderr, "FAILED: %s\n", #fn);                                                        \
    }                                                                                              \
  } while (0)

static inline int gr_test_finish(void) {
  const char *want = getenv("GR_TEST_CASE");
  if (want && *want && !gr_test_matched_) {
    fprintf(stderr, "no test case named '%s' (GR_TEST_CASE)\n", want);
    return 1;
  }
  printf("%d passed, %d failed\n", gr_test_passed_, gr_test_failed_);
  /* a check that failed outside every case (a program's setup) fails it too */
  if (!gr_test_failed_ && gr_test_checks_failed_)
    fprintf(stderr, "%d checks failed outside the test cases\n", gr_test_checks_failed_);
  return gr_test_failed_ || gr_test_checks_failed_ ? 1 : 0;
}

#endif
