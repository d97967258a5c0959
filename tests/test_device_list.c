/* test_device_list.c: the device-list logic without a GPU: which backend a kind selects,
 * the auto fallback notice, the error for a missing device (listing those that exist),
 * and the collective path (NCCL, or the peer path for a repeated GPU) per device list.
 * Fake ops tables stand in for machines with and without GPUs; the real CUDA backend
 * (when built) must answer "no device" here without crashing. */
#include <stdio.h>
#include <string.h>

#include "test_util.h"

#include "backend/backend.h"
#include "backend/backend_select.h"

/* ---- fake backends: only discovery is used by the selection logic ---- */

static pe_status host_count(int *n, pe_err *err)
{
    (void)err;
    *n = 4;
    return PE_OK;
}

static pe_status host_describe(int id, be_device_desc *out, pe_err *err)
{
    (void)err;
    memset(out, 0, sizeof *out);
    out->id = id;
    snprintf(out->name, sizeof out->name, "host core set");
    out->memory_bytes = (size_t)8 << 30;
    out->numa_node = 0;
    return PE_OK;
}

static const char *no_driver_msg = "cudaGetDeviceCount: CUDA driver version is insufficient "
                                   "for CUDA runtime version (cudaErrorInsufficientDriver)";

static pe_status gpu0_count(int *n, pe_err *err)
{
    *n = 0;
    pe_fail(err, PE_OK, "%s", no_driver_msg);
    return PE_OK;
}

static pe_status gpu2_count(int *n, pe_err *err)
{
    (void)err;
    *n = 2;
    return PE_OK;
}

static pe_status gpu2_describe(int id, be_device_desc *out, pe_err *err)
{
    if (id < 0 || id >= 2)
        return pe_fail(err, PE_ENODEV, "no device %d", id);
    memset(out, 0, sizeof *out);
    out->id = id;
    snprintf(out->name, sizeof out->name, "Fake H200");
    out->memory_bytes = (size_t)140 << 30;
    snprintf(out->bus_id, sizeof out->bus_id, id == 0 ? "0000:19:00.0" : "0000:3B:00.0");
    out->numa_node = id;
    return PE_OK;
}

static const be_ops fake_host = {.name = "host", .kind = PE_BACKEND_HOST,
                                 .device_count = host_count, .device_describe = host_describe};
static const be_ops fake_cuda_none = {.name = "cuda", .kind = PE_BACKEND_CUDA,
                                      .device_count = gpu0_count,
                                      .device_describe = gpu2_describe};
static const be_ops fake_cuda_two = {.name = "cuda", .kind = PE_BACKEND_CUDA,
                                     .device_count = gpu2_count,
                                     .device_describe = gpu2_describe};

/* ---- backend selection ---- */

static void host_kind_selects_host_even_with_gpus(void **state)
{
    (void)state;
    const be_ops *out = NULL;
    char notice[256] = "stale";
    pe_err err = {{0}};
    assert_int_equal(be_select_among(&fake_host, &fake_cuda_two, PE_BACKEND_HOST, &out, notice,
                                     sizeof notice, &err),
                     PE_OK);
    assert_ptr_equal(out, &fake_host);
    assert_string_equal(notice, "");
}

static void auto_selects_cuda_when_a_device_answers(void **state)
{
    (void)state;
    const be_ops *out = NULL;
    char notice[256] = "stale";
    assert_int_equal(be_select_among(&fake_host, &fake_cuda_two, PE_BACKEND_AUTO, &out, notice,
                                     sizeof notice, NULL),
                     PE_OK);
    assert_ptr_equal(out, &fake_cuda_two);
    assert_string_equal(notice, ""); /* no fallback, nothing to say */
}

static void auto_without_device_falls_back_to_host_with_one_line_notice(void **state)
{
    (void)state;
    const be_ops *out = NULL;
    char notice[256];
    assert_int_equal(be_select_among(&fake_host, &fake_cuda_none, PE_BACKEND_AUTO, &out,
                                     notice, sizeof notice, NULL),
                     PE_OK);
    assert_ptr_equal(out, &fake_host);
    assert_non_null(strstr(notice, "notice:"));
    assert_non_null(strstr(notice, "cudaErrorInsufficientDriver")); /* the reason */
    assert_non_null(strstr(notice, "host backend"));                 /* what happens */
    assert_null(strchr(notice, '\n'));
}

static void auto_without_cuda_build_says_built_without(void **state)
{
    (void)state;
    const be_ops *out = NULL;
    char notice[256];
    assert_int_equal(
        be_select_among(&fake_host, NULL, PE_BACKEND_AUTO, &out, notice, sizeof notice, NULL),
        PE_OK);
    assert_ptr_equal(out, &fake_host);
    assert_non_null(strstr(notice, "built without CUDA"));
}

static void cuda_kind_without_device_is_enodev_with_reason_and_fix(void **state)
{
    (void)state;
    const be_ops *out = NULL;
    pe_err err = {{0}};
    assert_int_equal(be_select_among(&fake_host, &fake_cuda_none, PE_BACKEND_CUDA, &out, NULL,
                                     0, &err),
                     PE_ENODEV);
    assert_non_null(strstr(err.msg, "no CUDA device found"));
    assert_non_null(strstr(err.msg, "cudaErrorInsufficientDriver"));
    assert_non_null(strstr(err.msg, "--backend host"));
}

static void cuda_kind_without_cuda_build_is_enodev(void **state)
{
    (void)state;
    const be_ops *out = NULL;
    pe_err err = {{0}};
    assert_int_equal(
        be_select_among(&fake_host, NULL, PE_BACKEND_CUDA, &out, NULL, 0, &err), PE_ENODEV);
    assert_non_null(strstr(err.msg, "built without the CUDA backend"));
}

static void cuda_kind_with_devices_selects_cuda(void **state)
{
    (void)state;
    const be_ops *out = NULL;
    assert_int_equal(
        be_select_among(&fake_host, &fake_cuda_two, PE_BACKEND_CUDA, &out, NULL, 0, NULL),
        PE_OK);
    assert_ptr_equal(out, &fake_cuda_two);
}

static void unknown_kind_is_einval(void **state)
{
    (void)state;
    const be_ops *out = NULL;
    pe_err err = {{0}};
    assert_int_equal(be_select_among(&fake_host, &fake_cuda_two, (pe_backend_kind)42, &out,
                                     NULL, 0, &err),
                     PE_EINVAL);
}

/* ---- device list checks ---- */

static void missing_device_lists_the_devices_that_exist(void **state)
{
    (void)state;
    const int ids[] = {0, 7};
    pe_err err = {{0}};
    assert_int_equal(be_check_devices(&fake_cuda_two, ids, 2, &err), PE_ENODEV);
    assert_non_null(strstr(err.msg, "device 7 does not exist"));
    assert_non_null(strstr(err.msg, "2 devices"));
    assert_non_null(strstr(err.msg, "0: Fake H200, 140.0 GiB, 0000:19:00.0"));
    assert_non_null(strstr(err.msg, "1: Fake H200, 140.0 GiB, 0000:3B:00.0"));
}

static void negative_device_id_is_rejected(void **state)
{
    (void)state;
    const int ids[] = {-1};
    pe_err err = {{0}};
    assert_int_equal(be_check_devices(&fake_cuda_two, ids, 1, &err), PE_ENODEV);
    assert_non_null(strstr(err.msg, "device -1 does not exist"));
}

static void existing_and_repeated_devices_pass(void **state)
{
    (void)state;
    const int ids[] = {1, 0, 1, 1};
    assert_int_equal(be_check_devices(&fake_cuda_two, ids, 4, NULL), PE_OK);
}

static void no_device_at_all_says_why(void **state)
{
    (void)state;
    const int ids[] = {0};
    pe_err err = {{0}};
    assert_int_equal(be_check_devices(&fake_cuda_none, ids, 1, &err), PE_ENODEV);
    assert_non_null(strstr(err.msg, "device 0 does not exist"));
    assert_non_null(strstr(err.msg, "0 devices"));
    assert_non_null(strstr(err.msg, "cudaErrorInsufficientDriver"));
}

/* ---- collective path per device list ---- */

static void distinct_gpus_use_nccl(void **state)
{
    (void)state;
    const int ids[] = {0, 1, 2, 3};
    int rep = 99;
    assert_int_equal(be_comm_path_for(PE_BACKEND_CUDA, ids, 4, 0, 0, &rep), BE_COMM_NCCL);
    assert_int_equal(rep, -1);
    assert_int_equal(be_comm_path_for(PE_BACKEND_CUDA, ids, 1, 0, 0, NULL), BE_COMM_NCCL);
}

static void repeated_gpu_uses_the_peer_path(void **state)
{
    (void)state;
    int rep = -1;
    const int two[] = {0, 0};
    assert_int_equal(be_comm_path_for(PE_BACKEND_CUDA, two, 2, 0, 0, &rep), BE_COMM_PEER);
    assert_int_equal(rep, 0);
    const int pairs[] = {0, 0, 1, 1};
    assert_int_equal(be_comm_path_for(PE_BACKEND_CUDA, pairs, 4, 0, 0, &rep), BE_COMM_PEER);
    assert_int_equal(rep, 0);
    const int late[] = {2, 0, 1, 0};
    assert_int_equal(be_comm_path_for(PE_BACKEND_CUDA, late, 4, 0, 0, &rep), BE_COMM_PEER);
    assert_int_equal(rep, 0);
    const int other[] = {3, 1, 3};
    assert_int_equal(be_comm_path_for(PE_BACKEND_CUDA, other, 3, 0, 0, &rep), BE_COMM_PEER);
    assert_int_equal(rep, 3);
}

static void forced_peer_path_applies_to_distinct_gpus(void **state)
{
    (void)state;
    const int ids[] = {0, 1};
    int rep = 99;
    assert_int_equal(be_comm_path_for(PE_BACKEND_CUDA, ids, 2, 1, 0, &rep), BE_COMM_PEER);
    assert_int_equal(rep, -1);
}

static void distinct_gpus_that_serve_other_workers_use_the_peer_path(void **state)
{
    (void)state;
    /* --gpus 0,1,0,1 with tp=2: each TP group {0,1} is distinct, but both GPUs also run
     * the other group's workers, so NCCL kernels of two groups would share a GPU */
    const int ids[] = {0, 1};
    int rep = 99;
    assert_int_equal(be_comm_path_for(PE_BACKEND_CUDA, ids, 2, 0, 1, &rep), BE_COMM_PEER);
    assert_int_equal(rep, -1);
}

static void host_backend_always_uses_host_collectives(void **state)
{
    (void)state;
    const int ids[] = {0, 0, 1};
    assert_int_equal(be_comm_path_for(PE_BACKEND_HOST, ids, 3, 0, 0, NULL), BE_COMM_HOST);
    assert_int_equal(be_comm_path_for(PE_BACKEND_HOST, ids, 3, 1, 1, NULL), BE_COMM_HOST);
}

static void path_description_names_the_repeated_device(void **state)
{
    (void)state;
    char buf[256];
    const int ids[] = {1, 0, 1};
    be_comm_path_describe(PE_BACKEND_CUDA, ids, 3, buf, sizeof buf);
    assert_non_null(strstr(buf, "peer path"));
    assert_non_null(strstr(buf, "device 1 appears twice"));
    const int distinct[] = {0, 1};
    if (!be_comm_force_peer()) {
        be_comm_path_describe(PE_BACKEND_CUDA, distinct, 2, buf, sizeof buf);
        assert_non_null(strstr(buf, "NCCL"));
    }
    assert_string_equal(be_comm_path_name(BE_COMM_PEER), "peer");
    assert_string_equal(be_comm_path_name(BE_COMM_NCCL), "nccl");
}

/* ---- the real CUDA backend on this machine ---- */

static void real_cuda_backend_answers_without_crashing(void **state)
{
    (void)state;
    const be_ops *cuda = be_cuda_ops();
    if (!cuda)
        skip(); /* built without CUDA: nothing to ask */
    int n = -1;
    pe_err why = {{0}};
    assert_int_equal(cuda->device_count(&n, &why), PE_OK);
    assert_true(n >= 0);
    const be_ops *out = NULL;
    pe_err err = {{0}};
    char notice[256];
    if (n == 0) {
        assert_true(why.msg[0] != '\0'); /* it says why there is none */
        assert_int_equal(be_select(PE_BACKEND_CUDA, &out, NULL, 0, &err), PE_ENODEV);
        assert_non_null(strstr(err.msg, "no CUDA device found"));
        assert_int_equal(be_select(PE_BACKEND_AUTO, &out, notice, sizeof notice, NULL), PE_OK);
        assert_ptr_equal(out, be_host_ops());
        assert_non_null(strstr(notice, "host backend"));
        /* Opening or describing a device that is not there fails cleanly. */
        be_device *dev = NULL;
        assert_int_equal(cuda->open(0, &dev, &err), PE_ENODEV);
        assert_null(dev);
        assert_non_null(strstr(err.msg, "does not exist"));
        be_device_desc desc;
        assert_int_not_equal(cuda->device_describe(0, &desc, &err), PE_OK);
    } else {
        assert_int_equal(be_select(PE_BACKEND_CUDA, &out, NULL, 0, &err), PE_OK);
        assert_ptr_equal(out, cuda);
    }
    const int ids[] = {n + 7};
    assert_int_equal(be_check_devices(cuda, ids, 1, &err), PE_ENODEV);
    assert_non_null(strstr(err.msg, "does not exist on the cuda backend"));
}

/* ---- every op of every built backend is set ---- */

/* Every function pointer of be_ops, in backend.h's order. A new op must be added here, so
 * a backend that forgets it fails in CI rather than crashing on first use (the CUDA table
 * once lacked copy_d2d_2d, which only TP's all-gather layout calls). */
#define BE_OPS_FUNCTIONS(X) \
    X(device_count) \
    X(device_describe) \
    X(open) \
    X(close) \
    X(last_error) \
    X(alloc) \
    X(free) \
    X(copy_h2d) \
    X(copy_d2h) \
    X(copy_d2d) \
    X(copy_d2d_2d) \
    X(synchronize) \
    X(gemm) \
    X(gemm_strided_batched) \
    X(gemm_bf16) \
    X(to_bf16) \
    X(linear) \
    X(bias_add) \
    X(relu) \
    X(gelu) \
    X(layernorm) \
    X(softmax) \
    X(residual_add) \
    X(embedding) \
    X(rmsnorm) \
    X(rope) \
    X(silu_mul) \
    X(kv_append) \
    X(attention) \
    X(argmax) \
    X(topk) \
    X(sample) \
    X(comm_create) \
    X(comm_abort) \
    X(comm_abort_all) \
    X(comm_split) \
    X(comm_destroy) \
    X(allreduce_sum) \
    X(allgather) \
    X(reduce_scatter) \
    X(broadcast) \
    X(send) \
    X(recv) \
    X(barrier) \
    X(comm_rank) \
    X(comm_size)

static void check_table(const be_ops *ops)
{
#define X(f)                                                                                  \
    if (!ops->f)                                                                              \
        fail_msg("the %s backend's be_ops has no " #f, ops->name);
    BE_OPS_FUNCTIONS(X)
#undef X
}

/* The decoder operations (backend.h's last block). */
#define BE_DECODER_OPS(X) \
    X(rmsnorm) \
    X(rope) \
    X(silu_mul) \
    X(kv_append) \
    X(attention) \
    X(argmax) \
    X(topk) \
    X(sample)

static void check_decoder_ops(const be_ops *ops)
{
#define X(f)                                                                                  \
    if (!ops->f)                                                                              \
        fail_msg("the %s backend's be_ops has no " #f, ops->name);
    BE_DECODER_OPS(X)
#undef X
}

/* Ops only a host backend has (NULL elsewhere, as backend.h says). */
#define BE_HOST_ONLY_FUNCTIONS(X) \
    X(set_compute_threads) \
    X(compute_threads)

static void every_op_of_every_built_backend_is_set(void **state)
{
    (void)state;
    check_table(be_host_ops());
    if (be_cuda_ops()) {
        check_table(be_cuda_ops());
        check_decoder_ops(be_cuda_ops());
    }
    check_decoder_ops(be_host_ops());
    const be_ops *host = be_host_ops();
#define X(f)                                                                                  \
    if (!host->f)                                                                             \
        fail_msg("the host backend's be_ops has no " #f);
    BE_HOST_ONLY_FUNCTIONS(X)
#undef X
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(host_kind_selects_host_even_with_gpus),
        cmocka_unit_test(auto_selects_cuda_when_a_device_answers),
        cmocka_unit_test(auto_without_device_falls_back_to_host_with_one_line_notice),
        cmocka_unit_test(auto_without_cuda_build_says_built_without),
        cmocka_unit_test(cuda_kind_without_device_is_enodev_with_reason_and_fix),
        cmocka_unit_test(cuda_kind_without_cuda_build_is_enodev),
        cmocka_unit_test(cuda_kind_with_devices_selects_cuda),
        cmocka_unit_test(unknown_kind_is_einval),
        cmocka_unit_test(missing_device_lists_the_devices_that_exist),
        cmocka_unit_test(negative_device_id_is_rejected),
        cmocka_unit_test(existing_and_repeated_devices_pass),
        cmocka_unit_test(no_device_at_all_says_why),
        cmocka_unit_test(distinct_gpus_use_nccl),
        cmocka_unit_test(repeated_gpu_uses_the_peer_path),
        cmocka_unit_test(forced_peer_path_applies_to_distinct_gpus),
        cmocka_unit_test(distinct_gpus_that_serve_other_workers_use_the_peer_path),
        cmocka_unit_test(host_backend_always_uses_host_collectives),
        cmocka_unit_test(path_description_names_the_repeated_device),
        cmocka_unit_test(real_cuda_backend_answers_without_crashing),
        cmocka_unit_test(every_op_of_every_built_backend_is_set),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
