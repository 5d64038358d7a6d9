/* The core hash map (core/map.h): random puts, replacements, removals
 * and lookups against a plain array of what must be there, for string and
 * integer keys; iteration sees each entry once; reserve; the id index. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/map.h"
#include "gr_test.h"

enum { NKEYS = 3000, NOPS = 60000 };

static uint64_t rng_state = 0x1234567;
static uint64_t next_rand(void) {
  rng_state ^= rng_state << 13;
  rng_state ^= rng_state >> 7;
  rng_state ^= rng_state << 17;
  return rng_state;
}

static char names[NKEYS][24];
static void *present[NKEYS]; /* the reference: the value of key k, NULL when absent */

static uint64_t u64_key(int k) { /* spread over the whole range, 0 included */
  return k == 0 ? 0 : (uint64_t)k * 0x9E3779B97F4A7C15ull;
}

static void check_against_reference(const gr_map *m, bool str) {
  size_t n = 0;
  for (int k = 0; k < NKEYS; k++) {
    void *got = str ? gr_map_get_str(m, names[k]) : gr_map_get_u64(m, u64_key(k));
    if (got != present[k]) {
      GR_CHECK_MSG(got == present[k], "key %d: %p, want %p", k, got, present[k]);
      return;
    }
    n += present[k] != NULL;
  }
  GR_CHECK_EQ_INT(gr_map_count(m), n);
  /* iteration: every entry once, with its value */
  int *seen = calloc(NKEYS, sizeof *seen);
  gr_map_key key;
  void *value;
  size_t walked = 0;
  for (size_t pos = 0; gr_map_next(m, &pos, &key, &value); walked++) {
    int k = (int)((intptr_t)value >> 4) - 1; /* values encode their key */
    GR_CHECK(k >= 0 && k < NKEYS);
    if (k < 0 || k >= NKEYS) break;
    GR_CHECK(str ? strcmp(key.str, names[k]) == 0 : key.u64 == u64_key(k));
    seen[k]++;
  }
  GR_CHECK_EQ_INT(walked, n);
  for (int k = 0; k < NKEYS; k++) GR_CHECK(seen[k] == (present[k] != NULL));
  free(seen);
}

static void random_ops(bool str) {
  gr_map m;
  gr_map_init(&m, str ? GR_MAP_STR : GR_MAP_U64);
  memset(present, 0, sizeof present);
  for (int op = 0; op < NOPS; op++) {
    int k = (int)(next_rand() % (op < NOPS / 2 ? NKEYS : NKEYS / 3)); /* later: churn */
    void *v = (void *)(intptr_t)(((intptr_t)k + 1) << 4 | (intptr_t)(op & 15));
    switch (next_rand() % 4) {
      case 0:
      case 1:
        GR_CHECK(str ? gr_map_put_str(&m, names[k], v) : gr_map_put_u64(&m, u64_key(k), v));
        present[k] = v;
        break;
      case 2: {
        bool added;
        void **slot =
            str ? gr_map_slot_str(&m, names[k], &added) : gr_map_slot_u64(&m, u64_key(k), &added);
        GR_CHECK(slot != NULL);
        if (!slot) break;
        GR_CHECK(added == (present[k] == NULL));
        GR_CHECK(*slot == present[k]);
        if (added) *slot = present[k] = v;
        break;
      }
      default:
        if (str)
          gr_map_remove_str(&m, names[k]);
        else
          gr_map_remove_u64(&m, u64_key(k));
        present[k] = NULL;
    }
    if (op % 5000 == 0) check_against_reference(&m, str);
  }
  check_against_reference(&m, str);
  gr_map_free(&m);
  GR_CHECK_EQ_INT(gr_map_count(&m), 0);
}

static void test_string_keys(void) {
  random_ops(true);
}

static void test_integer_keys(void) {
  random_ops(false);
}

static void test_reserve_keeps_entries(void) {
  gr_map m;
  gr_map_init(&m, GR_MAP_STR);
  GR_CHECK(gr_map_get_str(&m, "absent") == NULL); /* an empty map allocates nothing */
  GR_CHECK(gr_map_put_str(&m, names[1], names[1]));
  GR_CHECK(gr_map_reserve(&m, 1000));
  size_t cap = m.cap;
  for (int k = 2; k < 1000; k++) GR_CHECK(gr_map_put_str(&m, names[k], names[k]));
  GR_CHECK_EQ_INT(m.cap, cap); /* no growth after reserving */
  for (int k = 1; k < 1000; k++) GR_CHECK(gr_map_get_str(&m, names[k]) == names[k]);
  gr_map_free(&m);
}

static void test_hash_spreads(void) {
  /* strings differing in one byte anywhere, of every length up to 40 */
  gr_map m;
  gr_map_init(&m, GR_MAP_U64);
  char buf[41];
  int n = 0;
  for (int len = 1; len <= 40; len++)
    for (int at = 0; at < len; at++) {
      memset(buf, 'a', (size_t)len);
      buf[len] = '\0';
      buf[at] = 'b';
      uint64_t h = gr_map_hash_str(buf);
      GR_CHECK(h != 0);
      GR_CHECK_MSG(gr_map_get_u64(&m, h) == NULL, "hash collision at len %d pos %d", len, at);
      GR_CHECK(gr_map_put_u64(&m, h, (void *)1));
      n++;
    }
  GR_CHECK_EQ_INT(gr_map_count(&m), n);
  gr_map_free(&m);
}

/* gr_idmap: ids of names that live in an array */
static bool name_eq(const void *ctx, uint32_t id, const void *key) {
  (void)ctx;
  return strcmp(names[id], key) == 0;
}

static void test_idmap(void) {
  gr_idmap m;
  gr_idmap_init(&m);
  for (uint32_t k = 0; k < NKEYS; k += 2)
    GR_CHECK(gr_idmap_insert(&m, gr_map_hash_str(names[k]), k));
  for (uint32_t k = 0; k < NKEYS; k += 3) gr_idmap_remove(&m, gr_map_hash_str(names[k]), k);
  for (uint32_t k = 0; k < NKEYS; k++) {
    int64_t want = (k % 2 == 0 && k % 3 != 0) ? (int64_t)k : -1;
    GR_CHECK_EQ_INT(gr_idmap_find(&m, gr_map_hash_str(names[k]), names[k], name_eq, NULL), want);
  }
  gr_idmap_free(&m);
}

int main(void) {
  for (int k = 0; k < NKEYS; k++) snprintf(names[k], sizeof names[k], "layer%d/w_%x", k, k * 7);
  GR_RUN(test_string_keys);
  GR_RUN(test_integer_keys);
  GR_RUN(test_reserve_keeps_entries);
  GR_RUN(test_hash_spreads);
  GR_RUN(test_idmap);
  return gr_test_finish();
}
