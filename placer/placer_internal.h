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

#endif
