/* cuda_fake_no_nccl.c: what test_cuda_peer_logic links instead of NCCL, cuBLASLt and the
 * host backend: the NCCL path and linear are not linked there, and comm_create must never
 * choose NCCL (the fake NCCL of test_cuda_engine_logic is cuda_fake_nccl.c). */
#include "backend/cuda/cb_comm.h"

/* linear is not linked: nothing to make or free */
pe_status cb_linear_prepare(be_device *dev, pe_err *err)
{
    (void)dev, (void)err;
    return PE_OK;
}

void cb_linear_release(be_device *dev) { (void)dev; }

const be_ops *be_host_ops(void) { return NULL; }

pe_status cb_nccl_create(cb_group *g, be_device *const *devs, pe_err *err)
{
    (void)g;
    (void)devs;
    return pe_fail(err, PE_ECOMM, "the fake runtime has no NCCL");
}

pe_status cb_nccl_prepare(cb_group *g, pe_err *err)
{
    (void)g;
    return pe_fail(err, PE_ECOMM, "the fake runtime has no NCCL");
}

pe_status cb_nccl_join(cb_group *g, const cb_nccl_id *id, pe_err *err)
{
    (void)g, (void)id;
    return pe_fail(err, PE_ECOMM, "the fake runtime has no NCCL");
}

pe_status cb_nccl_split(cb_group *parent, const int *colors, const int *group, const int *sub,
                        cb_group **groups, pe_err *err)
{
    (void)parent, (void)colors, (void)group, (void)sub, (void)groups;
    return pe_fail(err, PE_ECOMM, "the fake runtime has no NCCL");
}

void cb_nccl_abort(cb_group *const *gs, int n) { (void)gs, (void)n; }
void cb_nccl_destroy(cb_group *g) { (void)g; }

#define NO_NCCL(c) return pe_fail(&(c)->dev->err, PE_EINTERNAL, "no NCCL in the fake runtime")

pe_status cb_nccl_allreduce(be_comm *c, const float *s, float *r, size_t n)
{
    (void)s, (void)r, (void)n;
    NO_NCCL(c);
}

pe_status cb_nccl_allgather(be_comm *c, const float *s, float *r, size_t n)
{
    (void)s, (void)r, (void)n;
    NO_NCCL(c);
}

pe_status cb_nccl_reduce_scatter(be_comm *c, const float *s, float *r, size_t n)
{
    (void)s, (void)r, (void)n;
    NO_NCCL(c);
}

pe_status cb_nccl_broadcast(be_comm *c, float *b, size_t n, int root)
{
    (void)b, (void)n, (void)root;
    NO_NCCL(c);
}

pe_status cb_nccl_send(be_comm *c, const float *b, size_t n, int p)
{
    (void)b, (void)n, (void)p;
    NO_NCCL(c);
}

pe_status cb_nccl_recv(be_comm *c, float *b, size_t n, int p)
{
    (void)b, (void)n, (void)p;
    NO_NCCL(c);
}

pe_status cb_nccl_barrier(be_comm *c) { NO_NCCL(c); }
