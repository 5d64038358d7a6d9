/* TLS for connections across hosts (docs/security.md, "TLS"): OpenSSL's
 * libssl directly on the transport's sockets, TLS 1.3 only, both sides
 * presenting a certificate signed by the cluster's CA.
 *
 *   gr_tls *t;
 *   gr_tls_new("node.crt", "node.key", "ca.crt", &t, &err);  // errors name the file
 *   SSL *ssl = gr_tls_ssl(t, fd, true, &err);                  // an accepted socket's
 *   ... SSL_accept / SSL_read_ex / SSL_write_ex (transport.c, transport_dial.c) ...
 *   SSL_free(ssl);
 *   gr_tls_unref(t);
 *
 * A gr_tls is immutable once made and may be shared by threads (its
 * SSL_CTX is); it lives while references do (a server's listener and its
 * dials, a master's dials). An SSL belongs to one connection: the
 * transport serializes its calls under the connection's lock.
 *
 * Why not libevent's bufferevent_openssl: the transport reads frame
 * bodies straight into their final buffers and writes from the senders'
 * memory (transport.c); SSL_read_ex and SSL_write_ex on the same socket
 * keep that (the only copies are the cipher's own), where bufferevents
 * would add a copy through evbuffers on each side and a hop through the
 * loop thread for every send.
 *
 * Internal to distributed/. */
#ifndef GR_TLS_INTERNAL_H
#define GR_TLS_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>

#include "core/gr_core.h"

typedef struct gr_tls gr_tls;
struct ssl_st;

/* Loads the certificate chain (PEM), its private key and the CA that both
 * sides' certificates must be signed by. Refused, naming the file: a file
 * that cannot be read or parsed, a key that is not the certificate's, a
 * key file that other users may read (mode & 007), a certificate that the
 * CA does not verify (or that has expired). all three or none: the caller
 * checks. */
gr_status gr_tls_new(const char *cert, const char *key, const char *ca, gr_tls **out,
                     gr_error *err);
/* gr_tls_new from options (who: "server", "master" for messages): *out
 * NULL when none of the three is given (NULL or ""); an error naming the
 * missing ones when only some are. */
gr_status gr_tls_from_options(const char *cert, const char *key, const char *ca, const char *who,
                              gr_tls **out, gr_error *err);
void gr_tls_ref(gr_tls *t);
/* The CA file it was made with (for messages). */
const char *gr_tls_ca_file(const gr_tls *t);
void gr_tls_unref(gr_tls *t); /* NULL: nothing */

/* A connection's TLS over the connected socket fd (not taken), as the
 * server (accepting) or the client; NULL (err set) when out of memory. */
struct ssl_st *gr_tls_ssl(gr_tls *t, int fd, bool server, gr_error *err);

/* What a failed SSL call (its return ret) means. */
typedef enum gr_tls_io {
  GR_TLS_WANT_READ,  /* wait until the socket is readable */
  GR_TLS_WANT_WRITE, /* ... writable */
  GR_TLS_CLOSED,     /* the peer closed the connection (cleanly or not) */
  GR_TLS_SYSCALL,    /* the socket failed: errno says how (ECONNRESET ...) */
  GR_TLS_FAILED,     /* a TLS error: why holds it and a hint ("decryption failed or bad
                        record mac: a record altered on the way", "certificate verify
                        failed (unable to get local issuer certificate): the peer's
                        certificate is not signed by the CA this end trusts ...") */
} gr_tls_io;
/* Clears the thread's OpenSSL error queue. */
gr_tls_io gr_tls_result(struct ssl_st *ssl, int ret, char *why, size_t cap);

/* A socket BIO over fd (not taken: freeing the BIO leaves it open) that
 * writes with send(2) and MSG_NOSIGNAL, so that writing to a peer that
 * has closed fails with EPIPE instead of raising SIGPIPE (OpenSSL's own
 * socket BIO uses write(2), and SIGPIPE would end a process that does not
 * ignore it); non-blocking as OpenSSL's (tls_bio.c). NULL when out of
 * memory. gr_tls_ssl puts one under every SSL. */
struct bio_st *gr_tls_socket_bio(int fd);

#endif
