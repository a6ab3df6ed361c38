# Compiler settings shared by every dbh target.

if(DBH_CCACHE)
  find_program(DBH_CCACHE_PROGRAM ccache)
  if(DBH_CCACHE_PROGRAM)
    # The sloppiness settings let ccache cache translation units that use the
    # precompiled torch header; the base folder makes the paths under the
    # checkout relative, so that another clone (CI's, a fresh one) finds what
    # this one compiled (see ./dev, which exports the same variables).
    set(CMAKE_CXX_COMPILER_LAUNCHER
        "${CMAKE_COMMAND}" -E env
        "CCACHE_SLOPPINESS=pch_defines,time_macros,include_file_mtime,include_file_ctime"
        "CCACHE_BASEDIR=${PROJECT_SOURCE_DIR}" "CCACHE_NOHASHDIR=1"
        "${DBH_CCACHE_PROGRAM}")
  endif()
endif()

add_library(dbh_warnings INTERFACE)
target_compile_options(dbh_warnings INTERFACE
  -Wall -Wextra -Wpedantic -Wno-unused-parameter
  $<$<BOOL:${DBH_WERROR}>:-Werror>)

add_library(dbh_sanitize INTERFACE)
if(DBH_SANITIZE)
  target_compile_options(dbh_sanitize INTERFACE
    -fsanitize=${DBH_SANITIZE} -fno-omit-frame-pointer)
  target_link_options(dbh_sanitize INTERFACE -fsanitize=${DBH_SANITIZE})
endif()

# Release builds without debug info keep links quick on 2 cores; -O2 is what
# the torch wheel itself uses.
string(REPLACE "-O3" "-O2" CMAKE_CXX_FLAGS_RELEASE "${CMAKE_CXX_FLAGS_RELEASE}")
