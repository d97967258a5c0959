/* gather.h: embedding lookup: the id range check and the copy of one table row. */
#ifndef PE_KERNELS_GATHER_H
#define PE_KERNELS_GATHER_H

#include <stddef.h>
#include <stdint.h>

#include "kernels/bf16.h"

#include "kernels/kernel_defs.h"

/* 1 when id names a row of a table with vocab rows. */
PE_KFN int pe_k_id_in_range(long long id, size_t vocab)
{
    return id >= 0 && (unsigned long long)id < (unsigned long long)vocab;
}

/* out(dim) = table(vocab, dim)[id], the table fp32 or bf16; id already checked with
 * pe_k_id_in_range. */
PE_KFN void pe_k_embedding_row(float *out, const void *table, int bf16, size_t id, size_t dim)
{
    for (size_t i = 0; i < dim; i++)
        out[i] = pe_k_load_elem(table, bf16, id * dim + i);
}

/* out(dim) = the row of token id in a table that holds rows [row0, row0 + nrows) of the
 * vocabulary, or zeros when id is not among them (a vocab-parallel shard: the ranks' rows
 * summed give the lookup); id already checked with pe_k_id_in_range. */
PE_KFN void pe_k_embedding_shard_row(float *out, const void *table, int bf16, size_t id,
                                     size_t row0, size_t nrows, size_t dim)
{
    if (id < row0 || id - row0 >= nrows) {
        for (size_t i = 0; i < dim; i++)
            out[i] = 0.0f;
        return;
    }
    pe_k_embedding_row(out, table, bf16, id - row0, dim);
}

#endif
