#!/bin/sh
# run.sh: the GPU checks and benchmarks in one call, for a machine with an
# NVIDIA GPU and its driver but no Go and none of our Debian libraries.
#
# Here (the build machine):   make gpu-binaries     (test binaries in bin/gpu)
# There, from the repository: tools/gpu/run.sh      (bin/gpu carried along)
#
# It first checks that this machine's glibc is as new as the binaries need
# (bin/gpu/glibc.txt, written by make gpu-binaries) and says so plainly if
# not. It records the GPU: name, driver, compute mode, PCIe link. Each
# binary then runs in its package's directory, where its test data is; a
# step fails when the binary fails or prints neither a passed nor a skipped
# test or benchmark (a binary that cannot start prints neither). Full logs
# go under $OUT (default out/gpu); a summary is printed last: the GPU, each
# step's status, and the benchmark lines.
#
# Exit status: 0 when every step ran and the device tests passed on a GPU;
# 1 when a step failed; 2 when bin/gpu is incomplete; 3 when this machine's
# glibc is too old; 4 when every step ran but no GPU answered (the device
# tests skipped, saying why).
set -u
root=$(cd "$(dirname "$0")/../.." && pwd)
bin=${GPU_BIN:-$root/bin/gpu}
out=${OUT:-$root/out/gpu}
# Iterations of the kernel and end-to-end benchmarks, and of the pipeline
# benchmark (fewer against the fake driver, whose kernels run on the host).
BENCHTIME=${BENCHTIME:-20x}
PIPELINE_BENCHTIME=${PIPELINE_BENCHTIME:-10x}
# SHORT=1: the device tests without their Pi-mega frames (-test.short), as
# against the fake driver.
short=
[ "${SHORT:-}" = 1 ] && short=-test.short
mkdir -p "$out"
: >"$out/summary.txt"

for b in gpu.test gpu-backends.test pipeline.test glibc.txt; do
	if [ ! -e "$bin/$b" ]; then
		echo "run.sh: $bin/$b missing: run make gpu-binaries and carry bin/gpu" >&2
		exit 2
	fi
done

# The glibc the binaries need, against this machine's.
need=$(cat "$bin/glibc.txt")
have=$(getconf GNU_LIBC_VERSION 2>/dev/null | awk '$1 == "glibc" { print $2 }')
if [ -z "$have" ]; then
	echo "run.sh: cannot tell this machine's C library (getconf GNU_LIBC_VERSION gives no glibc version);" >&2
	echo "run.sh: the test binaries need glibc $need or newer." >&2
	exit 3
fi
oldest=$(printf '%s\n%s\n' "$need" "$have" | sort -V | head -n 1)
if [ "$oldest" != "$need" ]; then
	echo "run.sh: this machine has glibc $have; the test binaries need glibc $need or newer." >&2
	echo "run.sh: run them on a newer system (Debian 12, Ubuntu 22.04, RHEL 9 or later)," >&2
	echo "run.sh: or build them with make gpu-binaries on a machine of this one's distribution." >&2
	exit 3
fi
echo "glibc $have (the binaries need $need or newer)" >"$out/glibc.txt"

if command -v nvidia-smi >/dev/null 2>&1; then
	nvidia-smi --query-gpu=name,driver_version,compute_mode,pcie.link.gen.current,pcie.link.gen.max,pcie.link.width.current,pcie.link.width.max,memory.total,clocks.max.sm \
		--format=csv >"$out/gpu.txt" 2>&1
else
	echo "nvidia-smi not found" >"$out/gpu.txt"
fi

failed=0
# step NAME DIR BINARY ARGS...: runs the binary in DIR, logs to NAME.log,
# and notes in the summary whether it ran.
step() {
	name=$1 dir=$2
	shift 2
	echo "== $name: $*" >&2
	(cd "$root/$dir" && "$@") >"$out/$name.log" 2>&1
	rc=$?
	if [ $rc -ne 0 ]; then
		echo "$name: FAILED, exit $rc" >>"$out/summary.txt"
		failed=1
	elif ! grep -q -E -e '^ *--- (PASS|SKIP)' -e '^Benchmark[^ ]*[ 	]+[0-9]+[ 	].* ns/op' "$out/$name.log"; then
		echo "$name: FAILED, printed neither a passed nor a skipped test or benchmark" >>"$out/summary.txt"
		failed=1
	else
		echo "$name: ok" >>"$out/summary.txt"
	fi
}

step device gpu/cuda "$bin/gpu.test" -test.v $short
step backends gpu "$bin/gpu-backends.test" -test.v $short
step kernels gpu/cuda "$bin/gpu.test" -test.run '^$' -test.bench Kernels -test.benchtime "$BENCHTIME" -test.v
step end-to-end gpu/cuda "$bin/gpu.test" -test.run '^$' -test.bench EndToEnd -test.benchtime "$BENCHTIME" -test.v
step pipeline pipeline "$bin/pipeline.test" -test.run '^$' -test.bench Pipeline -test.benchtime "$PIPELINE_BENCHTIME" -test.v

gpu=yes
if ! grep -q '^--- PASS: TestDevice ' "$out/device.log"; then
	gpu=no
	# go test -v prints a test's log, the reason it skipped, before its verdict.
	reason=$(grep -B1 '^--- SKIP: TestDevice ' "$out/device.log" | head -n 1 | grep -v -e '^=== ' -e '^--- ' | sed 's/^ *//')
	echo "device: no GPU measured: TestDevice did not pass${reason:+ ($reason)}" >>"$out/summary.txt"
fi

cat "$out/glibc.txt" "$out/gpu.txt" "$out/summary.txt"
grep -h -- '--- SKIP\|--- FAIL' "$out"/device.log "$out"/backends.log | sort | uniq -c | sort -rn | head -20
grep -h '^Benchmark\|copy .* GB/s' "$out"/*.log
if [ $failed -ne 0 ]; then
	exit 1
fi
if [ $gpu = no ]; then
	exit 4
fi
exit 0
