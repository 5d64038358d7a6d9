/* A fault-injecting TCP proxy for tests: listens on a free loopback port,
 * forwards every connection to a loopback target, and on command (or on a
 * schedule, or at random from a seed) delays, drops, blackholes, resets or
 * truncates them. It runs in a thread of the test process; the test puts it
 * between tasks by giving the proxy's address for a task in the cluster
 * spec that the client uses (the client tells every task its peers'
 * addresses, so every connection to that task passes through the proxy).
 *
 *   gt_proxy *px = gt_proxy_start("127.0.0.1:40123");   // NULL: see stderr
 *   printf("127.0.0.1:%d\n", gt_proxy_port(px));       // the address to give out
 *   gt_proxy_fault(px, (gt_fault){.kind = GT_FAULT_BLACKHOLE});
 *   ...
 *   gt_proxy_heal(px);                                  // forwards again
 *   gt_proxy_stop(px);                                  // closes everything, frees
 *
 * Faults (each applies at once, from the proxy's thread):
 *   DELAY      every byte read from now on is held delay_ms before it is
 *              forwarded (both directions); lasts until changed
 *   DROP       every open connection is closed (FIN to both ends, what
 *              they still send is discarded); new connections pass
 *   BLACKHOLE  nothing is read or forwarded, connections stay open (the
 *              ends see a silent peer, their unsent bytes pile up in the
 *              kernel); new connections are accepted and held; lasts until
 *              healed, then everything held is forwarded
 *   RESET      every open connection is closed with RST (SO_LINGER 0)
 *   TRUNCATE   on every open connection, the next graphrun wire frame (16-byte
 *              header "GRWF", then header_len + body_len bytes) read in
 *              direction `dir` is forwarded up to its middle (or `bytes` of
 *              it), then both ends get FIN: the receiver sees the end of the
 *              stream in the middle of a frame. New connections pass.
 *   TAMPER     on every open connection, the byte `bytes` bytes after what has
 *              been read so far in direction `dir` (0: the next one) is
 *              forwarded with its lowest bit flipped: a frame (or a TLS
 *              record) altered on the way. Once per connection and fault;
 *              `conn` > 0: only on the conn-th connection accepted.
 * gt_proxy_start accepts only loopback targets (127.0.0.0/8);
 * gt_proxy_start_on any IPv4 one (a test's network namespaces). */
#ifndef GT_FAULT_PROXY_H
#define GT_FAULT_PROXY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef enum gt_fault_kind {
  GT_FAULT_NONE, /* forward everything: healed */
  GT_FAULT_DELAY,
  GT_FAULT_DROP,
  GT_FAULT_BLACKHOLE,
  GT_FAULT_RESET,
  GT_FAULT_TRUNCATE,
  GT_FAULT_TAMPER,
  GT_FAULT_KINDS
} gt_fault_kind;

typedef enum gt_dir {
  GT_DIR_TO_CLIENT, /* what the target sends (responses, a server's hello) */
  GT_DIR_TO_TARGET, /* what the connecting side sends (requests, pushed tensors) */
} gt_dir;

typedef struct gt_fault {
  gt_fault_kind kind;
  int delay_ms; /* DELAY */
  gt_dir dir;   /* TRUNCATE: whose frame is cut */
  long bytes;   /* TRUNCATE: bytes of the frame forwarded (0: half, at least the header + 1);
                   TAMPER: how far ahead the altered byte is */
  long conn;    /* TAMPER: only the conn-th connection accepted (from 1; 0: every one) */
} gt_fault;

/* One step of a schedule: `fault` applies at_ms after gt_proxy_schedule. */
typedef struct gt_proxy_event {
  int at_ms;
  gt_fault fault;
} gt_proxy_event;

/* Random faults from a seed: after a pause of gap_min..gap_max ms, one of
 * `kinds` (a bit mask of 1 << GT_FAULT_*); a DELAY or BLACKHOLE is healed
 * after hold_min..hold_max ms, then the next pause starts. */
typedef struct gt_proxy_random {
  uint64_t seed;
  unsigned kinds;
  int gap_min_ms, gap_max_ms, hold_min_ms, hold_max_ms;
  int delay_ms; /* of a DELAY */
} gt_proxy_random;

typedef struct gt_proxy_stats {
  long accepted;                   /* connections */
  long resets, drops, truncations; /* connections cut by each fault */
  long tampered;                   /* bytes altered (TAMPER) */
  uint64_t to_target, to_client;   /* bytes forwarded */
  long faults;                     /* faults applied (heals not counted) */
} gt_proxy_stats;

typedef struct gt_proxy gt_proxy;

/* A proxy on 127.0.0.1:0 to target ("127.x.y.z:port"); NULL (with a line on
 * stderr) when the target is not loopback or a socket or thread fails.
 * Free it with gt_proxy_stop. */
gt_proxy *gt_proxy_start(const char *target);
/* A proxy on listen_host:0 (an IPv4 address of this network namespace) to
 * any IPv4 target; NULL (with a line on stderr) on failure. */
gt_proxy *gt_proxy_start_on(const char *listen_host, const char *target);
int gt_proxy_port(const gt_proxy *p);
/* Applies f now (a schedule or random mode in progress is cancelled). */
void gt_proxy_fault(gt_proxy *p, gt_fault f);
/* gt_proxy_fault(p, NONE). */
void gt_proxy_heal(gt_proxy *p);
/* Replaces any schedule: the n events (copied), times from now. */
void gt_proxy_schedule(gt_proxy *p, const gt_proxy_event *events, int n);
/* Random faults as r says until the next gt_proxy_fault or _schedule. */
void gt_proxy_random_faults(gt_proxy *p, const gt_proxy_random *r);
gt_proxy_stats gt_proxy_get_stats(gt_proxy *p);
/* What it did, one line per fault ("+1234 ms reset (3 connections)"), into
 * buf (NUL-terminated, cut to cap). */
void gt_proxy_log(gt_proxy *p, char *buf, size_t cap);
const char *gt_fault_name(gt_fault_kind k);
/* Stops the thread, closes every connection and the listener, frees p. */
void gt_proxy_stop(gt_proxy *p);

#endif
