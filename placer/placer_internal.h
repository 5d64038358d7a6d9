/* Shared inside placer/: the cluster's internals. */
#ifndef GR_PLACER_INTERNAL_H
#define GR_PLACER_INTERNAL_H

#include "placer/gr_placer.h"

typedef struct gr_cluster_task {
  char job[GR_DEVICE_JOB_MAX];
  int index; /* task number within its job */
  int host;  /* index into hosts */
  int num_devices;
} gr_cluster_task;

struct gr_cluster {
  gr_cluster_device *devices;
  int num_devices, cap_devices;
  gr_cluster_task *tasks;
  int num_tasks, cap_tasks;
  char **hosts;
  int num_hosts, cap_hosts;
  gr_link links[GR_LINK_COUNT];
};

/* Whether allowed-set `set` (-1: any) of pg contains device d. */
static inline bool gr_place_allowed(const gr_place_graph *pg, int set, int d) {
  return set < 0 ||
         (pg->allow_bits[(size_t)set * (size_t)pg->allow_words + (size_t)(d / 64)] >> (d % 64)) & 1;
}

/* The locality placement (locality.c): each node on the allowed device that
 * holds most of its inputs (ties: the first input's), each device taking at most its flop-rate
 * share of every level's nodes; nodes without such a device fill the devices
 * in order. skip[v] marks free sources: their device is -1, which the
 * simulator reads as "with the first consumer". Writes device[0 .. n-1];
 * false when out of memory. */
bool gr_place_locality(const gr_place_graph *pg, const gr_cluster *c, const uint8_t *skip,
                       int *device);

#endif
