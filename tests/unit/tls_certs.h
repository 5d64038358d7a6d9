/* Certificates for the TLS tests (tests/unit/tls_certs.sh, which runs the
 * openssl commands of docs/security.md) in a fresh temporary directory:
 *
 *   gt_certs k;
 *   if (gt_certs_make(&k)) {
 *     gr_server_options o = {..., .tls_cert = k.cert, .tls_key = k.key, .tls_ca = k.ca};
 *     ...
 *   }
 *   gt_certs_remove(&k);   // always
 *
 * cert/key: "node", signed by the cluster CA ca; rogue_cert/rogue_key:
 * signed by another CA, other_ca; server_cert/server_key: the cluster CA's,
 * but for TLS servers only (extendedKeyUsage serverAuth). */
#ifndef GT_TLS_CERTS_H
#define GT_TLS_CERTS_H

#include <limits.h>
#include <stdbool.h>

typedef struct gt_certs {
  char dir[64];
  char ca[PATH_MAX], cert[PATH_MAX], key[PATH_MAX];
  char other_ca[PATH_MAX], rogue_cert[PATH_MAX], rogue_key[PATH_MAX];
  char server_cert[PATH_MAX], server_key[PATH_MAX];
} gt_certs;

/* Makes them; false (with a line on stderr, nothing left behind) when
 * openssl fails. */
bool gt_certs_make(gt_certs *k);
/* Removes the directory (nothing when it was not made). */
void gt_certs_remove(gt_certs *k);

#endif
