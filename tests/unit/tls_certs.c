/* gt_certs: the TLS tests' certificates (tls_certs.h). */
#include "tls_certs.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "test_util.h" /* gt_remove_tree */

static void path(const gt_certs *k, const char *name, char *out) {
  snprintf(out, PATH_MAX, "%s/%s", k->dir, name);
}

bool gt_certs_make(gt_certs *k) {
  memset(k, 0, sizeof *k);
  snprintf(k->dir, sizeof k->dir, "/tmp/gr_certs_XXXXXX");
  if (!mkdtemp(k->dir)) {
    k->dir[0] = '\0';
    fprintf(stderr, "gt_certs: no temporary directory\n");
    return false;
  }
  char cmd[PATH_MAX + 128];
  snprintf(cmd, sizeof cmd, "sh %s/tests/unit/tls_certs.sh %s", GR_SOURCE_DIR, k->dir);
  int rc = system(cmd);
  if (rc == -1 || !WIFEXITED(rc) || WEXITSTATUS(rc) != 0) {
    fprintf(stderr, "gt_certs: '%s' failed (is the openssl command installed?)\n", cmd);
    gt_certs_remove(k);
    return false;
  }
  path(k, "ca.crt", k->ca);
  path(k, "node.crt", k->cert);
  path(k, "node.key", k->key);
  path(k, "other-ca.crt", k->other_ca);
  path(k, "rogue.crt", k->rogue_cert);
  path(k, "rogue.key", k->rogue_key);
  path(k, "serveronly.crt", k->server_cert);
  path(k, "serveronly.key", k->server_key);
  return true;
}

void gt_certs_remove(gt_certs *k) {
  if (k->dir[0]) gt_remove_tree(k->dir);
  k->dir[0] = '\0';
}
