/* Stage boundaries by time for dtrain plan and dtrain train. See plan_auto.h. */
#include "cli/plan_auto.h"

#include <string.h>

#include "cli/plan_device.h"
#include "cli/plan_probe.h"
#include "core/log.h"

bool dt_cli_plan_is_auto(const dt_config *c) {
    return c->plugin.pp_size > 1 && !strcmp(c->plugin.pp_layers, "auto");
}

dt_status dt_cli_plan_resolve_auto(dt_config *c, int world, const dt_plan_device *dev) {
    if (!dt_cli_plan_is_auto(c))
        return DT_OK;
    char layers[sizeof c->plugin.pp_layers];
    DT_TRY(dt_plan_stage_split(c, world, dev, layers, sizeof layers));
    memcpy(c->plugin.pp_layers, layers, sizeof layers);
    return DT_OK;
}

dt_status dt_cli_plan_auto_layers(dt_config *c, int world) {
    dt_plan_device dev;
    int64_t mem;
    dt_plan_probe *probe = NULL;
    dt_status st = dt_plan_device_get("this", world, &dev, &mem);
    if (st == DT_OK)
        st = dt_plan_probe_this(c, 1, 0, &dev, &probe); /* the other ranks are beside it */
    if (st == DT_OK)
        st = dt_cli_plan_resolve_auto(c, world, &dev);
    dt_plan_probe_free(probe);
    DT_TRY(st);
    dt_info("plugin.pp_layers=auto: %s layers per pipeline chunk, the split whose slowest stage "
            "is fastest by the time model on this machine (the embedding and the LM head "
            "counted)",
            c->plugin.pp_layers);
    return DT_OK;
}
