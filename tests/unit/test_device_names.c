/* Device names: parsing, printing, merging nested scopes, matching, and
 * every malformed form we could think of. */
#include <graphrun.h>

#include "gr_test.h"

static void roundtrip(const char *in, const char *want) {
  gr_device_spec s;
  gr_error err;
  gr_status st = gr_device_spec_parse(in, &s, &err);
  GR_CHECK_MSG(st == GR_OK, "'%s': %s", in, err.msg);
  if (st != GR_OK) return;
  char buf[GR_DEVICE_NAME_MAX];
  GR_CHECK_MSG(strcmp(gr_device_spec_str(&s, buf), want) == 0, "'%s' printed as '%s', want '%s'",
               in, buf, want);
}

static void test_parse_valid(void) {
  roundtrip("/job:worker/replica:0/task:1/device:CPU:0",
            "/job:worker/replica:0/task:1/device:CPU:0");
  roundtrip("/job:ps", "/job:ps");
  roundtrip("/job:worker/task:3", "/job:worker/task:3");
  roundtrip("/cpu:0", "/device:CPU:0");
  roundtrip("/CPU:1", "/device:CPU:1");
  roundtrip("/job:worker/task:2/cpu:0", "/job:worker/task:2/device:CPU:0");
  roundtrip("/device:CPU:*", "/device:CPU:*");
  roundtrip("/job:*/task:1", "/task:1");
  roundtrip("/device:cpu:2", "/device:CPU:2");
  roundtrip("/task:0/job:a", "/job:a/task:0"); /* any order, canonical output */
  roundtrip("", "");
  gr_device_spec s;
  gr_error err;
  GR_CHECK(gr_device_spec_parse(NULL, &s, &err) == GR_OK);
  GR_CHECK(!gr_device_spec_is_full(&s));
  GR_CHECK_OK(gr_device_spec_parse("/job:localhost/replica:0/task:0/device:CPU:3", &s, &err), err);
  GR_CHECK(gr_device_spec_is_full(&s));
}

static void test_parse_malformed(void) {
  static const char *bad[] = {
      "job:worker",               /* no leading slash */
      "/",                        /* empty component */
      "//job:a",                  /* empty component */
      "/job:a/",                  /* trailing slash */
      "/job:",                    /* empty job */
      "/job:1abc",                /* job must start with a letter */
      "/job:a b",                 /* space */
      "/job:a/job:b",             /* repeated */
      "/task:-1",                 /* negative */
      "/task:x",                  /* not a number */
      "/task:",                   /* missing number */
      "/task:1/task:2",           /* repeated */
      "/replica:1.5",             /* not an integer */
      "/replica:9999999999",      /* too large */
      "/device:CPU",              /* no id */
      "/device:CPU:",             /* empty id */
      "/device::0",               /* empty type */
      "/device:TPU:0",            /* no such type */
      "/tpu:0",                   /* not a legacy form */
      "/device:CPU:0/cpu:1",      /* two devices */
      "/host:3",                  /* unknown component */
      "/job",                     /* no colon */
      "/job:worker/task:1/extra", /* trailing junk */
      "/job:aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    gr_device_spec s;
    gr_error err;
    gr_status st = gr_device_spec_parse(bad[i], &s, &err);
    GR_CHECK_MSG(st == GR_ERR_INVALID_ARGUMENT, "'%s' parsed", bad[i]);
    if (st != GR_OK) GR_CHECK_STR_CONTAINS(err.msg, bad[i]); /* names the spec */
  }
}

static void test_merge_and_match(void) {
  gr_device_spec outer, inner, other;
  gr_error err;
  GR_CHECK_OK(gr_device_spec_parse("/job:worker/task:1", &outer, &err), err);
  GR_CHECK_OK(gr_device_spec_parse("/device:CPU:0", &inner, &err), err);
  gr_device_spec m = gr_device_spec_merge(&outer, &inner);
  char buf[GR_DEVICE_NAME_MAX];
  GR_CHECK(strcmp(gr_device_spec_str(&m, buf), "/job:worker/task:1/device:CPU:0") == 0);
  GR_CHECK_OK(gr_device_spec_parse("/task:2", &other, &err), err);
  m = gr_device_spec_merge(&m, &other); /* inner task overrides outer */
  GR_CHECK(strcmp(gr_device_spec_str(&m, buf), "/job:worker/task:2/device:CPU:0") == 0);
  gr_device_spec dev = gr_device_spec_local_cpu(1);
  GR_CHECK(strcmp(gr_device_spec_str(&dev, buf), "/job:localhost/replica:0/task:0/device:CPU:1") ==
           0);
  gr_device_spec any = gr_device_spec_any();
  GR_CHECK(gr_device_spec_matches(&any, &dev));
  GR_CHECK(!gr_device_spec_matches(&m, &dev));
  GR_CHECK_OK(gr_device_spec_parse("/cpu:1", &other, &err), err);
  GR_CHECK(gr_device_spec_matches(&other, &dev));
  GR_CHECK_OK(gr_device_spec_parse("/device:CPU:*", &other, &err), err);
  GR_CHECK(gr_device_spec_matches(&other, &dev));
}

/* GPU pins parse, as TensorFlow programs write them, and match no device
 * of this build (a session runs them on a CPU only with soft placement:
 * test_session's test_gpu_pins). */
static void test_gpu_specs(void) {
  gr_device_spec a, b;
  gr_error err;
  char buf[GR_DEVICE_NAME_MAX];
  GR_CHECK_OK(gr_device_spec_parse("/gpu:1", &a, &err), err);
  GR_CHECK(strcmp(gr_device_spec_str(&a, buf), "/device:GPU:1") == 0);
  GR_CHECK_OK(gr_device_spec_parse("/job:worker/task:0/device:gpu:0", &b, &err), err);
  GR_CHECK(strcmp(gr_device_spec_str(&b, buf), "/job:worker/task:0/device:GPU:0") == 0);
  gr_device_spec cpu = gr_device_spec_local_cpu(1);
  GR_CHECK(!gr_device_spec_matches(&a, &cpu));
  GR_CHECK(gr_device_spec_parse("/device:TPU:0", &a, &err) == GR_ERR_INVALID_ARGUMENT);
  GR_CHECK_STR_CONTAINS(err.msg, "unknown device type 'TPU'");
}

int main(void) {
  GR_RUN(test_parse_valid);
  GR_RUN(test_gpu_specs);
  GR_RUN(test_parse_malformed);
  GR_RUN(test_merge_and_match);
  return gr_test_finish();
}
