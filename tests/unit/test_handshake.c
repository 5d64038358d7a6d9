/* The handshake's messages and checks without sockets
 * (distributed/handshake_internal.h): a client and a server pass HELLO,
 * AUTH and AUTH_OK to each other as bytes, here, with a secret and
 * without; each refusal (another cluster in either direction, another
 * secret, a secret on one side only) and each change made on the way (a
 * cluster id, a nonce, a MAC, an AUTH_OK of another handshake) is caught
 * by the side that must catch it. And the cluster ids: which are ids, and
 * the id derived from a spec is the same for every form of the same tasks
 * and differs for any other task or address. The same handshake over TCP,
 * against a real server: test_dist_bad_input (raw frames) and
 * test_dist_auth (graphrun processes). */
#include <graphrun.h>
#include <stdio.h>
#include <string.h>

#include "distributed/handshake_internal.h"
#include "gr_test.h"

#define SECRET "handshake-test-secret"

/* A message as it would arrive: its bytes into buf, parsed into *m (frees
 * out). false when it does not frame or parse. */
static bool deliver(gr_outmsg *out, gr_msg_type want, uint8_t buf[512], size_t *len, gr_msg *m) {
  struct iovec *iov;
  int n;
  size_t total;
  gr_error err;
  bool ok = out && gr_outmsg_finish(out, &iov, &n, &total, &err) == GR_OK && n >= 1 &&
            total <= 512 && iov[0].iov_len == total;
  if (ok) memcpy(buf, iov[0].iov_base, total), *len = total;
  gr_outmsg_free(out);
  gr_frame_header h;
  ok = ok && gr_wire_parse_frame_header(buf, 0, &h, &err) == GR_OK && h.type == want &&
       h.header_len + GR_WIRE_HEADER_SIZE == total &&
       gr_msg_parse(m, buf + GR_WIRE_HEADER_SIZE, h.header_len, &err) == GR_OK;
  return ok;
}

/* The bytes of a message changed on the way: the first `from` in them
 * becomes `to` (as long), and they are parsed again into *m. */
static bool tamper(uint8_t *buf, size_t len, const char *from, const char *to, gr_msg *m) {
  uint8_t *at = memmem(buf, len, from, strlen(from));
  gr_error err;
  if (!at || strlen(to) != strlen(from)) return false;
  memcpy(at, to, strlen(to));
  gr_msg_free(m);
  return gr_msg_parse(m, buf + GR_WIRE_HEADER_SIZE, len - GR_WIRE_HEADER_SIZE, &err) == GR_OK;
}

/* One handshake between a server (secret s_secret, cluster s_id) and a
 * client (c_secret, c_id); change: which message is altered on the way
 * (0 none; 1 HELLO's cluster, 2 AUTH's cluster, 3 AUTH's nonce, 4
 * AUTH_OK's mac: each "jobA" -> "jobB" or its first byte flipped). Returns
 * the first error's code (GR_OK: both sides agreed); err names it, and
 * *who is 'c' or 's', the side that refused. */
static gr_status handshake(const char *s_secret, const char *s_id, const char *c_secret,
                           const char *c_id, int change, char *who, gr_error *err) {
  uint8_t snonce[GR_AUTH_NONCE], buf[512];
  size_t len = 0;
  gr_msg hello, auth, ok;
  *who = '?';
  GR_CHECK(deliver(gr_hello_new(s_secret, s_id, 0, snonce, err), GR_MSG_HELLO, buf, &len, &hello));
  if (change == 1) GR_CHECK(tamper(buf, len, "jobA", "jobB", &hello));
  gr_hs_client hs = {.secret = c_secret, .cluster = c_id, .address = "127.0.0.1:2223"};
  gr_outmsg *out;
  gr_status st = gr_hs_client_answer(&hs, &hello, &out, err);
  gr_msg_free(&hello);
  if (st != GR_OK) return *who = 'c', st;
  GR_CHECK(deliver(out, GR_MSG_AUTH, buf, &len, &auth));
  if (change == 2) GR_CHECK(tamper(buf, len, "jobA", "jobB", &auth));
  if (change == 3) {
    uint8_t *at = memmem(buf, len, hs.nonce, GR_AUTH_NONCE);
    GR_CHECK(at != NULL);
    if (at) at[0] ^= 1;
    gr_msg_free(&auth);
    GR_CHECK(gr_msg_parse(&auth, buf + GR_WIRE_HEADER_SIZE, len - GR_WIRE_HEADER_SIZE, err) ==
             GR_OK);
  }
  gr_hs_result res;
  st = gr_hs_server_check(s_secret, s_id, 0, snonce, &auth, &out, &res, err);
  gr_msg_free(&auth);
  if (st != GR_OK) return *who = 's', st;
  GR_CHECK(deliver(out, GR_MSG_AUTH_OK, buf, &len, &ok));
  if (change == 4) { /* the mac's first byte (the last 32 bytes of the frame) */
    buf[len - GR_AUTH_MAC] ^= 1;
    gr_msg_free(&ok);
    GR_CHECK(gr_msg_parse(&ok, buf + GR_WIRE_HEADER_SIZE, len - GR_WIRE_HEADER_SIZE, err) == GR_OK);
  }
  st = gr_hs_client_check(&hs, &ok, err);
  gr_msg_free(&ok);
  if (st != GR_OK) *who = 'c';
  return st;
}

static void test_agree(void) {
  gr_error err;
  char who;
  GR_CHECK_OK(handshake(SECRET, "jobA", SECRET, "jobA", 0, &who, &err), err);
  GR_CHECK_OK(handshake(NULL, "jobA", NULL, "jobA", 0, &who, &err), err); /* insecure */
  GR_CHECK_OK(handshake(SECRET, NULL, SECRET, "", 0, &who, &err), err);   /* no ids: NULL is "" */
}

/* Each refusal, by the side that must refuse (the client 'c', else the
 * server 's'), with GR_ERR_UNAUTHENTICATED and a message holding want. */
static const struct refusal {
  const char *s_secret, *s_id, *c_secret, *c_id;
  int change; /* handshake()'s */
  char who;
  const char *want;
} refusals[] = {
    /* a server of another cluster, with a secret and without */
    {SECRET, "jobA", SECRET, "jobB", 0, 'c',
     "127.0.0.1:2223 belongs to cluster 'jobA', this client's is 'jobB': another job's server on "
     "this port?"},
    {NULL, "jobA", NULL, "jobB", 0, 'c', "belongs to cluster 'jobA', this client's is 'jobB'"},
    {SECRET, NULL, SECRET, "jobB", 0, 'c', "belongs to cluster none, this client's is 'jobB'"},
    /* secrets */
    {SECRET, "jobA", "another-secret-of-16", "jobA", 0, 's', "wrong secret (authentication failed"},
    {SECRET, "jobA", NULL, "jobA", 0, 'c', "127.0.0.1:2223 requires a secret"},
    {NULL, "jobA", SECRET, "jobA", 0, 'c', "127.0.0.1:2223 does not authenticate (an insecure"},
    /* changed on the way, which fails a MAC: the HELLO's cluster id (the
     * client of jobB then answers as if the server were of jobB), the
     * AUTH's id or nonce (the server's check), the AUTH_OK's MAC (the
     * client's) */
    {SECRET, "jobA", SECRET, "jobB", 1, 's',
     "wrong secret (authentication failed: another secret, or the handshake was altered on the "
     "way)"},
    {SECRET, "jobA", SECRET, "jobA", 2, 's', "the handshake was altered on the way"},
    {SECRET, "jobA", SECRET, "jobA", 3, 's', "the handshake was altered on the way"},
    {SECRET, "jobA", SECRET, "jobA", 4, 'c', "127.0.0.1:2223 does not know this process's secret"},
    /* without a secret nothing is proved: a changed id is only compared */
    {NULL, "jobA", NULL, "jobA", 2, 's', "a client of cluster 'jobB', this server's is 'jobA'"},
};

static void test_refusals(void) {
  for (size_t i = 0; i < sizeof refusals / sizeof *refusals; i++) {
    const struct refusal *r = &refusals[i];
    gr_error err;
    char who;
    gr_status st = handshake(r->s_secret, r->s_id, r->c_secret, r->c_id, r->change, &who, &err);
    GR_CHECK_MSG(st == GR_ERR_UNAUTHENTICATED, "case %zu: %s", i, err.msg);
    GR_CHECK_MSG(who == r->who, "case %zu: refused by '%c', want '%c': %s", i, who, r->who,
                 err.msg);
    GR_CHECK_STR_CONTAINS(err.msg, r->want);
  }
}

/* The AUTH_OK of another handshake (a replay) fails the client's check:
 * the MAC covers both nonces. */
static void test_replayed_auth_ok(void) {
  uint8_t n1[GR_AUTH_NONCE], n2[GR_AUTH_NONCE], buf[512];
  size_t len;
  gr_msg hello1, hello2, auth1, auth2, ok1;
  gr_error err;
  GR_CHECK(deliver(gr_hello_new(SECRET, "jobA", 0, n1, &err), GR_MSG_HELLO, buf, &len, &hello1));
  GR_CHECK(deliver(gr_hello_new(SECRET, "jobA", 0, n2, &err), GR_MSG_HELLO, buf, &len, &hello2));
  gr_hs_client a = {.secret = SECRET, .cluster = "jobA", .address = "a:1"}, b = a;
  gr_outmsg *out;
  GR_CHECK_OK(gr_hs_client_answer(&a, &hello1, &out, &err), err);
  GR_CHECK(deliver(out, GR_MSG_AUTH, buf, &len, &auth1));
  GR_CHECK_OK(gr_hs_client_answer(&b, &hello2, &out, &err), err);
  GR_CHECK(deliver(out, GR_MSG_AUTH, buf, &len, &auth2));
  gr_hs_result res;
  GR_CHECK_OK(gr_hs_server_check(SECRET, "jobA", 0, n1, &auth1, &out, &res, &err), err);
  GR_CHECK(deliver(out, GR_MSG_AUTH_OK, buf, &len, &ok1));
  GR_CHECK_OK(gr_hs_client_check(&a, &ok1, &err), err);
  GR_CHECK_EQ_INT(gr_hs_client_check(&b, &ok1, &err), GR_ERR_UNAUTHENTICATED);
  /* and an AUTH answering another HELLO fails the server's */
  GR_CHECK_EQ_INT(gr_hs_server_check(SECRET, "jobA", 0, n1, &auth2, &out, &res, &err),
                  GR_ERR_UNAUTHENTICATED);
  gr_msg_free(&hello1), gr_msg_free(&hello2), gr_msg_free(&auth1), gr_msg_free(&auth2);
  gr_msg_free(&ok1);
}

/* The mode's byte (the fixint after the key "mode") in a message's bytes
 * changed on the way from `from` to `to`, parsed again into *m. */
static bool tamper_mode(uint8_t *buf, size_t len, uint8_t from, uint8_t to, gr_msg *m) {
  const uint8_t key[] = {0xa4, 'm', 'o', 'd', 'e', from};
  uint8_t *at = memmem(buf, len, key, sizeof key);
  gr_error err;
  if (!at) return false;
  at[5] = to;
  gr_msg_free(m);
  return gr_msg_parse(m, buf + GR_WIRE_HEADER_SIZE, len - GR_WIRE_HEADER_SIZE, &err) == GR_OK;
}

/* One handshake with modes (GR_AUTH_MODE_*): the server requires s_mode
 * (as its HELLO says), the client is remote or not and has TLS or not;
 * change: 1 HELLO's mode becomes hello_to, 2 AUTH's mode becomes auth_to
 * (its byte altered on the way). Returns the first error's code (*who the
 * side); with GR_OK, *mode what both use, and both sides' frame keys
 * must be equal when it has MACs. */
static gr_status modes(uint8_t s_mode, bool remote, bool tls, int change, uint8_t to, uint8_t *mode,
                       char *who, gr_error *err) {
  uint8_t snonce[GR_AUTH_NONCE], buf[512];
  size_t len = 0;
  gr_msg hello, auth, ok;
  *who = '?';
  GR_CHECK(
      deliver(gr_hello_new(SECRET, "jobA", s_mode, snonce, err), GR_MSG_HELLO, buf, &len, &hello));
  if (change == 1) GR_CHECK(tamper_mode(buf, len, s_mode, to, &hello));
  gr_hs_client hs = {.secret = SECRET,
                     .cluster = "jobA",
                     .address = "10.0.0.1:2223",
                     .remote = remote,
                     .tls = tls};
  gr_outmsg *out;
  gr_status st = gr_hs_client_answer(&hs, &hello, &out, err);
  gr_msg_free(&hello);
  if (st != GR_OK) return *who = 'c', st;
  GR_CHECK(deliver(out, GR_MSG_AUTH, buf, &len, &auth));
  if (change == 2) GR_CHECK(tamper_mode(buf, len, hs.mode, to, &auth));
  gr_hs_result res;
  st = gr_hs_server_check(SECRET, "jobA", s_mode, snonce, &auth, &out, &res, err);
  gr_msg_free(&auth);
  if (st != GR_OK) return *who = 's', st;
  GR_CHECK(deliver(out, GR_MSG_AUTH_OK, buf, &len, &ok));
  st = gr_hs_client_check(&hs, &ok, err);
  gr_msg_free(&ok);
  if (st != GR_OK) return *who = 'c', st;
  GR_CHECK_EQ_INT(hs.mode, res.mode);
  if (res.mode & GR_AUTH_MODE_MACS) GR_CHECK(!memcmp(hs.keys, res.keys, GR_AUTH_FRAME_KEYS));
  *mode = res.mode;
  return GR_OK;
}

/* What each side requires of a connection across hosts, and who refuses
 * a downgrade. */
static void test_modes(void) {
  gr_error err;
  char who;
  uint8_t mode;
  const uint8_t T = GR_AUTH_MODE_TLS, M = GR_AUTH_MODE_MACS;
  static const struct {
    uint8_t s_mode;
    bool remote, tls;
    uint8_t want;
  } agree[] = {
      {0, false, false, 0}, /* loopback: plaintext */
      {0, false, true, 0},  /* ... with TLS on both sides too */
      {M, false, false, M}, /* the server sees another host: MACs */
      {0, true, false, M},  /* the client does: MACs */
      {T, false, true, T},  /* TLS when the server has it */
      {T, true, true, T},
  };
  for (size_t i = 0; i < sizeof agree / sizeof *agree; i++) {
    gr_status st = modes(agree[i].s_mode, agree[i].remote, agree[i].tls, 0, 0, &mode, &who, &err);
    GR_CHECK_MSG(st == GR_OK, "case %zu: %c: %s", i, who, err.msg);
    if (st == GR_OK) GR_CHECK_EQ_INT(mode, agree[i].want);
  }
  /* a server that requires TLS, a client without it */
  GR_CHECK_EQ_INT(modes(T, true, false, 0, 0, &mode, &who, &err), GR_ERR_UNAUTHENTICATED);
  GR_CHECK_EQ_INT(who, 'c');
  GR_CHECK_STR_CONTAINS(err.msg, "10.0.0.1:2223 requires TLS");
  GR_CHECK_STR_CONTAINS(err.msg, "--tls-cert");
  /* a client with TLS across hosts, a server that does not offer it (or a
   * HELLO whose TLS was taken out on the way) */
  GR_CHECK_EQ_INT(modes(M, true, true, 0, 0, &mode, &who, &err), GR_ERR_UNAUTHENTICATED);
  GR_CHECK_STR_CONTAINS(err.msg, "does not offer TLS");
  GR_CHECK_EQ_INT(modes(T, true, true, 1, 0, &mode, &who, &err), GR_ERR_UNAUTHENTICATED);
  GR_CHECK_EQ_INT(who, 'c');
  /* HELLO's MACs taken out on the way: a client across hosts uses them
   * anyway; one that is not fails the server's check */
  GR_CHECK_OK(modes(M, true, false, 1, 0, &mode, &who, &err), err);
  GR_CHECK_EQ_INT(mode, M);
  GR_CHECK_EQ_INT(modes(M, false, false, 1, 0, &mode, &who, &err), GR_ERR_UNAUTHENTICATED);
  GR_CHECK_EQ_INT(who, 's');
  /* AUTH's mode altered on the way: its MAC fails */
  GR_CHECK_EQ_INT(modes(M, true, false, 2, 0, &mode, &who, &err), GR_ERR_UNAUTHENTICATED);
  GR_CHECK_EQ_INT(who, 's');
  GR_CHECK_STR_CONTAINS(err.msg, "wrong secret");
  /* MACs without a secret make no sense: refused as a bad field */
  uint8_t snonce[GR_AUTH_NONCE], buf[512];
  size_t len;
  gr_msg hello;
  GR_CHECK(deliver(gr_hello_new(NULL, "jobA", M, snonce, &err), GR_MSG_HELLO, buf, &len, &hello));
  gr_hs_client hs = {.cluster = "jobA", .address = "a:1"};
  gr_outmsg *out;
  GR_CHECK_EQ_INT(gr_hs_client_answer(&hs, &hello, &out, &err), GR_ERR_INVALID_ARGUMENT);
  GR_CHECK_STR_CONTAINS(err.msg, "per-frame MACs without a secret");
  gr_msg_free(&hello);
}

static void test_cluster_id_check(void) {
  gr_error err;
  const char *good[] = {"a", "launch-0123456789abcdef", "slurm-123.0", "_x", "A.b_c-9"};
  for (size_t i = 0; i < sizeof good / sizeof *good; i++)
    GR_CHECK_OK(gr_cluster_id_check(good[i], &err), err);
  GR_CHECK_EQ_INT(gr_cluster_id_check("", &err), GR_ERR_INVALID_ARGUMENT);
  GR_CHECK_STR_CONTAINS(err.msg, "the cluster id is empty");
  GR_CHECK_EQ_INT(gr_cluster_id_check("job a", &err), GR_ERR_INVALID_ARGUMENT);
  GR_CHECK_STR_CONTAINS(err.msg, "cluster id 'job a': want 1 to 64 letters, digits");
  GR_CHECK_EQ_INT(gr_cluster_id_check("a:b", &err), GR_ERR_INVALID_ARGUMENT);
  char long_id[70];
  memset(long_id, 'x', 65);
  long_id[65] = '\0';
  GR_CHECK_EQ_INT(gr_cluster_id_check(long_id, &err), GR_ERR_INVALID_ARGUMENT);
}

/* The spec id of a JSON cluster text (or TF_CONFIG when tf). */
static void spec_id(const char *text, bool tf, char out[GR_CLUSTER_ID_MAX + 1]) {
  gr_cluster *c = NULL;
  gr_error err;
  out[0] = '\0';
  GR_CHECK_OK(tf ? gr_cluster_from_tf_config(text, &c, NULL, &err)
                 : gr_cluster_parse_json(text, strlen(text), "spec", &c, &err),
              err);
  if (c) GR_CHECK_OK(gr_cluster_spec_id(c, out, &err), err);
  gr_cluster_free(c);
}

static void test_spec_id(void) {
  char a[GR_CLUSTER_ID_MAX + 1], b[GR_CLUSTER_ID_MAX + 1];
  spec_id("{\"ps\": [\"h0:2222\"], \"worker\": [\"h1:2222\", \"h2:2222\"]}", false, a);
  GR_CHECK_EQ_INT((int)strlen(a), 37);
  GR_CHECK(!strncmp(a, "spec-", 5));
  GR_CHECK(gr_cluster_id_check(a, NULL) == GR_OK);
  const char *same[][2] = {
      /* another order of jobs, another case of the hosts */
      {"{\"worker\": [\"H1:2222\", \"h2:2222\"], \"ps\": [\"h0:2222\"]}", NULL},
      /* TF_CONFIG of any of its tasks */
      {"{\"cluster\": {\"ps\": [\"h0:2222\"], \"worker\": [\"h1:2222\", \"h2:2222\"]}, "
       "\"task\": {\"type\": \"worker\", \"index\": 1}}",
       "tf"},
      /* the placer's cluster file, with devices and flop rates */
      {"{\"jobs\": {\"ps\": [{\"address\": \"h0:2222\", \"devices\": [{\"flops\": 5e10}]}], "
       "\"worker\": [{\"address\": \"h1:2222\", \"devices\": [{\"flops\": 1e11}]}, "
       "{\"address\": \"h2:2222\", \"devices\": [{\"count\": 2, \"flops\": 1e11}]}]}}",
       NULL},
  };
  for (size_t i = 0; i < sizeof same / sizeof *same; i++) {
    spec_id(same[i][0], same[i][1] != NULL, b);
    GR_CHECK_MSG(!strcmp(a, b), "%zu: %s vs %s", i, b, a);
  }
  const char *other[] = {
      "{\"ps\": [\"h0:2222\"], \"worker\": [\"h1:2222\", \"h2:2223\"]}",    /* a port */
      "{\"ps\": [\"h0:2222\"], \"worker\": [\"h2:2222\", \"h1:2222\"]}",    /* tasks swapped */
      "{\"ps\": [\"h0:2222\"], \"worker\": [\"h1:2222\"]}",                 /* a task fewer */
      "{\"chief\": [\"h0:2222\"], \"worker\": [\"h1:2222\", \"h2:2222\"]}", /* a job renamed */
  };
  for (size_t i = 0; i < sizeof other / sizeof *other; i++) {
    spec_id(other[i], false, b);
    GR_CHECK_MSG(b[0] && strcmp(a, b) != 0, "%zu: the same id %s", i, b);
  }
}

int main(void) {
  GR_RUN(test_agree);
  GR_RUN(test_refusals);
  GR_RUN(test_replayed_auth_ok);
  GR_RUN(test_modes);
  GR_RUN(test_cluster_id_check);
  GR_RUN(test_spec_id);
  return gr_test_finish();
}
