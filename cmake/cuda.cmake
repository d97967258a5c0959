# The CUDA backend: nvcc, cuBLAS(Lt) and NCCL, all found by CMake. Sources: src/backend/cuda/.
#
# Architectures: sm_80 and sm_90 machine code plus sm_90 PTX (JIT-compiled on newer chips),
# unless the user chose (-DCMAKE_CUDA_ARCHITECTURES=native or a list, or $CUDAARCHS).
# Decided before enable_language(CUDA), which would otherwise cache nvcc's own default.
if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES AND NOT DEFINED ENV{CUDAARCHS})
  set(CMAKE_CUDA_ARCHITECTURES "80-real;90" CACHE STRING "CUDA architectures (default: 80-real;90)")
endif()
enable_language(CUDA)
enable_language(CXX) # test_cuda_emu compiles the decoder grids as C++ (pe_add_cuda_emu_test)
# CMake 3.25.0 and 3.25.1 (Debian 12's) fail in FindCUDAToolkit ("set_property could not
# find TARGET CUDA::nvToolsExt") when the toolkit has no libnvToolsExt, as CUDA 13 has
# not, and the project requires >= 3.25. 3.25.2 fixed it. The failing step only marks that
# target deprecated, so it is skipped by showing the module an older minimum.
set(pe_required_version ${CMAKE_MINIMUM_REQUIRED_VERSION})
if(CMAKE_VERSION VERSION_LESS 3.25.2)
  set(CMAKE_MINIMUM_REQUIRED_VERSION 3.24)
endif()
find_package(CUDAToolkit REQUIRED)
set(CMAKE_MINIMUM_REQUIRED_VERSION ${pe_required_version})

# NCCL ships with the toolkit here (include/nccl.h, lib64/libnccl.so); NCCL_HOME or
# -DNCCL_ROOT point elsewhere, e.g. at a pip wheel's folder, whose lib/ holds only
# libnccl.so.2.
find_path(PE_NCCL_INCLUDE_DIR nccl.h HINTS ${CUDAToolkit_INCLUDE_DIRS} ENV NCCL_HOME ${NCCL_ROOT}
  PATH_SUFFIXES include)
# NAMES_PER_DIR: the hints' folders first, whichever name they hold, so that a wheel's
# libnccl.so.2 beside its nccl.h wins over an older libnccl.so in the system's folders.
find_library(PE_NCCL_LIBRARY NAMES nccl libnccl.so.2 NAMES_PER_DIR
  HINTS ${CUDAToolkit_LIBRARY_DIR} ENV NCCL_HOME ${NCCL_ROOT} PATH_SUFFIXES lib lib64)
if(NOT PE_NCCL_INCLUDE_DIR OR NOT PE_NCCL_LIBRARY)
  message(FATAL_ERROR "CUDA found but NCCL is missing (nccl.h / libnccl); set NCCL_HOME or -DPE_WITH_CUDA=OFF")
endif()
message(STATUS "NCCL: ${PE_NCCL_LIBRARY} (headers ${PE_NCCL_INCLUDE_DIR})")
get_filename_component(PE_NCCL_LIBDIR ${PE_NCCL_LIBRARY} DIRECTORY)
# The build tree's programs find the toolkit and NCCL without ld.so.conf or LD_LIBRARY_PATH
# (CMake leaves the toolkit's folder out of RUNPATH, as an implicit link directory of nvcc).
list(APPEND CMAKE_BUILD_RPATH ${CUDAToolkit_LIBRARY_DIR} ${PE_NCCL_LIBDIR})
list(REMOVE_DUPLICATES CMAKE_BUILD_RPATH)
get_filename_component(PE_NCCL_FILE ${PE_NCCL_LIBRARY} NAME)
set(PE_NCCL_LINK_FLAG -lnccl)
if(PE_NCCL_FILE STREQUAL "libnccl.so.2")
  set(PE_NCCL_LINK_FLAG -l:libnccl.so.2)
endif()
# For pengine.pc (cmake/install.cmake): what a static link of libpengine.a needs.
set(PE_CUDA_PC_LIBS "-L${CUDAToolkit_LIBRARY_DIR} -L${PE_NCCL_LIBDIR} -lcublasLt -lcublas -lcudart ${PE_NCCL_LINK_FLAG} -lstdc++")

# pe_add_cuda_backend(<object library>): adds src/backend/cuda/*.c and *.cu to it (and
# cuda/mpi/*.c, NCCL across processes, with MPI).
function(pe_add_cuda_backend target)
  file(GLOB cuda_sources CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/src/backend/cuda/*.c
       ${PROJECT_SOURCE_DIR}/src/backend/cuda/*.cu)
  if(PE_MPI)
    file(GLOB cuda_mpi_sources CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/src/backend/cuda/mpi/*.c)
    list(APPEND cuda_sources ${cuda_mpi_sources})
  endif()
  target_sources(${target} PRIVATE ${cuda_sources})
  # SYSTEM: the toolkit's and NCCL's headers are not held to our warning flags.
  target_include_directories(${target} SYSTEM PRIVATE ${PE_NCCL_INCLUDE_DIR}
    ${CUDAToolkit_INCLUDE_DIRS})
  target_link_libraries(${target} PUBLIC CUDA::cudart CUDA::cublas CUDA::cublasLt ${PE_NCCL_LIBRARY})
  # -fmad=false: nvcc would fuse a * b + c into one FMA (one rounding instead of two) where
  # the host's x86-64 build does not; without it the kernels compute the host's bits for
  # the same order of operations. They are memory-bound, so the FMA would save nothing.
  set(cuda_flags -Xcompiler=-Wall,-Wextra,-Wshadow -fmad=false)
  if(PE_WERROR)
    list(APPEND cuda_flags -Werror=all-warnings -Xcompiler=-Werror)
  endif()
  target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CUDA>:${cuda_flags}>)
endfunction()

# pe_backend_c_sources(<var>): every .c file of both backends, for the tests that build
# the backend themselves on the fakes (with the communicators over processes when PE_MPI;
# MPI itself comes with pe_engine).
function(pe_backend_c_sources var)
  set(src ${PROJECT_SOURCE_DIR}/src)
  set(dirs backend backend/host backend/cuda)
  if(PE_MPI)
    list(APPEND dirs backend/mpi backend/host/mpi backend/cuda/mpi)
  endif()
  set(globs)
  foreach(dir ${dirs})
    list(APPEND globs ${src}/${dir}/*.c)
  endforeach()
  file(GLOB files CONFIGURE_DEPENDS ${globs})
  set(${var} ${files} PARENT_SCOPE)
endfunction()

# pe_add_cuda_logic_test(): tests/test_cuda_peer_logic, the peer path's host logic (cb_comm.c,
# cb_peer.c, cb_device.c) linked against a fake CUDA runtime (tests/cuda_fake_runtime.c), so
# it runs in CI without a GPU. Called from tests/CMakeLists.txt (PkgConfig::CMOCKA is there).
function(pe_add_cuda_logic_test)
  set(src ${PROJECT_SOURCE_DIR}/src)
  add_executable(test_cuda_peer_logic test_cuda_peer_logic.c cuda_fake_runtime.c
    cuda_fake_no_nccl.c test_util.c
    ${src}/common/error.c ${src}/backend/backend.c ${src}/backend/cuda/cb_comm.c
    ${src}/backend/cuda/cb_peer.c ${src}/backend/cuda/cb_device.c ${src}/backend/cuda/cb_error.c
    ${src}/runtime/barrier.c ${src}/runtime/park.c ${src}/runtime/chan.c)
  # No PE_HAVE_CUDA: backend.c then gives be_cuda_ops() = NULL instead of cb_ops.c's table.
  target_compile_definitions(test_cuda_peer_logic PRIVATE _GNU_SOURCE
    PE_VERSION_STRING="${PROJECT_VERSION}")
  target_include_directories(test_cuda_peer_logic PRIVATE ${PROJECT_SOURCE_DIR}/include ${src})
  target_include_directories(test_cuda_peer_logic SYSTEM PRIVATE ${CUDAToolkit_INCLUDE_DIRS})
  target_compile_options(test_cuda_peer_logic PRIVATE ${PE_WARN_FLAGS})
  target_link_libraries(test_cuda_peer_logic PRIVATE PkgConfig::CMOCKA PkgConfig::HWLOC
    Threads::Threads m)
  add_test(NAME test_cuda_peer_logic COMMAND test_cuda_peer_logic)
  set_tests_properties(test_cuda_peer_logic PROPERTIES LABELS "unit" TIMEOUT 300)
endfunction()

# pe_add_cuda_fake_executable(<name> <source>): the program of pe_add_cuda_fake_engine_test,
# without the tests (tests/CMakeLists.txt runs test_cuda_mpi under mpirun).
function(pe_add_cuda_fake_executable name source)
  pe_backend_c_sources(backend_c)
  add_executable(${name} ${source} cuda_fake_runtime.c cuda_fake_libs.c cuda_fake_nccl.c
    test_util.c ${backend_c})
  # the layers above and below the backend as built; the backend compiled here, on fakes
  target_link_libraries(${name} PRIVATE pe_common pe_runtime pe_model pe_engine pe_text
    PkgConfig::CMOCKA)
  target_compile_definitions(${name} PRIVATE PE_CUDA_FAKE=1)
  target_include_directories(${name} SYSTEM PRIVATE ${PE_NCCL_INCLUDE_DIR}
    ${CUDAToolkit_INCLUDE_DIRS})
  target_compile_options(${name} PRIVATE ${PE_WARN_FLAGS})
endfunction()

# pe_add_cuda_fake_engine_test(<name> <source>): <source> built as <name> against the fake
# CUDA runtime, cuBLAS(Lt), kernel launchers and NCCL (tests/cuda_fake_*.c) instead of the
# real libraries, with the engine and every .c file of both backends, so the CUDA backend's
# whole host side runs in CI without a GPU (PE_CUDA_FAKE is defined for fake-only checks).
function(pe_add_cuda_fake_engine_test name source)
  pe_add_cuda_fake_executable(${name} ${source})
  add_test(NAME ${name} COMMAND ${name})
  set_tests_properties(${name} PROPERTIES LABELS "unit" TIMEOUT 600
    ENVIRONMENT "PE_TEST_DATA=${CMAKE_CURRENT_BINARY_DIR};OPENBLAS_NUM_THREADS=1")
  if(VALGRIND) # memcheck, helgrind and DRD on the CUDA backend's host side
    pe_valgrind_tests(${name})
  endif()
endfunction()

# pe_add_cuda_emu_test(): tests/test_cuda.c built a third time, as test_cuda_emu: like
# test_cuda_fake, but the decoder grids themselves (cb_decoder.cu, cb_attention.cu,
# cb_sample.cu) run instead of the fake launchers, compiled as C++ against the CPU
# emulation of blocks, warps and shared memory in tests/cuda_emu.hpp. So the grids' own
# code (tiling, splits, online softmax, radix selection, scans) is checked in CI against the
# naive twins, without a GPU. Small sizes (PE_TEST_SMALL): an emulated thread is slow.
function(pe_add_cuda_emu_test)
  set(src ${PROJECT_SOURCE_DIR}/src)
  set(emu_sources "")
  foreach(grid cb_decoder cb_attention cb_sample)
    set(f ${CMAKE_CURRENT_BINARY_DIR}/emu_${grid}.cpp)
    file(CONFIGURE OUTPUT ${f} CONTENT "#include \"backend/cuda/${grid}.cu\"\n")
    list(APPEND emu_sources ${f})
  endforeach()
  set_source_files_properties(${emu_sources} PROPERTIES
    OBJECT_DEPENDS "${CMAKE_CURRENT_SOURCE_DIR}/cuda_emu.hpp;${src}/backend/cuda/cb_grid.cuh;${src}/backend/cuda/cb_decoder.cu;${src}/backend/cuda/cb_attention.cu;${src}/backend/cuda/cb_sample.cu")
  pe_backend_c_sources(backend_c)
  add_executable(test_cuda_emu test_cuda.c cuda_fake_runtime.c cuda_fake_libs.c
    cuda_fake_nccl.c test_util.c ${backend_c} ${emu_sources})
  target_link_libraries(test_cuda_emu PRIVATE pe_common pe_runtime pe_model pe_engine pe_text
    PkgConfig::CMOCKA)
  target_compile_definitions(test_cuda_emu PRIVATE PE_CUDA_FAKE=1 PE_CUDA_EMU=1)
  target_include_directories(test_cuda_emu SYSTEM PRIVATE ${PE_NCCL_INCLUDE_DIR}
    ${CUDAToolkit_INCLUDE_DIRS})
  set(cxx_flags -include ${CMAKE_CURRENT_SOURCE_DIR}/cuda_emu.hpp -Wall -Wextra -Wshadow)
  if(PE_WERROR)
    list(APPEND cxx_flags -Werror)
  endif()
  target_compile_options(test_cuda_emu PRIVATE $<$<COMPILE_LANGUAGE:C>:${PE_WARN_FLAGS}>
    $<$<COMPILE_LANGUAGE:CXX>:${cxx_flags}>)
  set_target_properties(test_cuda_emu PROPERTIES CXX_STANDARD 17 CXX_STANDARD_REQUIRED ON)
  add_test(NAME test_cuda_emu COMMAND test_cuda_emu)
  set_tests_properties(test_cuda_emu PROPERTIES LABELS "unit" TIMEOUT 1200
    ENVIRONMENT "PE_TEST_SMALL=1;PE_TEST_DATA=${CMAKE_CURRENT_BINARY_DIR};OPENBLAS_NUM_THREADS=1")
endfunction()
