/* The master connecting to its tasks: every task dialled at once, by a few
 * threads (each dial is a TCP connect and a handshake of round trips, most
 * of it waiting), instead of one after another. Runs in gr_master_new,
 * before the tasks' connections carry any request. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>

#include "distributed/master_internal.h"

#define DIAL_THREADS 16

typedef struct dialer {
  gr_master *ms;
  const char *const *names; /* the tasks' names for errors (may be NULL) */
  const gr_conn_handler *h;
  atomic_int next;    /* the next task to dial */
  atomic_bool stop;   /* a dial failed: the rest are not started */
  pthread_mutex_t mu; /* guards failed, st, err */
  int failed;         /* the lowest task that failed (num_tasks: none) */
  gr_status st;
  gr_error err;
} dialer;

static void dial_one(dialer *d, int k) {
  gr_master *ms = d->ms;
  task *t = &ms->tasks[k];
  gr_conn_auth auth = {ms->secret, ms->cluster, ms->tls};
  gr_error e;
  gr_status st =
      gr_conn_dial(ms->loop, t->address, &auth, ms->o.connect_timeout_ms, d->h, &t->conn, &e);
  if (st == GR_OK) {
    /* a handler may run before set_user: dial's handshake is done, but no
     * request is out yet, so nothing arrives before GET_STATUS */
    gr_conn_set_user(t->conn, t);
    return;
  }
  if (d->names && d->names[k]) gr_error_prefix(&e, "%s", d->names[k]);
  atomic_store(&d->stop, true);
  pthread_mutex_lock(&d->mu);
  if (k < d->failed) d->failed = k, d->st = st, d->err = e;
  pthread_mutex_unlock(&d->mu);
}

static void *dial_thread(void *arg) {
  dialer *d = arg;
  for (int k; !atomic_load(&d->stop) && (k = atomic_fetch_add(&d->next, 1)) < d->ms->num_tasks;)
    dial_one(d, k);
  return NULL;
}

gr_status gr_master_dial_all(gr_master *ms, const char *const *task_names, const gr_conn_handler *h,
                             gr_error *err) {
  dialer d = {.ms = ms, .names = task_names, .h = h, .failed = ms->num_tasks, .st = GR_OK};
  atomic_init(&d.next, 0);
  atomic_init(&d.stop, false);
  pthread_mutex_init(&d.mu, NULL);
  pthread_t th[DIAL_THREADS];
  int n = 0;
  for (; n < DIAL_THREADS && n < ms->num_tasks - 1; n++)
    if (pthread_create(&th[n], NULL, dial_thread, &d) != 0) break;
  dial_thread(&d); /* this thread dials too (alone when no thread could start) */
  for (int i = 0; i < n; i++) pthread_join(th[i], NULL);
  pthread_mutex_destroy(&d.mu);
  if (d.st != GR_OK && err) *err = d.err;
  return d.st;
}
