/* The handshake's messages and checks (handshake_internal.h). */
#include <stdio.h>
#include <string.h>

#include "distributed/handshake_internal.h"
#include "distributed/server_internal.h" /* gr_container_name_ok, gr_printable_name */

static const char *id_or_empty(const char *id) {
  return id ? id : "";
}

/* A cluster id for a message: 'id', or "none". */
static const char *id_text(const char *id, char buf[GR_CLUSTER_ID_MAX + 8]) {
  if (!id || !*id) return "none";
  snprintf(buf, GR_CLUSTER_ID_MAX + 8, "'%s'", id);
  return buf;
}

/* The field `cluster` of a handshake message: "" (none) or a cluster id. */
static gr_status read_cluster(const msgpack_object *root, char out[GR_CLUSTER_ID_MAX + 1],
                              gr_error *err) {
  const char *p;
  size_t n;
  GR_TRY(gr_msg_strv(root, "cluster", &p, &n, err));
  if (n > 0 && !gr_container_name_ok(p, n, false)) {
    char shown[GR_CLUSTER_ID_MAX + 4];
    return gr_error_set(err, GR_ERR_INVALID_ARGUMENT,
                        "field 'cluster': '%s' is not a cluster id (1 to %d letters, digits, "
                        "'_', '-' or '.')",
                        gr_printable_name(p, n, shown), GR_CLUSTER_ID_MAX);
  }
  memcpy(out, p, n);
  out[n] = '\0';
  return GR_OK;
}

/* The field `mode` (GR_AUTH_MODE_*; absent: 0): TLS or MACs, not both,
 * MACs only with a secret (auth). */
static gr_status read_mode(const msgpack_object *root, bool auth, uint8_t *out, gr_error *err) {
  int64_t v = 0;
  if (gr_msg_get(root, "mode")) GR_TRY(gr_msg_i64(root, "mode", 0, GR_AUTH_MODE_MACS, &v, err));
  if (v == GR_AUTH_MODE_MACS && !auth)
    return gr_error_set(err, GR_ERR_INVALID_ARGUMENT,
                        "field 'mode': per-frame MACs without a secret");
  *out = (uint8_t)v;
  return GR_OK;
}

gr_outmsg *gr_hello_new(const char *secret, const char *cluster, uint8_t mode,
                        uint8_t nonce[GR_AUTH_NONCE], gr_error *err) {
  if (secret && gr_auth_random(nonce, GR_AUTH_NONCE, err) != GR_OK) return NULL;
  gr_outmsg *m = gr_outmsg_new(GR_MSG_HELLO, secret ? 4 : 3);
  if (!m) {
    gr_error_set_oom(err);
    return NULL;
  }
  gr_outmsg_bool(m, "auth", secret != NULL);
  gr_outmsg_str(m, "cluster", id_or_empty(cluster));
  gr_outmsg_u64(m, "mode", mode);
  if (secret) gr_outmsg_bin(m, "nonce", nonce, GR_AUTH_NONCE);
  return m;
}

/* ---- the client ---------------------------------------------------------------- */

static gr_status read_hello(gr_hs_client *hs, const msgpack_object *root, uint8_t *mode,
                            gr_error *err) {
  const void *nonce;
  GR_TRY(gr_msg_bool(root, "auth", &hs->auth, err));
  GR_TRY(read_cluster(root, hs->server_cluster, err));
  GR_TRY(read_mode(root, hs->auth, mode, err));
  if (hs->auth) {
    GR_TRY(gr_msg_bin(root, "nonce", GR_AUTH_NONCE, &nonce, err));
    memcpy(hs->server_nonce, nonce, GR_AUTH_NONCE);
  }
  return GR_OK;
}

/* The connection's mode from what the server wants and what this client
 * wants (hs->remote: TLS when it has it, else MACs). */
static gr_status client_mode(gr_hs_client *hs, uint8_t wants, gr_error *err) {
  if ((wants & GR_AUTH_MODE_TLS) && !hs->tls)
    return gr_error_set(err, GR_ERR_UNAUTHENTICATED,
                        "%s requires TLS (this connection crosses hosts), and this client has no "
                        "certificate: give it --tls-cert, --tls-key and --tls-ca (or "
                        "GRAPHRUN_TLS_CERT, _KEY, _CA), as the servers have",
                        hs->address);
  if (!(wants & GR_AUTH_MODE_TLS) && hs->tls && hs->remote)
    return gr_error_set(err, GR_ERR_UNAUTHENTICATED,
                        "%s does not offer TLS, and this client requires it across hosts: a server "
                        "started without --tls-cert, --tls-key and --tls-ca (or its hello was "
                        "altered on the way)",
                        hs->address);
  hs->mode = wants & GR_AUTH_MODE_TLS;
  if (!hs->mode && hs->auth && (wants || hs->remote)) hs->mode = GR_AUTH_MODE_MACS;
  return GR_OK;
}

gr_status gr_hs_client_answer(gr_hs_client *hs, const gr_msg *hello, gr_outmsg **auth,
                              gr_error *err) {
  *auth = NULL;
  uint8_t wants = 0;
  if (read_hello(hs, &hello->root, &wants, err) != GR_OK) {
    gr_error_prefix(err, "%s: hello", hs->address);
    return err ? err->code : GR_ERR_INVALID_ARGUMENT;
  }
  const char *mine = id_or_empty(hs->cluster);
  if (strcmp(hs->server_cluster, mine) != 0) {
    char a[GR_CLUSTER_ID_MAX + 8], b[GR_CLUSTER_ID_MAX + 8];
    return gr_error_set(err, GR_ERR_UNAUTHENTICATED,
                        "%s belongs to cluster %s, this client's is %s: another job's server on "
                        "this port? (a cluster's servers and clients need the same cluster id)",
                        hs->address, id_text(hs->server_cluster, a), id_text(mine, b));
  }
  if (hs->auth && !hs->secret)
    return gr_error_set(err, GR_ERR_UNAUTHENTICATED,
                        "%s requires a secret (graphrun --secret-file FILE, or "
                        "GRAPHRUN_SECRET_FILE)",
                        hs->address);
  if (!hs->auth && hs->secret)
    return gr_error_set(err, GR_ERR_UNAUTHENTICATED,
                        "%s does not authenticate (an insecure server), but this process has a "
                        "secret: refusing to talk to a server that cannot prove it knows it",
                        hs->address);
  GR_TRY(client_mode(hs, wants, err));
  uint8_t mac[GR_AUTH_MAC];
  if (hs->auth) {
    GR_TRY(gr_auth_random(hs->nonce, GR_AUTH_NONCE, err));
    gr_auth_mac(hs->secret, "client", hs->server_nonce, hs->nonce, hs->server_cluster, mine,
                hs->mode, mac);
  }
  gr_outmsg *m = gr_outmsg_new(GR_MSG_AUTH, hs->auth ? 4 : 2);
  if (!m) return gr_error_set_oom(err);
  gr_outmsg_str(m, "cluster", mine);
  gr_outmsg_u64(m, "mode", hs->mode);
  if (hs->auth) {
    gr_outmsg_bin(m, "nonce", hs->nonce, GR_AUTH_NONCE);
    gr_outmsg_bin(m, "mac", mac, GR_AUTH_MAC);
  }
  *auth = m;
  return GR_OK;
}

gr_status gr_hs_client_check(gr_hs_client *hs, const gr_msg *ok, gr_error *err) {
  if (!hs->auth) return GR_OK;
  const void *smac;
  uint8_t want[GR_AUTH_MAC];
  if (gr_msg_bin(&ok->root, "mac", GR_AUTH_MAC, &smac, err) != GR_OK) {
    gr_error_prefix(err, "%s: auth_ok", hs->address);
    return err ? err->code : GR_ERR_INVALID_ARGUMENT;
  }
  gr_auth_mac(hs->secret, "server", hs->nonce, hs->server_nonce, hs->server_cluster,
              id_or_empty(hs->cluster), hs->mode, want);
  if (!gr_auth_equal(want, smac))
    return gr_error_set(err, GR_ERR_UNAUTHENTICATED,
                        "%s does not know this process's secret (authentication failed)",
                        hs->address);
  if (hs->mode & GR_AUTH_MODE_MACS)
    return gr_auth_frame_keys(hs->secret, hs->server_nonce, hs->nonce, hs->server_cluster,
                              id_or_empty(hs->cluster), hs->keys, err);
  return GR_OK;
}

/* ---- the server ---------------------------------------------------------------- */

gr_status gr_hs_server_check(const char *secret, const char *cluster, uint8_t mode,
                             const uint8_t nonce[GR_AUTH_NONCE], const gr_msg *auth, gr_outmsg **ok,
                             gr_hs_result *res, gr_error *err) {
  *ok = NULL;
  const msgpack_object *root = &auth->root;
  char theirs[GR_CLUSTER_ID_MAX + 1];
  const char *mine = id_or_empty(cluster);
  const void *cnonce = NULL, *mac;
  uint8_t used = 0;
  GR_TRY(read_cluster(root, theirs, err));
  GR_TRY(read_mode(root, secret != NULL, &used, err));
  if (secret) {
    uint8_t want[GR_AUTH_MAC];
    GR_TRY(gr_msg_bin(root, "nonce", GR_AUTH_NONCE, &cnonce, err));
    GR_TRY(gr_msg_bin(root, "mac", GR_AUTH_MAC, &mac, err));
    /* the MAC first: only then are the id and the mode the client's word */
    gr_auth_mac(secret, "client", nonce, cnonce, mine, theirs, used, want);
    if (!gr_auth_equal(want, mac))
      return gr_error_set(err, GR_ERR_UNAUTHENTICATED,
                          "wrong secret (authentication failed: another secret, or the "
                          "handshake was altered on the way)");
  }
  if (strcmp(theirs, mine) != 0) {
    char a[GR_CLUSTER_ID_MAX + 8], b[GR_CLUSTER_ID_MAX + 8];
    return gr_error_set(err, GR_ERR_UNAUTHENTICATED,
                        "a client of cluster %s, this server's is %s: another job's client?",
                        id_text(theirs, a), id_text(mine, b));
  }
  if ((used & GR_AUTH_MODE_TLS) != (mode & GR_AUTH_MODE_TLS))
    return gr_error_set(err, GR_ERR_UNAUTHENTICATED,
                        "its auth says the connection %s TLS, but it %s",
                        used & GR_AUTH_MODE_TLS ? "uses" : "does not use",
                        mode & GR_AUTH_MODE_TLS ? "does" : "does not");
  if ((mode & GR_AUTH_MODE_MACS) && !(used & GR_AUTH_MODE_MACS))
    return gr_error_set(err, GR_ERR_UNAUTHENTICATED,
                        "it does not authenticate its frames, which this server requires of a "
                        "peer on another host");
  res->mode = used;
  if (used & GR_AUTH_MODE_MACS)
    GR_TRY(gr_auth_frame_keys(secret, nonce, cnonce, mine, theirs, res->keys, err));
  gr_outmsg *m = gr_outmsg_new(GR_MSG_AUTH_OK, secret ? 1 : 0);
  if (!m) return gr_error_set_oom(err);
  if (secret) {
    uint8_t mac_out[GR_AUTH_MAC];
    gr_auth_mac(secret, "server", cnonce, nonce, mine, theirs, used, mac_out);
    gr_outmsg_bin(m, "mac", mac_out, GR_AUTH_MAC);
  }
  *ok = m;
  return GR_OK;
}
