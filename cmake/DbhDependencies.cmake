# Finds every dependency with find_package; nothing is downloaded here.
# Debian packages provide OpenCV, libjpeg, CLI11, yaml-cpp, nlohmann-json,
# Clipper, GoogleTest, rapidcheck and Google Benchmark; LibTorch comes from
# the pinned torch wheel in .venv/ (scripts/setup.sh) or from
# CMAKE_PREFIX_PATH / Torch_DIR.

# --- LibTorch -------------------------------------------------------------
if(NOT DBH_TORCH_FREE_ONLY)
  if(NOT Torch_DIR)
    file(GLOB _dbh_venv_torch
      "${CMAKE_SOURCE_DIR}/.venv/lib/python3*/site-packages/torch/share/cmake/Torch")
    if(_dbh_venv_torch)
      list(GET _dbh_venv_torch 0 _dbh_venv_torch)
      set(Torch_DIR "${_dbh_venv_torch}" CACHE PATH "Directory holding TorchConfig.cmake")
    endif()
  endif()
  # Torch's CMake config prints a warning about the static-library flag that does
  # not apply to dbh; keep its output short.
  find_package(Torch REQUIRED CONFIG)
  message(STATUS "dbh: LibTorch ${Torch_VERSION} from ${Torch_DIR}")
  # TORCH_CXX_FLAGS carries the ABI define; the imported targets carry it too.
  get_filename_component(DBH_TORCH_LIB_DIR "${TORCH_LIBRARY}" DIRECTORY)

  # The torch target set: torch plus c10 (and torch_cuda when the wheel has CUDA).
  add_library(dbh_torch INTERFACE)
  target_link_libraries(dbh_torch INTERFACE ${TORCH_LIBRARIES})
  # Note [libtorch exports std::filesystem]: the wheel's libtorch.so defines 64
  # std::filesystem symbols of its own. Because libtorch.so comes before
  # libstdc++.so in an executable's NEEDED list, the dynamic linker binds calls
  # such as std::filesystem::remove_all to libtorch's copies, which crash (a null
  # call). Naming libstdc++ first on the link line makes it the first NEEDED
  # library, so its definitions win.
  target_link_options(dbh_torch INTERFACE "LINKER:--push-state,--no-as-needed,-lstdc++,--pop-state")
  # libtorch_cuda.so is loaded only if something references it; keep it linked so
  # CUDA devices are available to dbh when the wheel has CUDA.
  if(TARGET torch_cuda)
    target_link_options(dbh_torch INTERFACE "LINKER:--no-as-needed,$<TARGET_FILE:torch_cuda>,--as-needed")
    target_compile_definitions(dbh_torch INTERFACE DBH_TORCH_HAS_CUDA=1)
  endif()
endif()

# --- OpenCV -----------------------------------------------------------------
find_package(OpenCV REQUIRED COMPONENTS core imgproc imgcodecs)
add_library(dbh_opencv INTERFACE)
target_include_directories(dbh_opencv SYSTEM INTERFACE ${OpenCV_INCLUDE_DIRS})
target_link_libraries(dbh_opencv INTERFACE opencv_core opencv_imgproc opencv_imgcodecs)

# --- libjpeg ------------------------------------------------------------------
# The dataset reads every JPEG to its end with libjpeg before OpenCV decodes
# it, with warnings ("Premature end of JPEG file") counted as errors
# (model/data/image_decode.cc). Debian: libjpeg62-turbo-dev.
find_package(JPEG REQUIRED)

# --- small libraries ----------------------------------------------------------
find_package(CLI11 CONFIG REQUIRED)
find_package(nlohmann_json 3.10 REQUIRED)
find_package(yaml-cpp REQUIRED)
if(NOT TARGET yaml-cpp::yaml-cpp)
  add_library(yaml-cpp::yaml-cpp ALIAS yaml-cpp)
endif()

# Clipper ships only a pkg-config file with a hard-coded prefix.
find_path(POLYCLIPPING_INCLUDE_DIR clipper.hpp PATH_SUFFIXES polyclipping REQUIRED)
find_library(POLYCLIPPING_LIBRARY polyclipping REQUIRED)
if(NOT TARGET polyclipping::polyclipping)
  add_library(polyclipping::polyclipping UNKNOWN IMPORTED)
  set_target_properties(polyclipping::polyclipping PROPERTIES
    IMPORTED_LOCATION "${POLYCLIPPING_LIBRARY}"
    INTERFACE_INCLUDE_DIRECTORIES "${POLYCLIPPING_INCLUDE_DIR}")
endif()

find_package(Threads REQUIRED)

if(DBH_BUILD_TESTS)
  find_package(GTest CONFIG REQUIRED)
  find_package(rapidcheck REQUIRED)
endif()
if(DBH_BUILD_BENCHMARKS)
  find_package(benchmark REQUIRED)
endif()
