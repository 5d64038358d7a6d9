/* The names every form of cluster shares: job names, host names and task
 * addresses ("host:port", "[IPv6]:port"), checked once here so that the
 * builder, the JSON forms and Slurm say the same thing about them. */
#include <arpa/inet.h>
#include <ctype.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "placer_internal.h"

static const char *problem(char *why, size_t why_cap, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static const char *problem(char *why, size_t why_cap, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(why, why_cap, fmt, ap);
  va_end(ap);
  return why;
}

const char *gr_cluster_job_problem(const char *job, char *why, size_t why_cap) {
  size_t n = strlen(job);
  bool ok = n >= 1 && n < GR_DEVICE_JOB_MAX && isalpha((unsigned char)job[0]);
  for (size_t i = 0; ok && i < n; i++)
    ok = isalnum((unsigned char)job[i]) || job[i] == '_' || job[i] == '-';
  if (ok) return NULL;
  snprintf(why, why_cap,
           "bad job name \"%.64s\" (letters, digits, '_' and '-', starting with a letter, at most "
           "%d characters)",
           job, GR_DEVICE_JOB_MAX - 1);
  return why;
}

static bool name_char(int c) {
  return isalnum(c) || c == '.' || c == '-' || c == '_';
}

static bool is_ipv6(const char *s, size_t n) {
  char buf[GR_CLUSTER_HOST_MAX];
  if (n >= sizeof buf) return false;
  memcpy(buf, s, n);
  buf[n] = '\0';
  char *zone = strchr(buf, '%');
  if (zone) {
    if (!zone[1]) return false;
    for (const char *z = zone + 1; *z; z++)
      if (!name_char((unsigned char)*z)) return false;
    *zone = '\0';
  }
  unsigned char addr[16];
  return inet_pton(AF_INET6, buf, addr) == 1;
}

/* A host of n characters at s; brackets are the caller's business. */
static const char *host_problem(const char *s, size_t n, char *why, size_t why_cap) {
  char quoted[80];
  snprintf(quoted, sizeof quoted, "%.*s%s", (int)(n < 64 ? n : 64), s, n > 64 ? "..." : "");
  if (n == 0) return problem(why, why_cap, "empty host name");
  if (n >= GR_CLUSTER_HOST_MAX)
    return problem(why, why_cap, "host name \"%s\" is longer than 253 characters", quoted);
  if (memchr(s, ':', n)) {
    if (is_ipv6(s, n)) return NULL;
    return problem(why, why_cap, "\"%s\" is not an IPv6 address", quoted);
  }
  for (size_t i = 0; i < n; i++)
    if (!name_char((unsigned char)s[i]))
      return problem(why, why_cap,
                     "bad host name \"%s\" (letters, digits, '.', '-' and '_', or an IPv6 "
                     "address)",
                     quoted);
  return NULL;
}

const char *gr_cluster_host_problem(const char *host, char *why, size_t why_cap) {
  if (host[0] == '[')
    return problem(why, why_cap, "host \"%.64s\": write an IPv6 host without brackets", host);
  return host_problem(host, strlen(host), why, why_cap);
}

const char *gr_cluster_address_problem(const char *address, char *host, size_t host_cap, int *port,
                                       char *why, size_t why_cap) {
  char quoted[80];
  size_t n = strlen(address);
  snprintf(quoted, sizeof quoted, "%.64s%s", address, n > 64 ? "..." : "");
  if (n == 0) return problem(why, why_cap, "empty address (host:port)");
  if (n >= GR_CLUSTER_ADDRESS_MAX)
    return problem(why, why_cap, "address \"%s\" is too long", quoted);
  if (strstr(address, "://"))
    return problem(why, why_cap, "address \"%s\": no scheme, write host:port", quoted);
  const char *h = address, *colon;
  size_t hn;
  if (address[0] == '[') {
    const char *close = strchr(address, ']');
    if (!close) return problem(why, why_cap, "address \"%s\": '[' without ']'", quoted);
    h = address + 1;
    hn = (size_t)(close - h);
    if (close[1] != ':')
      return problem(why, why_cap, "address \"%s\": missing \":port\" after ']'", quoted);
    colon = close + 1;
    if (!memchr(h, ':', hn) || !is_ipv6(h, hn))
      return problem(why, why_cap, "address \"%s\": not an IPv6 address in the brackets", quoted);
  } else {
    colon = strrchr(address, ':');
    if (!colon) return problem(why, why_cap, "address \"%s\": missing port (host:port)", quoted);
    hn = (size_t)(colon - address);
    if (memchr(address, ':', hn))
      return problem(why, why_cap, "address \"%s\": an IPv6 host needs brackets: [v6]:port",
                     quoted);
    const char *hp = host_problem(h, hn, why, why_cap);
    if (hp) {
      char inner[200];
      snprintf(inner, sizeof inner, "%s", hp);
      return problem(why, why_cap, "address \"%s\": %s", quoted, inner);
    }
  }
  const char *p = colon + 1;
  if (!*p) return problem(why, why_cap, "address \"%s\": missing port (host:port)", quoted);
  long v = 0;
  for (const char *q = p; *q; q++) {
    if (!isdigit((unsigned char)*q))
      return problem(why, why_cap, "address \"%s\": the port is not a number", quoted);
    if (v <= 65535) v = v * 10 + (*q - '0');
  }
  if (v < 1 || v > 65535)
    return problem(why, why_cap, "address \"%s\": port %.8s is out of range 1..65535", quoted, p);
  if (hn >= host_cap) return problem(why, why_cap, "address \"%s\": host too long", quoted);
  memcpy(host, h, hn);
  host[hn] = '\0';
  *port = (int)v;
  return NULL;
}
