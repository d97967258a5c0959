/* gather.h: embedding lookup: the id range check and the copy of one table row. */
#ifndef PE_KERNELS_GATHER_H
#define PE_KERNELS_GATHER_H

#include <stddef.h>

#include "kernels/kernel_defs.h"

/* 1 when id names a row of a table with vocab rows. */
PE_KFN int pe_k_id_in_range(long long id, size_t vocab)
{
    return id >= 0 && (unsigned long long)id < (unsigned long long)vocab;
}

/* out(dim) = table(vocab, dim)[id]; id already checked with pe_k_id_in_range. */
PE_KFN void pe_k_embedding_row(float *out, const float *table, size_t id, size_t dim)
{
    const float *row = table + id * dim;
    for (size_t i = 0; i < dim; i++)
        out[i] = row[i];
}

#endif
