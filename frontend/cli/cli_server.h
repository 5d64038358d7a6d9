/* graphrun server's task (cli_server_setup.c): which task it is, where it
 * listens and is reached, which cluster it belongs to, and the
 * rendezvous it tells where it listens; cmd_server.c parses the flags and
 * serves. Internal to frontend/cli/. */
#ifndef GR_CLI_SERVER_H
#define GR_CLI_SERVER_H

#include <graphrun.h>
#include <stdbool.h>

#include "cli_resolve.h"

typedef struct server_setup {
  /* the flags */
  const char *job, *bind, *spec, *secret_file, *cluster_id, *advertise, *iface;
  long task;
  bool insecure;
  /* what they resolve to */
  char bind_buf[300];             /* where it listens, "host:port" */
  char reach[300];                /* the host others reach it at ("": the bind's) */
  int reach_port;                 /* and the port (0: the one it listens on) */
  char id[GR_CLUSTER_ID_MAX + 1]; /* its cluster id */
  char *secret;                   /* (free) NULL: insecure */
  bool publish;                   /* it tells the rendezvous where it listens */
  char rdv[4096];                 /* the rendezvous directory */
  cli_rdv_entry entry;            /* its entry there (address and pid once listening) */
} server_setup;

/* Resolves the task from the flags, the spec or the launcher: an exit code
 * (messages printed), GR_EXIT_OK when it goes on. */
int cli_server_setup(server_setup *o);
/* Its entry, once listening on port (the address it is reached at). */
void cli_server_entry(server_setup *o, int port, int devices);
/* The next start (a restart in place) listens on port again. */
void cli_server_set_port(server_setup *o, int port);

#endif
