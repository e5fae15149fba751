#!/bin/sh
# run.sh: the GPU checks and benchmarks in one call, for a machine with an
# NVIDIA GPU and its driver but no Go and none of our Debian libraries.
#
# Here (the build machine):   make gpu-binaries     (test binaries in bin/gpu)
# There, from the repository: tools/gpu/run.sh      (bin/gpu carried along)
#
# Each binary runs in its package's directory, where its test data is. Full
# logs go under $OUT (default out/gpu); a summary is printed last: the GPU,
# each step's exit status, and the benchmark lines.
set -u
root=$(cd "$(dirname "$0")/../.." && pwd)
bin=${GPU_BIN:-$root/bin/gpu}
out=${OUT:-$root/out/gpu}
mkdir -p "$out"
: >"$out/summary.txt"

if command -v nvidia-smi >/dev/null 2>&1; then
	nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,pcie.link.gen.max,pcie.link.width.max \
		--format=csv >"$out/gpu.txt" 2>&1
else
	echo "nvidia-smi not found" >"$out/gpu.txt"
fi
for b in gpu.test gpu-backends.test pipeline.test; do
	if [ ! -x "$bin/$b" ]; then
		echo "run.sh: $bin/$b missing: run make gpu-binaries and carry bin/gpu" >&2
		exit 2
	fi
done

# step NAME DIR BINARY ARGS...: runs the binary in DIR, logs to NAME.log.
step() {
	name=$1 dir=$2
	shift 2
	echo "== $name: $*" >&2
	(cd "$root/$dir" && "$@") >"$out/$name.log" 2>&1
	echo "$name: exit $?" >>"$out/summary.txt"
}

step device gpu/cuda "$bin/gpu.test" -test.v
step backends gpu "$bin/gpu-backends.test" -test.v
step kernels gpu/cuda "$bin/gpu.test" -test.run '^$' -test.bench Kernels -test.benchtime 20x -test.v
step end-to-end gpu/cuda "$bin/gpu.test" -test.run '^$' -test.bench EndToEnd -test.benchtime 20x
step pipeline ingest "$bin/pipeline.test" -test.run '^$' -test.bench Pipeline -test.benchtime 10x

cat "$out/gpu.txt"
cat "$out/summary.txt"
grep -h -- '--- SKIP\|--- FAIL' "$out"/device.log "$out"/backends.log | sort | uniq -c | sort -rn | head -20
grep -h '^Benchmark\|copy .* GB/s' "$out"/*.log
