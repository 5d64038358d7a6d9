/* --tls-cert, --tls-key and --tls-ca (cli_cluster.h): their help, their
 * defaults from the environment, and the TLS of the masters this process
 * connects. */
#include <stdlib.h>

#include "cli_cluster.h"

const char cli_tls_usage[] =
    "  --tls-cert F       this process's TLS certificate (PEM), signed by the cluster's CA\n"
    "  --tls-key F        its private key (PEM, mode 0600)\n"
    "  --tls-ca F         the cluster's CA certificate (PEM). With all three, connections\n"
    "                     to other hosts use TLS 1.3, both sides presenting a certificate\n"
    "                     the CA signed, and plaintext peers there are refused; without\n"
    "                     them, every frame to or from another host carries a MAC\n"
    "                     (authenticated, not encrypted). Loopback stays plaintext\n"
    "                     (defaults: GRAPHRUN_TLS_CERT, GRAPHRUN_TLS_KEY, GRAPHRUN_TLS_CA)\n";

bool cli_tls_flag(int c, int first, const char *arg, cli_tls *t) {
  if (c == first)
    t->cert = arg;
  else if (c == first + 1)
    t->key = arg;
  else if (c == first + 2)
    t->ca = arg;
  else
    return false;
  return true;
}

void cli_tls_env(cli_tls *t) {
  if (!t->cert) t->cert = getenv("GRAPHRUN_TLS_CERT");
  if (!t->key) t->key = getenv("GRAPHRUN_TLS_KEY");
  if (!t->ca) t->ca = getenv("GRAPHRUN_TLS_CA");
}

/* this process's, for every master it connects */
static cli_tls masters;

void cli_set_tls(const cli_tls *t) {
  masters = *t;
  cli_tls_env(&masters);
}

void cli_master_tls(gr_master_options *mo) {
  mo->tls_cert = masters.cert;
  mo->tls_key = masters.key;
  mo->tls_ca = masters.ca;
}
