# Installs the header, libpengine.a, the command, pengine.pc and the CMake package
# (find_package(pengine) -> pengine::pengine).
include(CMakePackageConfigHelpers)

install(TARGETS pengine EXPORT pengineTargets
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
  PUBLIC_HEADER DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/pengine)
install(TARGETS pengine_cli RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})

set(PE_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/pengine)
install(EXPORT pengineTargets NAMESPACE pengine:: DESTINATION ${PE_CMAKE_DIR})
configure_package_config_file(cmake/pengineConfig.cmake.in
  ${CMAKE_CURRENT_BINARY_DIR}/pengineConfig.cmake INSTALL_DESTINATION ${PE_CMAKE_DIR})
write_basic_package_version_file(${CMAKE_CURRENT_BINARY_DIR}/pengineConfigVersion.cmake
  COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/pengineConfig.cmake
  ${CMAKE_CURRENT_BINARY_DIR}/pengineConfigVersion.cmake DESTINATION ${PE_CMAKE_DIR})

# pkg-config: a static link needs every library libpengine.a calls into.
set(PE_PC_REQUIRES_PRIVATE "hwloc openblas libcjson oniguruma libutf8proc")
set(PE_PC_LIBS_PRIVATE "-lpthread -lm")
if(PE_CUDA)
  string(APPEND PE_PC_LIBS_PRIVATE " ${PE_CUDA_PC_LIBS}")
endif()
if(PE_MPI)
  string(APPEND PE_PC_REQUIRES_PRIVATE " ompi-c")
endif()
file(RELATIVE_PATH PE_PC_PREFIX_FROM_PCDIR ${CMAKE_INSTALL_PREFIX}/${CMAKE_INSTALL_LIBDIR}/pkgconfig
  ${CMAKE_INSTALL_PREFIX})
configure_file(cmake/pengine.pc.in ${CMAKE_CURRENT_BINARY_DIR}/pengine.pc @ONLY)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/pengine.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
