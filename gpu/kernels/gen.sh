#!/bin/sh
# gen.sh OUT: compiles decode.cu to PTX for sm_70 (PTX ISA 6.0) with
# Debian's clang-16, no CUDA toolkit, into OUT. The driver JIT-compiles the
# PTX for the GPU it runs on. Run by go generate; make ptx-check runs it
# into a temporary file and compares.
set -eu
cd "$(dirname "$0")"
out=${1:-decode.ptx}
case $out in /*) ;; *) out=$OLDPWD/$out ;; esac
${CLANG:-clang++-16} --cuda-device-only --cuda-gpu-arch=sm_70 -nocudainc -nocudalib \
	-O3 -S -include device.h -x cuda -o "$out" decode.cu
