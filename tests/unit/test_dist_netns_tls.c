/* TLS and per-frame MACs between hosts made of network namespaces
 * (netns_harness.h): each task of a 2 ps + 2 worker cluster (`graphrun
 * server` processes) and the client (`graphrun run`) run in namespaces of
 * their own, so every connection crosses a real network stack at 10.213.0.x,
 * not loopback.
 *
 * - With certificates (tls_certs.h: made with the openssl commands of
 *   docs/security.md) the cluster trains over TLS, and without them with
 *   frame MACs, to the same weights, bit for bit.
 * - A client without certificates, one whose certificate another CA signed,
 *   and one that trusts another CA are refused, with errors naming the
 *   address, and the server's log naming the client.
 * - A proxy in a namespace of its own, in front of ps:0, alters one byte on
 *   the way (fault_proxy.h, TAMPER) while the cluster trains: the task that
 *   receives it refuses the frame (TLS: a record that fails its MAC; MACs:
 *   a frame that fails its MAC, or one no longer a frame) and logs it, the
 *   run recovers from its checkpoint, and its weights are those of the
 *   undisturbed run, bit for bit: the altered frame was never applied.
 *
 * Needs root and `ip netns`; without them it exits 77 (skipped). */
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cluster_harness.h"
#include "gr_test.h"
#include "netns_harness.h"
#include "tls_certs.h"

#define NT         4 /* tasks */
#define STEPS      300
#define SAVE_EVERY 50

static gt_netns net;
static gt_certs K;
static char ref[PATH_MAX]; /* the weights of the TLS run */

/* The cluster in the namespaces; with TLS, every server has the node
 * certificate. */
static bool start(gt_cluster *c, bool tls) {
  const char *args[] = {"--tls-cert", K.cert, "--tls-key", K.key, "--tls-ca", K.ca, NULL};
  gt_cluster_options o = {
      .ps = 2, .workers = 2, .client_netns = net.client, .server_args = tls ? args : NULL};
  for (int k = 0; k < NT; k++) o.netns[k] = net.ns[k], o.host[k] = net.host[k];
  bool ok = gt_cluster_start(c, &o);
  GR_CHECK_MSG(ok, "no cluster in the namespaces");
  return ok;
}

/* The training on c into out (dir, else c's), with the client's extra
 * flags; its exit code, its output in *run (finished). */
static int train(gt_cluster *c, gt_proc *run, const char *out, const char *const *extra) {
  gt_cluster_run_mlp(c, run, out, STEPS, SAVE_EVERY, extra);
  bool ended = gt_proc_wait(run, NULL, 120);
  gt_proc_finish(run);
  GR_CHECK_MSG(ended, "the run did not end in 120 s:\n%s", run->buf);
  return gt_proc_exit_code(run);
}

static const char *const *client_tls(const char *cert, const char *key, const char *ca) {
  static const char *args[7];
  args[0] = "--tls-cert", args[1] = cert, args[2] = "--tls-key", args[3] = key;
  args[4] = "--tls-ca", args[5] = ca, args[6] = NULL;
  return args;
}

static void test_train_tls_and_macs(void) {
  gt_cluster c;
  gt_proc run;
  if (start(&c, true)) {
    for (int k = 0; k < NT; k++) GR_CHECK_STR_CONTAINS(c.srv[k].buf, "TLS across hosts");
    int rc = train(&c, &run, ref, client_tls(K.cert, K.key, K.ca));
    GR_CHECK_MSG(rc == 0, "the TLS run failed (exit %d):\n%s", rc, run.buf);
  }
  gt_cluster_stop(&c);
  if (start(&c, false)) {
    int rc = train(&c, &run, "macs", NULL);
    GR_CHECK_MSG(rc == 0, "the MAC run failed (exit %d):\n%s", rc, run.buf);
    char out[PATH_MAX];
    gt_cluster_path(&c, "macs", out, sizeof out);
    GR_CHECK(gt_same_weights(ref, out));
  }
  gt_cluster_stop(&c);
}

/* A client with these TLS flags (NULL: none) is refused: exit 1, its error
 * naming ps:0's address and holding want; with s_want, ps:0's log names
 * the client's address and holds it. */
static void refused(gt_cluster *c, const char *const *flags, const char *want, const char *s_want) {
  gt_proc run;
  int rc = train(c, &run, "refused", flags);
  GR_CHECK_MSG(rc == 1, "exit %d, want 1:\n%s", rc, run.buf);
  GR_CHECK_STR_CONTAINS(run.buf, c->addr[0]);
  GR_CHECK_STR_CONTAINS(run.buf, want);
  const char *line = strstr(run.buf, "graphrun run: ");
  if (line) printf("client: %.*s\n", (int)strcspn(line, "\n"), line);
  if (!s_want) return;
  char who[64];
  snprintf(who, sizeof who, "refused 10.213.0.100:");
  GR_CHECK_MSG(gt_proc_wait_line(&c->srv[0], s_want, 20), "ps:0's log lacks '%s':\n%s", s_want,
               c->srv[0].buf);
  GR_CHECK_STR_CONTAINS(c->srv[0].buf, who);
}

static void test_refused_peers(void) {
  gt_cluster c;
  if (start(&c, true)) {
    refused(&c, NULL, "requires TLS", NULL);
    /* trusts another CA: the servers' certificates are not of it */
    refused(&c, client_tls(K.rogue_cert, K.rogue_key, K.other_ca), "certificate verify failed",
            "the TLS handshake failed");
    /* its certificate is of another CA (it trusts both) */
    char both[PATH_MAX], cmd[3 * PATH_MAX + 16];
    snprintf(both, sizeof both, "%s/both-cas.crt", K.dir);
    snprintf(cmd, sizeof cmd, "cat %s %s > %s", K.ca, K.other_ca, both);
    GR_CHECK(system(cmd) == 0);
    refused(&c, client_tls(K.rogue_cert, K.rogue_key, both),
            "refused this process's TLS certificate", "issuer /CN=graphrun test other-ca");
  }
  gt_cluster_stop(&c);
  /* a TLS client, servers without TLS */
  if (start(&c, false)) refused(&c, client_tls(K.cert, K.key, K.ca), "does not offer TLS", NULL);
  gt_cluster_stop(&c);
}

/* ps:0 behind a proxy in the spare namespace; once training has saved a
 * checkpoint, a byte 200 bytes ahead on every connection to ps:0 is
 * altered; ps:0 logs want; the run recovers and ends with ref's weights. */
static void tampered(bool tls, const char *want) {
  gt_cluster c;
  if (!start(&c, tls)) return gt_cluster_stop(&c);
  int back = gt_netns_enter(net.spare);
  GR_CHECK(back >= 0);
  gt_proxy *px = back >= 0 ? gt_proxy_start_on(GT_NETNS_SPARE, c.addr[0]) : NULL;
  gt_netns_leave(back);
  GR_CHECK(px != NULL);
  if (px) {
    char via[64];
    snprintf(via, sizeof via, "%s:%d", GT_NETNS_SPARE, gt_proxy_port(px));
    gt_cluster_route(&c, 0, via);
    gt_proc run;
    const char *name = tls ? "tamper_tls" : "tamper_macs";
    gt_cluster_run_mlp(&c, &run, name, STEPS, SAVE_EVERY,
                       tls ? client_tls(K.cert, K.key, K.ca) : NULL);
    bool saved = gt_proc_wait_line(&run, "saved a checkpoint after step 100 ", 60);
    GR_CHECK_MSG(saved, "no training:\n%s", run.buf);
    if (saved)
      gt_proxy_fault(px,
                     (gt_fault){.kind = GT_FAULT_TAMPER, .dir = GT_DIR_TO_TARGET, .bytes = 200});
    bool seen = saved && gt_proc_wait_line(&c.srv[0], want, 30);
    GR_CHECK_MSG(seen, "ps:0 did not refuse an altered frame ('%s'):\n%s", want, c.srv[0].buf);
    const char *at = seen ? strstr(c.srv[0].buf, want) : NULL;
    if (at) printf("ps:0: %.*s\n", (int)strcspn(at, "\n"), at);
    GR_CHECK(gt_proxy_get_stats(px).tampered >= 1);
    GR_CHECK_MSG(gt_proc_wait(&run, NULL, 120), "no end:\n%s", run.buf);
    gt_proc_finish(&run);
    GR_CHECK_MSG(gt_proc_exit_code(&run) == 0, "exit %d:\n%s", gt_proc_exit_code(&run), run.buf);
    GR_CHECK_STR_CONTAINS(run.buf, "recovered in ");
    char out[PATH_MAX];
    gt_cluster_path(&c, name, out, sizeof out);
    GR_CHECK(gt_same_weights(ref, out));
  }
  gt_cluster_stop(&c);
  gt_proxy_stop(px);
}

static void test_tampered_tls(void) {
  tampered(true, "TLS with " GT_NETNS_SPARE ":");
}

static void test_tampered_macs(void) {
  tampered(false, "bad frame from " GT_NETNS_SPARE ":");
}

int main(void) {
  gt_proc_isolate();
  double t0 = gt_now();
  int rc = gt_netns_start(&net, NT, "the TLS tests across namespaces");
  if (rc) return rc;
  if (!gt_certs_make(&K)) {
    gt_certs_remove(&K);
    gt_netns_remove(&net);
    return 1;
  }
  snprintf(ref, sizeof ref, "/tmp/gr_netns_tls_ref_%d", (int)getpid());
  mkdir(ref, 0700);
  GR_RUN(test_train_tls_and_macs); /* ref: the other cases compare with it */
  GR_RUN(test_refused_peers);
  GR_RUN(test_tampered_tls);
  GR_RUN(test_tampered_macs);
  gt_netns_remove(&net);
  gt_certs_remove(&K);
  gt_remove_tree(ref);
  printf("netns TLS test: %.1f s\n", gt_now() - t0);
  return gr_test_finish();
}
