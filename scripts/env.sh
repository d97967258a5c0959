# Sourced by the scripts: puts the CUDA toolkit's nvcc on the PATH when it is installed in
# the usual place but not on the PATH, so CMake finds it and builds the CUDA backend.
if ! command -v nvcc >/dev/null 2>&1 && [ -x /usr/local/cuda/bin/nvcc ]; then
  export PATH="/usr/local/cuda/bin:$PATH"
fi
