/* graphrun run --feed NAME=1,2,3 into a placeholder of rows ([?, 3],
 * [?, 2, 2], [1, n]): the numbers are one row; a count that is not a
 * row's is an input error naming the feed, the placeholder, its shape and
 * the count it wants. Vectors and scalars feed as before. */
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "gr_test.h"
#include "test_util.h"

static char dir[64], out[8192];

static void expect(const char *args, int code, const char *want) {
  GR_CHECK(gt_cli_expect(dir, args, code, want, out, sizeof out));
}

static void test_one_row(void) {
  gt_write_file(dir, "rows.gr",
                "x = placeholder(f32, [?, 3])\n"
                "w = const([[1, 0], [0, 1], [1, 1]])\n"
                "y = x @ w\n"
                "n = placeholder(i64, [1, 2, 2])\n"
                "m = n * 10\n"
                "s = placeholder(f64, [?, 1])\n"
                "t = s + 0.5\n");
  expect("run rows.gr --feed x=1,2,3 --fetch y --json", 0,
         "{\"y\": {\"dtype\": \"f32\", \"shape\": [1, 2], \"data\": [[4, 5]]}}");
  expect("run rows.gr --feed x=-1.5,0,2e1 --fetch x --json", 0,
         "\"shape\": [1, 3], \"data\": [[-1.5, 0, 20]]");
  expect("run rows.gr --feed n=1,2,3,4 --fetch m --json", 0,
         "{\"m\": {\"dtype\": \"i64\", \"shape\": [1, 2, 2], \"data\": [[[10, 20], [30, 40]]]}}");
  expect("run rows.gr --feed s=2 --fetch t --json", 0,
         "{\"t\": {\"dtype\": \"f64\", \"shape\": [1, 1], \"data\": [[2.5]]}}");
}

static void test_wrong_count(void) {
  expect("run rows.gr --feed x=1,2 --fetch y", 2,
         "graphrun run: --feed x: 2 numbers, but one row of 'x' [?, 3] has 3");
  expect("run rows.gr --feed x=1,2,3,4,5,6 --fetch y", 2, "6 numbers, but one row");
  expect("run rows.gr --feed x=7 --fetch y", 2, "1 number, but one row of 'x' [?, 3] has 3");
  expect("run rows.gr --feed n=1,2,3 --fetch m", 2, "one row of 'n' [1, 2, 2] has 4");
  expect("run rows.gr --feed x=1,,2 --fetch y", 2, "--feed x: ");
}

/* Placeholders that are not rows take vectors and scalars as before; a
 * file of that name is still read as a file. */
static void test_vectors_unchanged(void) {
  gt_write_file(dir, "vec.gr",
                "v = placeholder(f32, [3])\n"
                "u = v * 2\n"
                "a = placeholder(f32, [?])\n"
                "b = a + 1\n");
  expect("run vec.gr --feed v=1,2,3 --fetch u --json", 0, "\"shape\": [3], \"data\": [2, 4, 6]");
  expect("run vec.gr --feed a=1,2 --fetch b --json", 0, "\"shape\": [2], \"data\": [2, 3]");
  gt_write_file(dir, "4,5,6", "7,8,9\n10,11,12\n");
  expect("run rows.gr --feed x=4,5,6 --fetch x --json", 0, "\"shape\": [2, 3]");
}

int main(void) {
  snprintf(dir, sizeof dir, "/tmp/gr_test_feed_row_XXXXXX");
  if (!mkdtemp(dir)) return 1;
  GR_RUN(test_one_row);
  GR_RUN(test_wrong_count);
  GR_RUN(test_vectors_unchanged);
  gt_remove_tree(dir);
  return gr_test_finish();
}
