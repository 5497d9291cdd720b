# shellcheck shell=bash disable=SC2034  # (sourced: the variables are used by its callers)
# Shared by tools/gpu/pack.sh and tools/gpu/verify.sh (sourced, not run): what the GPU pack
# holds, and which shared libraries the GPU machine's image is assumed to provide.

# The pack: .gpu-pack/ in the repository root (ignored through .git/info/exclude).
GPU_PACK_DIRNAME=.gpu-pack
GPU_PACK_ARCHIVE=minidl-gpu-pack.tar.xz
GPU_PACK_TOP=minidl-gpu-pack  # the archive's top folder
GPU_PACK_LIMIT_MIB=40

# CMake target -> its file, relative to the build folder. Every one is packed.
GPU_PACK_TARGETS=(
  minidl_tests:tests/minidl_tests
  mnist_ddp:apps/mnist_ddp
  gpt:apps/gpt
  minidl_run:apps/minidl-run
  minidl-compare:apps/minidl-compare
  classify:apps/classify
  mnist_prepare:apps/mnist_prepare
  safetensors_logits:tools/gpu/safetensors_logits
  bench_cuda_step:bench/bench_cuda_step
  bench_cuda_kernels:bench/bench_cuda_kernels
  bench_gpt_variants:bench/bench_gpt_variants
)

# Sonames the GPU image provides (the 'cuda' image: Ubuntu 24.04-based with the CUDA 13 toolkit,
# the NVIDIA driver, and cuDNN 9 / NCCL 2 / cudart 13 / cuBLAS 13 as nvidia-* wheels in PyTorch
# 2.11's venv). Never packed: the C library and loader, the driver, the CUDA libraries.
GPU_IMAGE_SONAMES=(
  linux-vdso.so.1 ld-linux-x86-64.so.2 libc.so.6 libm.so.6 libpthread.so.0 libdl.so.2 librt.so.1
  libcuda.so.1 libcudart.so.13 libcublas.so.13 libcublasLt.so.13 libcudnn.so.9 libnccl.so.2
)
# Assumed there too, but packed in lib-fallback/ (used only when the image lacks them or has an
# older version): the GCC runtime (Debian 12's is GCC 12's; Ubuntu 24.04 has GCC 14's) and zlib.
GPU_FALLBACK_SONAMES=(libstdc++.so.6 libgcc_s.so.1 libgomp.so.1 libz.so.1)

# 0 when $1 is one of the remaining arguments.
gpu_in_list() {
  local needle=$1 item
  shift
  for item in "$@"; do [[ $item == "$needle" ]] && return 0; done
  return 1
}

# The NEEDED sonames of an ELF file, one per line.
gpu_needed() {
  readelf -d "$1" | sed -n 's/.*(NEEDED).*\[\(.*\)\]$/\1/p'
}
