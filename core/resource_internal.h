/* Session-owned resource manager (variables). Internal to core. */
#ifndef GR_RESOURCE_INTERNAL_H
#define GR_RESOURCE_INTERNAL_H

#include "core/gr_op.h"

gr_resource_mgr *gr_resource_mgr_new(void);
void gr_resource_mgr_free(gr_resource_mgr *m);
/* NULL when no variable of that name exists yet. */
gr_var *gr_resource_mgr_find_var(gr_resource_mgr *m, const char *name);

#endif
