/* The handshake that opens every connection (docs/distributed.md
 * "Security"), as messages: what each carries and how it is checked, with
 * no sockets (transport_dial.c reads and writes them).
 *
 *   server -> client   HELLO    {auth, cluster, mode, nonce (when auth)}
 *   (TLS starts here when the mode says so)
 *   client -> server   AUTH     {cluster, mode, nonce, mac (when auth)}
 *   server -> client   AUTH_OK  {mac (when auth)}
 *
 * With a secret (auth), the client's mac is HMAC-SHA256(secret, "client" |
 * server nonce | client nonce | server's cluster id | client's cluster id
 * | mode) and the server's HMAC-SHA256(secret, "server" | client nonce |
 * server nonce | the same two ids | mode): each side proves it knows the
 * secret, and an id or mode changed on the way fails the other side's MAC.
 *
 * The mode (GR_AUTH_MODE_*): HELLO's says what the server requires of
 * this connection (a peer that is not on loopback: TLS when the server has
 * it, else per-frame MACs), AUTH's what both sides then use: the client
 * adds its own requirement (a server it reached across hosts: TLS when it
 * has it, else MACs), and refuses a server that wants TLS it does not have,
 * or that does not offer TLS across hosts when it has it; the server
 * refuses an AUTH whose mode drops what it required. The client refuses a
 * server of another cluster as soon as it reads HELLO, before it answers;
 * the server refuses a client of another cluster (or a wrong MAC) when it
 * reads AUTH. Without a secret (an insecure loopback server) the ids are
 * compared the same way, unauthenticated. Refusals are
 * GR_ERR_UNAUTHENTICATED.
 *
 *   // client                                     // server, at accept
 *                                                 m = gr_hello_new(secret, id, mode, nonce,
 *                                                                  &err);
 *   gr_hs_client hs = {secret, id, "host:port", .remote = true, .tls = false};
 *   gr_hs_client_answer(&hs, &hello, &auth, &err);
 *                                                 gr_hs_server_check(secret, id, mode, nonce,
 *                                                                    &auth, &ok, &res, &err);
 *   gr_hs_client_check(&hs, &ok, &err);           // hs.mode, hs.keys as res's
 *
 * Internal to distributed/. */
#ifndef GR_HANDSHAKE_INTERNAL_H
#define GR_HANDSHAKE_INTERNAL_H

#include "distributed/gr_distributed.h"
#include "distributed/wire_internal.h"

/* A server's HELLO, requiring mode (GR_AUTH_MODE_*: TLS or MACs, not both;
 * MACs only with a secret); with a secret, nonce receives the fresh nonce
 * it carries (the server keeps it to check the AUTH). NULL on failure. */
gr_outmsg *gr_hello_new(const char *secret, const char *cluster, uint8_t mode,
                        uint8_t nonce[GR_AUTH_NONCE], gr_error *err);

/* The client's side of one handshake. */
typedef struct gr_hs_client {
  const char *secret;  /* this client's (NULL: none) */
  const char *cluster; /* this client's cluster id (NULL: none) */
  const char *address; /* the server's, for messages */
  bool remote;         /* the server is not on loopback: this client wants TLS or MACs */
  bool tls;            /* this client has TLS (a certificate, key and CA) */
  /* filled by gr_hs_client_answer */
  bool auth;
  uint8_t mode; /* what the connection uses (GR_AUTH_MODE_*) */
  uint8_t server_nonce[GR_AUTH_NONCE], nonce[GR_AUTH_NONCE];
  char server_cluster[GR_CLUSTER_ID_MAX + 1];
  /* filled by gr_hs_client_check, with GR_AUTH_MODE_MACS: the frame keys */
  uint8_t keys[GR_AUTH_FRAME_KEYS];
} gr_hs_client;

/* Reads the server's HELLO and checks it against the client: the same
 * cluster; a secret on both sides or on neither; TLS as above. *auth: the
 * AUTH to send (over TLS when hs->mode says so). */
gr_status gr_hs_client_answer(gr_hs_client *hs, const gr_msg *hello, gr_outmsg **auth,
                              gr_error *err);
/* Checks the server's AUTH_OK (its MAC, when authenticating); derives the
 * frame keys when the mode has MACs. */
gr_status gr_hs_client_check(gr_hs_client *hs, const gr_msg *ok, gr_error *err);

/* What the server's check agreed on. */
typedef struct gr_hs_result {
  uint8_t mode;                     /* GR_AUTH_MODE_* */
  uint8_t keys[GR_AUTH_FRAME_KEYS]; /* with GR_AUTH_MODE_MACS */
} gr_hs_result;

/* The server's check of a peer's AUTH, against its secret (NULL: none),
 * cluster id, the mode its HELLO required and the nonce it carried. *ok:
 * the AUTH_OK to send, *res what the connection uses. The errors do not
 * name the peer (the caller does). */
gr_status gr_hs_server_check(const char *secret, const char *cluster, uint8_t mode,
                             const uint8_t nonce[GR_AUTH_NONCE], const gr_msg *auth, gr_outmsg **ok,
                             gr_hs_result *res, gr_error *err);

#endif
