/* Cluster ids: which cluster a task or a client belongs to, named in the
 * handshake (handshake.c) so that a client never talks to another job's
 * server that happens to listen on the port it dials. The characters are
 * those of container names; the id derived from a spec is a hash of its
 * tasks. */
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "distributed/server_internal.h"

_Static_assert(GR_CLUSTER_ID_MAX == GR_CONTAINER_NAME_MAX, "cluster ids are printed as names");

gr_status gr_cluster_id_check(const char *id, gr_error *err) {
  size_t n = id ? strlen(id) : 0;
  if (gr_container_name_ok(id, n, false)) return GR_OK;
  if (n == 0) return gr_error_set(err, GR_ERR_INVALID_ARGUMENT, "the cluster id is empty");
  char shown[GR_CLUSTER_ID_MAX + 4];
  return gr_error_set(err, GR_ERR_INVALID_ARGUMENT,
                      "cluster id '%s': want 1 to %d letters, digits, '_', '-' or '.'",
                      gr_printable_name(id, n, shown), GR_CLUSTER_ID_MAX);
}

static int by_text(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

gr_status gr_cluster_spec_id(const gr_cluster *c, char out[GR_CLUSTER_ID_MAX + 1], gr_error *err) {
  int n = gr_cluster_num_tasks(c);
  char **lines = calloc((size_t)n + 1, sizeof *lines);
  EVP_MD_CTX *md = EVP_MD_CTX_new();
  gr_status st =
      lines && md && EVP_DigestInit_ex(md, EVP_sha256(), NULL) == 1 ? GR_OK : gr_error_set_oom(err);
  for (int k = 0; k < n && st == GR_OK; k++) { /* "job\tindex\taddress\n", lower case */
    const gr_cluster_task *t = gr_cluster_task_at(c, k);
    const char *a = t->address ? t->address : "";
    size_t cap = strlen(t->job) + strlen(a) + 32;
    if (!(lines[k] = malloc(cap))) {
      st = gr_error_set_oom(err);
      break;
    }
    int m = snprintf(lines[k], cap, "%s\t%d\t", t->job, t->index);
    for (const char *p = a; *p; p++)
      lines[k][m++] = *p >= 'A' && *p <= 'Z' ? (char)(*p - 'A' + 'a') : *p;
    lines[k][m++] = '\n';
    lines[k][m] = '\0';
  }
  if (st == GR_OK) qsort(lines, (size_t)n, sizeof *lines, by_text);
  for (int k = 0; k < n && st == GR_OK; k++)
    if (EVP_DigestUpdate(md, lines[k], strlen(lines[k])) != 1) st = gr_error_set_oom(err);
  unsigned char h[EVP_MAX_MD_SIZE];
  unsigned int hl = 0;
  if (st == GR_OK && EVP_DigestFinal_ex(md, h, &hl) != 1) st = gr_error_set_oom(err);
  if (st == GR_OK) {
    int m = snprintf(out, GR_CLUSTER_ID_MAX + 1, "spec-");
    for (int i = 0; i < 16; i++)
      m += snprintf(out + m, (size_t)(GR_CLUSTER_ID_MAX + 1 - m), "%02x", h[i]);
  }
  for (int k = 0; lines && k < n; k++) free(lines[k]);
  free(lines);
  EVP_MD_CTX_free(md);
  return st;
}
