/* The handshake that opens every connection (docs/distributed.md
 * "Security"), as messages: what each carries and how it is checked, with
 * no sockets (transport_dial.c reads and writes them).
 *
 *   server -> client   HELLO    {auth, cluster, nonce (when auth)}
 *   client -> server   AUTH     {cluster, nonce, mac (when auth)}
 *   server -> client   AUTH_OK  {mac (when auth)}
 *
 * With a secret (auth), the client's mac is HMAC-SHA256(secret, "client" |
 * server nonce | client nonce | server's cluster id | client's cluster id)
 * and the server's HMAC-SHA256(secret, "server" | client nonce | server
 * nonce | the same two ids): each side proves it knows the secret, and an
 * id changed on the way fails the other side's MAC. The client refuses a
 * server of another cluster as soon as it reads HELLO, before it answers;
 * the server refuses a client of another cluster (or a wrong MAC) when it
 * reads AUTH. Without a secret (an insecure loopback server) the ids are
 * compared the same way, unauthenticated. Refusals are
 * GR_ERR_UNAUTHENTICATED.
 *
 *   // client                                     // server, at accept
 *                                                 m = gr_hello_new(secret, id, nonce, &err);
 *   gr_hs_client hs = {secret, id, "host:port"};
 *   gr_hs_client_answer(&hs, &hello, &auth, &err);
 *                                                 gr_hs_server_check(secret, id, nonce, &auth,
 *                                                                    &ok, &err);
 *   gr_hs_client_check(&hs, &ok, &err);
 *
 * Internal to distributed/. */
#ifndef GR_HANDSHAKE_INTERNAL_H
#define GR_HANDSHAKE_INTERNAL_H

#include "distributed/gr_distributed.h"
#include "distributed/wire_internal.h"

/* A server's HELLO; with a secret, nonce receives the fresh nonce it
 * carries (the server keeps it to check the AUTH). NULL on failure. */
gr_outmsg *gr_hello_new(const char *secret, const char *cluster, uint8_t nonce[GR_AUTH_NONCE],
                        gr_error *err);

/* The client's side of one handshake. */
typedef struct gr_hs_client {
  const char *secret;  /* this client's (NULL: none) */
  const char *cluster; /* this client's cluster id (NULL: none) */
  const char *address; /* the server's, for messages */
  /* filled by gr_hs_client_answer */
  bool auth;
  uint8_t server_nonce[GR_AUTH_NONCE], nonce[GR_AUTH_NONCE];
  char server_cluster[GR_CLUSTER_ID_MAX + 1];
} gr_hs_client;

/* Reads the server's HELLO and checks it against the client: the same
 * cluster; a secret on both sides or on neither. *auth: the AUTH to send. */
gr_status gr_hs_client_answer(gr_hs_client *hs, const gr_msg *hello, gr_outmsg **auth,
                              gr_error *err);
/* Checks the server's AUTH_OK (its MAC, when authenticating). */
gr_status gr_hs_client_check(const gr_hs_client *hs, const gr_msg *ok, gr_error *err);

/* The server's check of a peer's AUTH, against its secret (NULL: none),
 * cluster id and the nonce its HELLO carried. *ok: the AUTH_OK to send.
 * The errors do not name the peer (the caller does). */
gr_status gr_hs_server_check(const char *secret, const char *cluster,
                             const uint8_t nonce[GR_AUTH_NONCE], const gr_msg *auth, gr_outmsg **ok,
                             gr_error *err);

#endif
