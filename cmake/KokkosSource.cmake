# Kokkos built inline, from a source tree or a release tarball (Kokkos' documented
# add_subdirectory pattern), beside the usual find_package(Kokkos) of an installed one:
#
#   cmake -S . -B build -DMPIFORMER_KOKKOS_SOURCE=kokkos-4.6.01.tar.gz -DKokkos_ENABLE_OPENMP=ON
#   cmake -S . -B build -DMPIFORMER_KOKKOS_SOURCE=~/src/kokkos \
#         -DKokkos_ENABLE_CUDA=ON -DKokkos_ARCH_HOPPER90=ON -DMPIFORMER_ENABLE_CUDA=ON
#
# Kokkos' own options (Kokkos_ENABLE_*, Kokkos_ARCH_*) choose its backends, as in any Kokkos build.
# Included before project(): with the CUDA backend the C++ compiler must be Kokkos' nvcc_wrapper,
# and CMake fixes the compiler at project(). This file therefore only prepares the source and the
# compiler; the top-level CMakeLists.txt adds the subdirectory.
#
# Sets MPIFORMER_KOKKOS_SOURCE_DIR (the tree to add), or nothing when MPIFORMER_KOKKOS_SOURCE is
# empty. A tarball is extracted under the build tree, once per checksum. Kokkos 4.6.x with CUDA
# gets cmake/patches/kokkos-4.6-cuda13.patch (CUDA 13 changed three runtime signatures; Kokkos
# fixed them in 4.7.1), applied to a copy in the build tree: a user's source tree is never changed.

set(MPIFORMER_KOKKOS_SOURCE "" CACHE FILEPATH
    "Kokkos source tree or release tarball to build inline (empty: find an installed Kokkos)")
if(NOT MPIFORMER_KOKKOS_SOURCE)
  return()
endif()

get_filename_component(_kokkos_given "${MPIFORMER_KOKKOS_SOURCE}" ABSOLUTE)
set(_kokkos_work "${CMAKE_BINARY_DIR}/_kokkos")

# ---- the source: a tree as given, or a tarball's tree -------------------------------------------
if(IS_DIRECTORY "${_kokkos_given}")
  set(_kokkos_src "${_kokkos_given}")
elseif(EXISTS "${_kokkos_given}")
  file(SHA256 "${_kokkos_given}" _kokkos_sha)
  string(SUBSTRING "${_kokkos_sha}" 0 16 _kokkos_key)
  set(_kokkos_unpacked "${_kokkos_work}/src-${_kokkos_key}")
  if(NOT EXISTS "${_kokkos_unpacked}/.extracted")
    message(STATUS "mpiformer: extracting ${_kokkos_given}")
    file(REMOVE_RECURSE "${_kokkos_unpacked}")
    file(ARCHIVE_EXTRACT INPUT "${_kokkos_given}" DESTINATION "${_kokkos_unpacked}")
    file(TOUCH "${_kokkos_unpacked}/.extracted")
  endif()
  # A release tarball holds one top-level directory (kokkos-4.6.01/).
  file(GLOB _kokkos_top LIST_DIRECTORIES true "${_kokkos_unpacked}/*")
  list(FILTER _kokkos_top EXCLUDE REGEX "/\\.extracted$")
  list(LENGTH _kokkos_top _kokkos_top_count)
  if(_kokkos_top_count EQUAL 1 AND IS_DIRECTORY "${_kokkos_top}")
    set(_kokkos_src "${_kokkos_top}")
  else()
    set(_kokkos_src "${_kokkos_unpacked}")
  endif()
else()
  message(FATAL_ERROR "MPIFORMER_KOKKOS_SOURCE=${MPIFORMER_KOKKOS_SOURCE}: no such file or "
                      "directory; give a Kokkos source tree or a release tarball (.tar.gz)")
endif()

if(NOT EXISTS "${_kokkos_src}/core/src/Kokkos_Core.hpp")
  message(FATAL_ERROR "MPIFORMER_KOKKOS_SOURCE: ${_kokkos_src} is not a Kokkos source tree "
                      "(no core/src/Kokkos_Core.hpp)")
endif()
file(STRINGS "${_kokkos_src}/CMakeLists.txt" _kokkos_version_lines
     REGEX "^set\\(Kokkos_VERSION_(MAJOR|MINOR|PATCH) [0-9]+\\)")
foreach(_line IN LISTS _kokkos_version_lines)
  if(_line MATCHES "Kokkos_VERSION_(MAJOR|MINOR|PATCH) ([0-9]+)")
    set(_kokkos_${CMAKE_MATCH_1} ${CMAKE_MATCH_2})
  endif()
endforeach()
set(MPIFORMER_KOKKOS_SOURCE_VERSION "${_kokkos_MAJOR}.${_kokkos_MINOR}.${_kokkos_PATCH}")
if(MPIFORMER_KOKKOS_SOURCE_VERSION VERSION_LESS 4.0)
  message(FATAL_ERROR "MPIFORMER_KOKKOS_SOURCE: Kokkos ${MPIFORMER_KOKKOS_SOURCE_VERSION} is older "
                      "than 4.0; use a Kokkos 4 release")
endif()

# ---- CUDA: the GPU architecture, the CUDA 13 patch, nvcc_wrapper as the C++ compiler -------------
if(Kokkos_ENABLE_CUDA)
  # The one Kokkos_ARCH_<NAME><NN> option naming a CUDA GPU gives sm_<NN>.
  get_cmake_property(_cache_variables CACHE_VARIABLES)
  set(_gpu_arch "")
  foreach(_var IN LISTS _cache_variables)
    if(_var MATCHES "^Kokkos_ARCH_(KEPLER|MAXWELL|PASCAL|VOLTA|TURING|AMPERE|ADA|HOPPER|BLACKWELL)([0-9]+)$"
       AND ${_var})
      list(APPEND _gpu_arch ${CMAKE_MATCH_2})
    endif()
  endforeach()
  list(LENGTH _gpu_arch _gpu_arch_count)
  if(NOT _gpu_arch_count EQUAL 1)
    message(FATAL_ERROR "Kokkos_ENABLE_CUDA: name exactly one GPU architecture for Kokkos, e.g. "
                        "-DKokkos_ARCH_HOPPER90=ON (H100, H200) or -DKokkos_ARCH_AMPERE80=ON (A100)")
  endif()
  set(MPIFORMER_CUDA_ARCH ${_gpu_arch})

  # nvcc, for its version and for nvcc_wrapper (which otherwise takes the one on PATH).
  find_program(MPIFORMER_NVCC nvcc HINTS "$ENV{CUDA_HOME}/bin" "$ENV{CUDA_ROOT}/bin"
                                          /usr/local/cuda/bin)
  if(NOT MPIFORMER_NVCC)
    message(FATAL_ERROR "Kokkos_ENABLE_CUDA: nvcc not found; put the CUDA toolkit's bin/ on PATH "
                        "or set MPIFORMER_NVCC")
  endif()
  execute_process(COMMAND "${MPIFORMER_NVCC}" --version OUTPUT_VARIABLE _nvcc_version)
  string(REGEX MATCH "release ([0-9]+)\\.([0-9]+)" _ "${_nvcc_version}")
  set(_cuda_major ${CMAKE_MATCH_1})

  set(_patch "${CMAKE_CURRENT_LIST_DIR}/patches/kokkos-4.6-cuda13.patch")
  if(_cuda_major GREATER_EQUAL 13 AND MPIFORMER_KOKKOS_SOURCE_VERSION VERSION_LESS 4.7.1)
    if(NOT MPIFORMER_KOKKOS_SOURCE_VERSION MATCHES "^4\\.6\\.")
      message(FATAL_ERROR "Kokkos ${MPIFORMER_KOKKOS_SOURCE_VERSION} does not compile with CUDA "
                          "${_cuda_major} and this project carries a patch for 4.6.x only: use "
                          "Kokkos 4.6.x or 4.7.1 and later, or CUDA 12")
    endif()
    # Patched in a copy, so that a given tree stays as it is.
    set(_patched "${_kokkos_work}/patched-${MPIFORMER_KOKKOS_SOURCE_VERSION}")
    file(SHA256 "${_patch}" _patch_sha)
    set(_stamp "${_patched}/.patched-${_patch_sha}")
    if(NOT EXISTS "${_stamp}" OR NOT _kokkos_src STREQUAL MPIFORMER_KOKKOS_PATCHED_FROM)
      find_program(MPIFORMER_PATCH patch)
      if(NOT MPIFORMER_PATCH)
        message(FATAL_ERROR "Kokkos ${MPIFORMER_KOKKOS_SOURCE_VERSION} with CUDA "
                            "${_cuda_major} needs a patch: install `patch` (Debian: patch)")
      endif()
      message(STATUS "mpiformer: patching Kokkos ${MPIFORMER_KOKKOS_SOURCE_VERSION} for CUDA "
                     "${_cuda_major} (${_patch})")
      file(REMOVE_RECURSE "${_patched}")
      file(COPY "${_kokkos_src}/" DESTINATION "${_patched}")
      execute_process(COMMAND "${MPIFORMER_PATCH}" -p1 --batch --input "${_patch}"
                      WORKING_DIRECTORY "${_patched}" RESULT_VARIABLE _patch_status
                      OUTPUT_VARIABLE _patch_out ERROR_VARIABLE _patch_out)
      if(NOT _patch_status EQUAL 0)
        message(FATAL_ERROR "patching Kokkos failed:\n${_patch_out}")
      endif()
      file(TOUCH "${_stamp}")
      set(MPIFORMER_KOKKOS_PATCHED_FROM "${_kokkos_src}" CACHE INTERNAL "")
    endif()
    set(_kokkos_src "${_patched}")
  endif()

  # The C++ compiler: Kokkos' nvcc_wrapper, told the architecture (its built-in default, sm_70,
  # is one CUDA 13 no longer compiles for) and the toolkit. A small script in the build tree does
  # both for every compile and link CMake runs, its own compiler checks included.
  if(NOT CMAKE_CXX_COMPILER)
    get_filename_component(_cuda_bin "${MPIFORMER_NVCC}" DIRECTORY)
    get_filename_component(_cuda_root "${_cuda_bin}" DIRECTORY)
    set(_wrapper "${_kokkos_work}/nvcc_wrapper-sm_${MPIFORMER_CUDA_ARCH}")
    file(WRITE "${_wrapper}"
         "#!/bin/sh\n"
         "# Written by mpiformer's CMake (cmake/KokkosSource.cmake): Kokkos' nvcc_wrapper for "
         "sm_${MPIFORMER_CUDA_ARCH}.\n"
         "CUDA_ROOT='${_cuda_root}' exec '${_kokkos_src}/bin/nvcc_wrapper' "
         "-arch=sm_${MPIFORMER_CUDA_ARCH} \"$@\"\n")
    file(CHMOD "${_wrapper}" PERMISSIONS OWNER_READ OWNER_WRITE OWNER_EXECUTE GROUP_READ
                                         GROUP_EXECUTE WORLD_READ WORLD_EXECUTE)
    set(CMAKE_CXX_COMPILER "${_wrapper}" CACHE FILEPATH "Kokkos' nvcc_wrapper for this GPU")
  endif()
  if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
    set(CMAKE_CUDA_ARCHITECTURES ${MPIFORMER_CUDA_ARCH} CACHE STRING "GPU architecture")
  endif()
  if(NOT DEFINED CMAKE_CUDA_COMPILER)
    set(CMAKE_CUDA_COMPILER "${MPIFORMER_NVCC}" CACHE FILEPATH "nvcc")
  endif()
endif()

set(MPIFORMER_KOKKOS_SOURCE_DIR "${_kokkos_src}")
