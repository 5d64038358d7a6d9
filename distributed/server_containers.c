/* Containers on a server task, as TensorFlow 1's: the variables, queues and
 * accumulators that the graphs registered with a container use. A master
 * names its container in every REGISTER and VARS (fields `container` and
 * `private`). A private container (a master's own, the default) belongs to
 * the connection that made it: no other connection may use it, and it is
 * dropped when that connection closes, so a server that outlives many
 * clients keeps none of theirs. A shared one (a name clients give to share
 * variables) lives until a RESET drops it or the server stops.
 *
 * A registered graph holds a reference to its container, so a step that
 * runs while its container is dropped finishes on it; after a reset, the
 * graphs registered with the dropped container refuse their RUNs
 * (server_step.c), so no client trains on variables nobody else sees.
 * Locking: the map and each container's `dropped` under s->mu; refs are
 * atomic. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "distributed/server_internal.h"

bool gr_container_name_ok(const char *p, size_t n, bool user) {
  if (!p || n == 0 || n > GR_CONTAINER_NAME_MAX) return false;
  for (size_t i = 0; i < n; i++) {
    char ch = p[i];
    bool alnum = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9');
    bool sign = ch == '_' || ch == '-' || ch == '.';
    if (!alnum && (!sign || (user && i == 0))) return false;
  }
  return true;
}

const char *gr_printable_name(const char *p, size_t n, char out[GR_CONTAINER_NAME_MAX + 4]) {
  size_t k = n > GR_CONTAINER_NAME_MAX ? GR_CONTAINER_NAME_MAX : n;
  for (size_t i = 0; i < k; i++) out[i] = p[i] >= ' ' && p[i] <= '~' ? p[i] : '?';
  snprintf(out + k, 4, "%s", k < n ? "..." : "");
  return out;
}

gr_status gr_container_check_name(const char *name, gr_error *err) {
  size_t n = name ? strlen(name) : 0;
  if (gr_container_name_ok(name, n, true)) return GR_OK;
  char shown[GR_CONTAINER_NAME_MAX + 4];
  if (n == 0) return gr_error_set(err, GR_ERR_INVALID_ARGUMENT, "the container name is empty");
  return gr_error_set(err, GR_ERR_INVALID_ARGUMENT,
                      "container name '%s': want 1 to %d letters, digits, '_', '-' or '.', "
                      "starting with a letter or a digit",
                      gr_printable_name(name, n, shown), GR_CONTAINER_NAME_MAX);
}

/* The fields `container` and `private` of a request. */
static gr_status read_name(const msgpack_object *root, char name[GR_CONTAINER_NAME_MAX + 1],
                           bool *is_private, gr_error *err) {
  const char *p;
  size_t n;
  GR_TRY(gr_msg_strv(root, "container", &p, &n, err));
  if (!gr_container_name_ok(p, n, false)) {
    char shown[GR_CONTAINER_NAME_MAX + 4];
    return gr_error_set(err, GR_ERR_INVALID_ARGUMENT,
                        "field 'container': '%s' is not a container name (1 to %d letters, "
                        "digits, '_', '-' or '.')",
                        gr_printable_name(p, n, shown), GR_CONTAINER_NAME_MAX);
  }
  GR_TRY(gr_msg_bool(root, "private", is_private, err));
  memcpy(name, p, n);
  name[n] = '\0';
  return GR_OK;
}

void gr_server_container_unref(container *k) {
  if (!k || __atomic_sub_fetch(&k->refs, 1, __ATOMIC_ACQ_REL) > 0) return;
  gr_resource_mgr_free(k->rm);
  free(k);
}

gr_status gr_server_container_get(gr_server *s, gr_conn *c, const msgpack_object *root, bool create,
                                  container **out, gr_error *err) {
  char name[GR_CONTAINER_NAME_MAX + 1];
  bool priv;
  *out = NULL;
  if (read_name(root, name, &priv, err) != GR_OK) {
    gr_server_log(s, "refused a request from %s: %s", gr_conn_peer(c), err ? err->msg : "");
    return err ? err->code : GR_ERR_INVALID_ARGUMENT;
  }
  container *fresh = create ? calloc(1, sizeof *fresh) : NULL;
  if (fresh && !(fresh->rm = gr_resource_mgr_new())) {
    free(fresh);
    fresh = NULL;
  }
  if (create && !fresh) return gr_error_set_oom(err);
  gr_status st = GR_OK;
  pthread_mutex_lock(&s->mu);
  container *k = gr_map_get_str(&s->containers, name);
  if (k && k->is_private != priv)
    st = gr_error_set(err, GR_ERR_FAILED_PRECONDITION,
                      k->is_private ? "container '%s' is another client's private container"
                                    : "container '%s' is shared, not private",
                      name);
  else if (k && priv && k->owner != c)
    st = gr_error_set(err, GR_ERR_FAILED_PRECONDITION,
                      "container '%s' is private to another client", name);
  else if (!k && fresh && priv && !gr_conn_is_open(c))
    /* its owner's close has run (or runs now, after us): it would never be dropped */
    st = gr_error_set(err, GR_ERR_CANCELLED, "the client's connection closed");
  else if (!k && fresh) {
    snprintf(fresh->name, sizeof fresh->name, "%s", name);
    fresh->is_private = priv;
    fresh->owner = priv ? c : NULL;
    fresh->refs = 1;
    if (gr_map_put_str(&s->containers, fresh->name, fresh))
      k = fresh, fresh = NULL;
    else
      st = gr_error_set_oom(err);
  }
  if (st == GR_OK && k) {
    __atomic_add_fetch(&k->refs, 1, __ATOMIC_ACQ_REL);
    *out = k;
  }
  pthread_mutex_unlock(&s->mu);
  if (fresh) {
    gr_resource_mgr_free(fresh->rm);
    free(fresh);
  }
  if (st == GR_ERR_FAILED_PRECONDITION) /* another client's private container */
    gr_server_log(s, "refused a request from %s: %s", gr_conn_peer(c), err ? err->msg : "");
  return st;
}

/* Takes out of the map, 64 at a time, the containers k for which match(k,
 * arg) holds (called under s->mu), and unreferences them outside the lock.
 * Returns how many went. */
static int drop_where(gr_server *s, bool (*match)(const container *, const void *),
                      const void *arg) {
  int total = 0;
  for (;;) {
    container *gone[64];
    int n = 0;
    void *v;
    pthread_mutex_lock(&s->mu);
    for (size_t pos = 0; n < 64 && gr_map_next(&s->containers, &pos, NULL, &v);)
      if (match(v, arg)) gone[n++] = v;
    for (int i = 0; i < n; i++) {
      gr_map_remove_str(&s->containers, gone[i]->name);
      gone[i]->dropped = true;
    }
    pthread_mutex_unlock(&s->mu);
    for (int i = 0; i < n; i++) gr_server_container_unref(gone[i]); /* graphs may hold it */
    total += n;
    if (n < 64) return total;
  }
}

static bool owned_by(const container *k, const void *c) {
  return k->is_private && k->owner == c;
}

static bool shared_named(const container *k, const void *name) {
  return !k->is_private && (!*(const char *)name || !strcmp(k->name, name));
}

void gr_server_containers_drop_of(gr_server *s, const gr_conn *c) {
  drop_where(s, owned_by, c);
}

void gr_server_reset(gr_server *s, gr_conn *c, gr_inmsg *m) {
  gr_error e;
  uint64_t id = 0;
  const char *p = "";
  size_t n = 0;
  char name[GR_CONTAINER_NAME_MAX + 1] = "";
  gr_status st = gr_msg_u64(&m->msg.root, "id", &id, &e);
  if (st == GR_OK) st = gr_msg_strv(&m->msg.root, "container", &p, &n, &e);
  if (st == GR_OK && n > 0 && !gr_container_name_ok(p, n, false)) {
    char shown[GR_CONTAINER_NAME_MAX + 4];
    st = gr_error_set(&e, GR_ERR_INVALID_ARGUMENT,
                      "field 'container': '%s' is not a container name (1 to %d letters, digits, "
                      "'_', '-' or '.'; \"\": every shared container)",
                      gr_printable_name(p, n, shown), GR_CONTAINER_NAME_MAX);
  }
  if (st == GR_OK) {
    memcpy(name, p, n); /* p points into m */
    name[n] = '\0';
  }
  gr_inmsg_free(m);
  if (st != GR_OK) {
    gr_server_log(s, "refused a reset from %s: %s", gr_conn_peer(c), e.msg);
    gr_error_prefix(&e, "%s: reset", s->task);
    gr_server_respond_error(c, id, &e);
    return;
  }
  int dropped = drop_where(s, shared_named, name);
  if (!s->o.quiet)
    gr_server_log(s, "%s reset %s%s%s: %d dropped", gr_conn_peer(c),
                  n ? "container '" : "every shared container", name, n ? "'" : "", dropped);
  gr_outmsg *r = gr_server_response(id, 1, NULL);
  if (r) gr_outmsg_u64(r, "dropped", (uint64_t)dropped);
  gr_server_answer(c, id, r, NULL);
}

void gr_server_containers_free(gr_server *s) {
  void *v;
  for (size_t pos = 0; gr_map_next(&s->containers, &pos, NULL, &v);) gr_server_container_unref(v);
  gr_map_free(&s->containers);
}

gr_resource_mgr *gr_server_container(gr_server *s, const char *name) {
  pthread_mutex_lock(&s->mu);
  container *k = name ? gr_map_get_str(&s->containers, name) : NULL;
  gr_resource_mgr *rm = k ? gr_resource_mgr_ref(k->rm) : NULL;
  pthread_mutex_unlock(&s->mu);
  return rm;
}

int gr_server_num_containers(gr_server *s) {
  pthread_mutex_lock(&s->mu);
  int n = (int)gr_map_count(&s->containers);
  pthread_mutex_unlock(&s->mu);
  return n;
}
