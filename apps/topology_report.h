/* topology_report.h: "pengine --topology": the machine, the backend's devices, and the cores
 * each device's worker would be bound to. */
#ifndef PE_APPS_TOPOLOGY_REPORT_H
#define PE_APPS_TOPOLOGY_REPORT_H

#include "args.h"

/* For the --gpus list, or one worker per core without it. Returns the exit code. */
int cli_topology(const cli_options *o);

#endif
