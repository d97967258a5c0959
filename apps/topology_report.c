/* topology_report.c: "pengine --topology": the library's report (pe_topology_report) with the
 * command's exit codes. */
#include "topology_report.h"

#include <stdio.h>

#include "pengine/pengine_tools.h"

int cli_topology(const cli_options *o)
{
    pe_status s = pe_topology_report(o->backend, o->ndevices ? o->devices : NULL, o->ndevices,
                                     o->threads, o->json, stdout);
    if (s == PE_OK)
        return CLI_OK;
    cli_error(pe_last_error());
    return s == PE_EINVAL || s == PE_ENODEV ? CLI_USAGE : CLI_RUNTIME;
}
