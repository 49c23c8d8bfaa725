# Install rules and the CMake package config (included at the end of the top-level CMakeLists.txt).
#
#   <prefix>/bin/mpiformer-train, mpiformer-generate, mpiformer-eval, mpiformer-bench,
#   mpiformer-schedule, mpiformer-tokenize, mpiformer-plan
#   <prefix>/share/mpiformer/machines/*.json (machine files for mpiformer-plan)
#   <prefix>/include/mpiformer/{core,model,...}/*.hpp, backends/gemm.hpp, mpiformer/config.hpp
#   <prefix>/lib/libmpiformer.a, libmpiformer_backend.a
#   <prefix>/lib/cmake/mpiformer/mpiformerConfig.cmake (+ Version, Targets)
#
# A consumer adds -I<prefix>/include/mpiformer through the target, so the project's own include
# spelling works unchanged:
#   find_package(mpiformer CONFIG REQUIRED)
#   target_link_libraries(app PRIVATE mpiformer::mpiformer)   # #include "model/gpt.hpp"
include(CMakePackageConfigHelpers)

set(MPIFORMER_INSTALL_INCLUDEDIR ${CMAKE_INSTALL_INCLUDEDIR}/mpiformer)
set(MPIFORMER_INSTALL_CMAKEDIR ${CMAKE_INSTALL_LIBDIR}/cmake/mpiformer)

# ---- programs ------------------------------------------------------------------------------------
# Their RPATH keeps the OpenBLAS they were linked with (CMAKE_INSTALL_RPATH_USE_LINK_PATH).
install(TARGETS mpiformer-train mpiformer-generate mpiformer-eval mpiformer-bench mpiformer-schedule
                mpiformer-tokenize mpiformer-plan RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
# Machine files written from data sheets, for planning a cluster that cannot be measured here.
install(DIRECTORY ${PROJECT_SOURCE_DIR}/docs/machines/ DESTINATION ${CMAKE_INSTALL_DATADIR}/mpiformer/machines)
# mpiformer-plot runs on /usr/bin/python3, which needs matplotlib (Debian: python3-matplotlib).
install(PROGRAMS ${PROJECT_BINARY_DIR}/mpiformer-plot DESTINATION ${CMAKE_INSTALL_BINDIR})

# ---- library and the interface targets it links ---------------------------------------------------
# mpiformer_backend is a static library on the CPU and an interface over mpiformer_backend_cuda
# when Kokkos runs on CUDA; only then is the cuBLAS library part of the exported link interface.
set(_mpf_export_targets mpiformer mpiformer_backend mpiformer_kokkos mpiformer_flags)
set(MPIFORMER_EXPORTS_CUDA OFF)
get_target_property(_mpf_backend_type mpiformer_backend TYPE)
if(_mpf_backend_type STREQUAL "INTERFACE_LIBRARY" AND TARGET mpiformer_backend_cuda)
  list(APPEND _mpf_export_targets mpiformer_backend_cuda)
  set(MPIFORMER_EXPORTS_CUDA ON)
endif()
install(TARGETS ${_mpf_export_targets}
        EXPORT mpiformerTargets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
        INCLUDES DESTINATION ${MPIFORMER_INSTALL_INCLUDEDIR})

# ---- headers: the source layout, so "core/types.hpp", "backends/gemm.hpp" and
# "mpiformer/config.hpp" resolve against one include directory --------------------------------------
install(DIRECTORY ${PROJECT_SOURCE_DIR}/src/ DESTINATION ${MPIFORMER_INSTALL_INCLUDEDIR}
        FILES_MATCHING PATTERN "*.hpp")
install(FILES ${PROJECT_SOURCE_DIR}/backends/gemm.hpp
        DESTINATION ${MPIFORMER_INSTALL_INCLUDEDIR}/backends)
install(FILES ${PROJECT_BINARY_DIR}/generated/mpiformer/config.hpp
        DESTINATION ${MPIFORMER_INSTALL_INCLUDEDIR}/mpiformer)

# ---- package config --------------------------------------------------------------------------------
install(EXPORT mpiformerTargets NAMESPACE mpiformer:: FILE mpiformerTargets.cmake
        DESTINATION ${MPIFORMER_INSTALL_CMAKEDIR})
# Kokkos_DIR of this build is a hint for consumers (same Kokkos, TriBITS or standard); a
# consumer's own Kokkos_DIR/Kokkos_ROOT still wins. A Kokkos built inline installs into the same
# prefix, and is found there wherever the prefix moves.
if(MPIFORMER_KOKKOS_SOURCE_DIR)
  set(MPIFORMER_KOKKOS_DIR_HINT "\${PACKAGE_PREFIX_DIR}/${CMAKE_INSTALL_LIBDIR}/cmake/Kokkos")
else()
  set(MPIFORMER_KOKKOS_DIR_HINT "${Kokkos_DIR}")
endif()
configure_package_config_file(${CMAKE_CURRENT_LIST_DIR}/mpiformerConfig.cmake.in
                              ${PROJECT_BINARY_DIR}/mpiformerConfig.cmake
                              INSTALL_DESTINATION ${MPIFORMER_INSTALL_CMAKEDIR})
# 0.x: a minor release may break the interface.
write_basic_package_version_file(${PROJECT_BINARY_DIR}/mpiformerConfigVersion.cmake
                                 VERSION ${PROJECT_VERSION} COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/mpiformerConfig.cmake
              ${PROJECT_BINARY_DIR}/mpiformerConfigVersion.cmake
        DESTINATION ${MPIFORMER_INSTALL_CMAKEDIR})
