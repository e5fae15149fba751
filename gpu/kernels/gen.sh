#!/bin/sh
# gen.sh OUT [ARCH]: compiles decode.cu to PTX for ARCH (default sm_70,
# PTX ISA 6.0; sm_90 gives PTX ISA 7.8) with Debian's clang-16, no CUDA
# toolkit, into OUT. The driver JIT-compiles the PTX for the GPU it runs
# on. Run by go generate; make ptx-check runs it into a temporary file and
# compares.
set -eu
cd "$(dirname "$0")"
out=${1:-decode.ptx}
arch=${2:-sm_70}
case $out in /*) ;; *) out=$OLDPWD/$out ;; esac
${CLANG:-clang++-16} --cuda-device-only --cuda-gpu-arch="$arch" -nocudainc -nocudalib \
	-O3 -S -include device.h -x cuda -o "$out" decode.cu
