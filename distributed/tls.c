/* TLS contexts and connections (tls_internal.h): loading and checking the
 * certificate, key and CA; a connection's SSL (over tls_bio.c's socket BIO);
 * what a failed call means. */
#include <errno.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "distributed/tls_internal.h"

struct gr_tls {
  SSL_CTX *ctx;
  atomic_int refs;
  char ca[4096]; /* the CA file, for messages */
};

/* The reason of the thread's first OpenSSL error ("no such file", "key
 * values mismatch"), then clears the queue. */
static const char *ossl_reason(char *buf, size_t cap) {
  unsigned long e = ERR_get_error();
  const char *r = e ? ERR_reason_error_string(e) : NULL;
  snprintf(buf, cap, "%s", r ? r : e ? "unknown error" : "no detail");
  ERR_clear_error();
  return buf;
}

/* The certificate the last verification on this thread refused: "; its
 * certificate: subject /CN=.., issuer /CN=.." (verify_cb; "" when none). */
static _Thread_local char refused_cert[320];

static int verify_cb(int ok, X509_STORE_CTX *x) {
  X509 *leaf = X509_STORE_CTX_get0_cert(x);
  if (ok || !leaf) return ok;
  char subject[128], issuer[128];
  X509_NAME_oneline(X509_get_subject_name(leaf), subject, sizeof subject);
  X509_NAME_oneline(X509_get_issuer_name(leaf), issuer, sizeof issuer);
  snprintf(refused_cert, sizeof refused_cert, "; the peer's certificate: subject %s, issuer %s",
           subject, issuer);
  return ok;
}

/* The key file: readable, and not by everyone. */
static gr_status check_key_file(const char *key, gr_error *err) {
  struct stat sb;
  if (stat(key, &sb) != 0)
    return gr_error_set(err, GR_ERR_NOT_FOUND, "TLS key file %s: %s", key, strerror(errno));
  if (sb.st_mode & 007)
    return gr_error_set(err, GR_ERR_INVALID_ARGUMENT,
                        "TLS key file %s has mode %04o: other users can read or change it; run "
                        "chmod 600 %s",
                        key, (unsigned)(sb.st_mode & 07777), key);
  return GR_OK;
}

/* The certificate verifies against the CA for purpose (a task is both a
 * TLS server, to its clients, and a TLS client, to its peers). */
static gr_status verify_own(SSL_CTX *ctx, const char *cert, const char *ca, int purpose,
                            const char *as, gr_error *err) {
  X509 *x = SSL_CTX_get0_certificate(ctx);
  STACK_OF(X509) *chain = NULL;
  SSL_CTX_get0_chain_certs(ctx, &chain);
  X509_STORE_CTX *vc = X509_STORE_CTX_new();
  if (!vc || !X509_STORE_CTX_init(vc, SSL_CTX_get_cert_store(ctx), x, chain)) {
    X509_STORE_CTX_free(vc);
    return gr_error_set_oom(err);
  }
  X509_STORE_CTX_set_purpose(vc, purpose);
  int ok = X509_verify_cert(vc);
  int code = X509_STORE_CTX_get_error(vc);
  X509_STORE_CTX_free(vc);
  ERR_clear_error();
  if (ok == 1) return GR_OK;
  const char *hint =
      code == X509_V_ERR_INVALID_PURPOSE
          ? "every task is a TLS server to its clients and a TLS client to its peers: its "
            "certificate needs both serverAuth and clientAuth, or no extendedKeyUsage"
          : "the CA of --tls-ca must have signed it, and it must be valid now";
  return gr_error_set(err, GR_ERR_INVALID_ARGUMENT,
                      "TLS certificate %s does not verify against the CA %s as a TLS %s: %s (%s)",
                      cert, ca, as, X509_verify_cert_error_string(code), hint);
}

/* A file that can be opened for reading (OpenSSL's errors for one that
 * cannot say little). */
static gr_status check_readable(const char *what, const char *path, gr_error *err) {
  FILE *f = fopen(path, "r");
  if (!f)
    return gr_error_set(err, GR_ERR_NOT_FOUND, "TLS %s file %s: %s", what, path, strerror(errno));
  fclose(f);
  return GR_OK;
}

static gr_status load(SSL_CTX *ctx, const char *cert, const char *key, const char *ca,
                      gr_error *err) {
  char why[256];
  GR_TRY(check_readable("certificate", cert, err));
  GR_TRY(check_readable("CA", ca, err));
  if (SSL_CTX_use_certificate_chain_file(ctx, cert) != 1)
    return gr_error_set(err, GR_ERR_INVALID_ARGUMENT,
                        "TLS certificate file %s: %s (want PEM: the certificate, then any "
                        "intermediate ones)",
                        cert, ossl_reason(why, sizeof why));
  GR_TRY(check_key_file(key, err));
  if (SSL_CTX_use_PrivateKey_file(ctx, key, SSL_FILETYPE_PEM) != 1) {
    bool other = ERR_GET_REASON(ERR_peek_error()) == X509_R_KEY_VALUES_MISMATCH;
    ossl_reason(why, sizeof why);
    if (other)
      return gr_error_set(err, GR_ERR_INVALID_ARGUMENT,
                          "TLS key file %s is not the key of the certificate %s", key, cert);
    return gr_error_set(err, GR_ERR_INVALID_ARGUMENT, "TLS key file %s: %s (want a PEM key)", key,
                        why);
  }
  if (SSL_CTX_check_private_key(ctx) != 1)
    return gr_error_set(err, GR_ERR_INVALID_ARGUMENT,
                        "TLS key file %s is not the key of the certificate %s: %s", key, cert,
                        ossl_reason(why, sizeof why));
  if (SSL_CTX_load_verify_locations(ctx, ca, NULL) != 1)
    return gr_error_set(err, GR_ERR_INVALID_ARGUMENT, "TLS CA file %s: %s (want PEM certificates)",
                        ca, ossl_reason(why, sizeof why));
  GR_TRY(verify_own(ctx, cert, ca, X509_PURPOSE_SSL_SERVER, "server", err));
  return verify_own(ctx, cert, ca, X509_PURPOSE_SSL_CLIENT, "client", err);
}

gr_status gr_tls_new(const char *cert, const char *key, const char *ca, gr_tls **out,
                     gr_error *err) {
  *out = NULL;
  gr_tls *t = calloc(1, sizeof *t);
  if (!t || !(t->ctx = SSL_CTX_new(TLS_method()))) {
    free(t);
    ERR_clear_error();
    return gr_error_set(err, GR_ERR_RESOURCE_EXHAUSTED, "cannot make a TLS context");
  }
  atomic_init(&t->refs, 1);
  snprintf(t->ca, sizeof t->ca, "%s", ca);
  SSL_CTX *ctx = t->ctx;
  SSL_CTX_set_min_proto_version(ctx, TLS1_3_VERSION);
  /* both sides present a certificate the CA signed */
  SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT, verify_cb);
  /* partial writes: the transport's queue goes on where a write stopped;
   * no tickets or sessions: every connection is a full handshake; an end
   * of stream without close_notify is the peer closing (a task killed) */
  SSL_CTX_set_mode(ctx, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER |
                            SSL_MODE_RELEASE_BUFFERS);
  SSL_CTX_set_options(ctx, SSL_OP_NO_TICKET | SSL_OP_IGNORE_UNEXPECTED_EOF);
  /* reads take what the socket has, several records at once (the transport
   * asks SSL_has_pending for what it holds) */
  SSL_CTX_set_read_ahead(ctx, 1);
  SSL_CTX_set_default_read_buffer_len(ctx, 64 * 1024);
  SSL_CTX_set_num_tickets(ctx, 0);
  SSL_CTX_set_session_cache_mode(ctx, SSL_SESS_CACHE_OFF);
  SSL_CTX_set_max_cert_list(ctx, 64 * 1024); /* a peer's certificates, before it is trusted */
  gr_status st = load(ctx, cert, key, ca, err);
  if (st != GR_OK) {
    gr_tls_unref(t);
    return st;
  }
  *out = t;
  return GR_OK;
}

gr_status gr_tls_from_options(const char *cert, const char *key, const char *ca, const char *who,
                              gr_tls **out, gr_error *err) {
  *out = NULL;
  bool c = cert && *cert, k = key && *key, a = ca && *ca;
  if (!c && !k && !a) return GR_OK;
  if (!c || !k || !a)
    return gr_error_set(err, GR_ERR_INVALID_ARGUMENT,
                        "%s: TLS needs a certificate, its key and the CA (--tls-cert, --tls-key "
                        "and --tls-ca); missing: %s%s%s%s%s",
                        who, c ? "" : "the certificate", !c && (!k || !a) ? ", " : "",
                        k ? "" : "the key", !k && !a ? ", " : "", a ? "" : "the CA");
  gr_status st = gr_tls_new(cert, key, ca, out, err);
  if (st != GR_OK) gr_error_prefix(err, "%s", who);
  return st;
}

const char *gr_tls_ca_file(const gr_tls *t) {
  return t->ca;
}

void gr_tls_ref(gr_tls *t) {
  atomic_fetch_add(&t->refs, 1);
}

void gr_tls_unref(gr_tls *t) {
  if (!t || atomic_fetch_sub(&t->refs, 1) != 1) return;
  SSL_CTX_free(t->ctx);
  free(t);
}

SSL *gr_tls_ssl(gr_tls *t, int fd, bool server, gr_error *err) {
  SSL *ssl = SSL_new(t->ctx);
  BIO *bio = ssl ? gr_tls_socket_bio(fd) : NULL; /* not SSL_set_fd: no SIGPIPE */
  if (!bio) {
    SSL_free(ssl);
    ERR_clear_error();
    gr_error_set(err, GR_ERR_RESOURCE_EXHAUSTED, "out of memory for a TLS connection");
    return NULL;
  }
  SSL_set_bio(ssl, bio, bio); /* the SSL holds the BIO */
  if (server)
    SSL_set_accept_state(ssl);
  else
    SSL_set_connect_state(ssl);
  return ssl;
}

gr_tls_io gr_tls_result(SSL *ssl, int ret, char *why, size_t cap) {
  int saved = errno;
  int e = SSL_get_error(ssl, ret);
  if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE) {
    ERR_clear_error();
    return e == SSL_ERROR_WANT_READ ? GR_TLS_WANT_READ : GR_TLS_WANT_WRITE;
  }
  if (e == SSL_ERROR_ZERO_RETURN) {
    ERR_clear_error();
    return GR_TLS_CLOSED;
  }
  if (e == SSL_ERROR_SYSCALL && ERR_peek_error() == 0) {
    ERR_clear_error();
    if (saved == 0) return GR_TLS_CLOSED;
    snprintf(why, cap, "%s", strerror(saved));
    errno = saved;
    return GR_TLS_SYSCALL;
  }
  unsigned long code = ERR_get_error();
  const char *r = code ? ERR_reason_error_string(code) : NULL;
  int reason = code ? ERR_GET_REASON(code) : 0;
  long v = SSL_get_verify_result(ssl);
  const char *hint = "";
  if (reason == SSL_R_CERTIFICATE_VERIFY_FAILED)
    hint = ": the peer's certificate is not signed by the CA this end trusts, or has expired";
  else if (reason == SSL_R_TLSV1_ALERT_UNKNOWN_CA || reason == SSL_R_SSLV3_ALERT_BAD_CERTIFICATE ||
           reason == SSL_R_SSLV3_ALERT_CERTIFICATE_UNKNOWN ||
           reason == SSL_R_TLSV1_ALERT_DECRYPT_ERROR)
    hint = ": the peer does not trust this end's certificate (not signed by the peer's CA?)";
  else if (reason == SSL_R_PEER_DID_NOT_RETURN_A_CERTIFICATE ||
           reason == SSL_R_TLSV13_ALERT_CERTIFICATE_REQUIRED)
    hint = ": a TLS peer without a certificate (every end needs --tls-cert and --tls-key)";
  else if (reason == SSL_R_WRONG_VERSION_NUMBER || reason == SSL_R_HTTP_REQUEST ||
           reason == SSL_R_PACKET_LENGTH_TOO_LONG || reason == SSL_R_UNSUPPORTED_PROTOCOL)
    hint = ": the peer does not speak TLS 1.3 (a peer without TLS?)";
  else if (reason == SSL_R_DECRYPTION_FAILED_OR_BAD_RECORD_MAC)
    hint = ": a record altered on the way";
  if (reason == SSL_R_CERTIFICATE_VERIFY_FAILED && v != X509_V_OK)
    snprintf(why, cap, "%s (%s)%s%s", r ? r : "certificate verify failed",
             X509_verify_cert_error_string(v), hint, refused_cert);
  else
    snprintf(why, cap, "%s%s", r ? r : "a TLS error", hint);
  refused_cert[0] = '\0';
  ERR_clear_error();
  return GR_TLS_FAILED;
}
