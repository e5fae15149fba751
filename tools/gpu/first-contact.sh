#!/bin/sh
# first-contact.sh: the first call on a lent GPU machine (16 cores, an
# NVIDIA GPU, none of our Debian libraries), in at most 10 minutes.
#
# Here (the build machine):   make gpu-binaries
# There, from the repository: tools/gpu/first-contact.sh   (carry bin/gpu)
#
# 1. tools/gpu/run.sh: the GPU's name, driver, compute mode and PCIe link,
#    the device tests, the kernel, end-to-end and pipeline benchmarks.
# 2. h5ingest bench --workers $WORKERS on the CPU decode backend: replay
#    to bitshuffle-LZ4 HDF5 at each count of workers, against h5py +
#    hdf5plugin and the C bitshuffle library where $PYTHON has them (the
#    rows it cannot run are named, with the import's error).
# 3. Where run.sh found a GPU: the same bench on the cuda decode backend,
#    at $CUDA_WORKERS workers.
#
# h5ingest comes packed in bin/gpu/h5ingest.tar.gz with the shared
# libraries it needs but glibc; it is unpacked into a temporary folder
# and run with LD_LIBRARY_PATH set to its lib/. The bench's files go on
# /dev/shm where it has room for them, else in the temporary folder.
#
# Settings (environment): FRAMES (200), ROUNDS (5), WORKERS
# (1,2,4,8,16), CUDA_WORKERS (16), PYTHON (python3 on PATH), and the
# time limits in seconds RUN_TIMEOUT (240), BENCH_TIMEOUT (200),
# CUDA_TIMEOUT (100). The test runs it with FRAMES=20 ROUNDS=1 WORKERS=1,2.
#
# Full logs go under $OUT (default out/first-contact), six files at most:
# run-logs.txt (every log of run.sh), bench-cpu.txt and bench-cpu.log
# (the table, the progress), bench-cuda.txt and bench-cuda.log, and
# summary.txt, which is printed last.
#
# Exit status: 0 when everything ran and the device tests passed on a GPU;
# 1 when a step failed or ran out of time; 2 when bin/gpu is incomplete;
# 3 when this machine's glibc is older than the binaries need; 4 when
# everything ran but no GPU answered.
set -u
root=$(cd "$(dirname "$0")/../.." && pwd)
bin=${GPU_BIN:-$root/bin/gpu}
out=${OUT:-$root/out/first-contact}
FRAMES=${FRAMES:-200}
ROUNDS=${ROUNDS:-5}
WORKERS=${WORKERS:-1,2,4,8,16}
CUDA_WORKERS=${CUDA_WORKERS:-16}
PYTHON=${PYTHON:-$(command -v python3 || echo python3)}
RUN_TIMEOUT=${RUN_TIMEOUT:-240}
BENCH_TIMEOUT=${BENCH_TIMEOUT:-200}
CUDA_TIMEOUT=${CUDA_TIMEOUT:-100}
mkdir -p "$out"
summary=$out/summary.txt
: >"$summary"
say() { echo "$*" >>"$summary"; }

# limit SECONDS CMD...: runs CMD, killed after SECONDS (exit 124).
limit() {
	if command -v timeout >/dev/null 2>&1; then
		timeout -k 10 "$@"
	else
		shift
		"$@"
	fi
}

if [ ! -e "$bin/h5ingest.tar.gz" ]; then
	echo "first-contact.sh: $bin/h5ingest.tar.gz missing: run make gpu-binaries and carry bin/gpu" >&2
	exit 2
fi
work=$(mktemp -d "${TMPDIR:-/tmp}/first-contact.XXXXXX") || exit 1
trap 'rm -rf "$work"' EXIT

say "first contact: $(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc 2>/dev/null || echo '?') CPUs, $(uname -r)"

# 1. run.sh, its logs gathered into one file (the call returns 8 at most).
echo "== run.sh (at most ${RUN_TIMEOUT}s)" >&2
OUT=$work/run limit "$RUN_TIMEOUT" sh "$root/tools/gpu/run.sh" >"$work/run.out" 2>&1
run_rc=$?
for f in "$work/run.out" "$work"/run/*; do
	[ -e "$f" ] || continue
	echo "===== $(basename "$f")"
	cat "$f"
done >"$out/run-logs.txt"
case $run_rc in
0) run_says="ok, device tests passed on a GPU" ;;
1) run_says="a step failed" ;;
2) run_says="bin/gpu incomplete" ;;
3) run_says="glibc too old" ;;
4) run_says="every step ran, no GPU answered" ;;
124 | 137) run_says="ran out of its ${RUN_TIMEOUT}s" ;;
*) run_says="exit $run_rc" ;;
esac
say ""
say "run.sh: exit $run_rc ($run_says)"
if [ -s "$work/run/gpu.txt" ]; then
	sed 's/^/  gpu: /' "$work/run/gpu.txt" >>"$summary"
fi
if [ -s "$work/run/summary.txt" ]; then
	sed 's/^/  /' "$work/run/summary.txt" >>"$summary"
fi
# The benchmark lines with figures, their columns squeezed.
grep -h -E -e '^Benchmark[^ ]*[[:space:]]+[0-9]+[[:space:]]' -e 'copy .* GB/s' "$work"/run/*.log 2>/dev/null |
	tr -s ' \t' '  ' | sed 's/^/  /' >>"$summary"

# 2 and 3. h5ingest bench, unpacked with its libraries.
kit=$work/h5ingest
mkdir -p "$kit"
bench_failed=0
if ! tar -C "$kit" -xzf "$bin/h5ingest.tar.gz"; then
	say "bench: cannot unpack $bin/h5ingest.tar.gz"
	bench_failed=1
else
	need=$(cat "$kit/glibc.txt")
	have=$(getconf GNU_LIBC_VERSION 2>/dev/null | awk '$1 == "glibc" { print $2 }')
	oldest=$(printf '%s\n%s\n' "$need" "${have:-0}" | sort -V | head -n 1)
	if [ "$oldest" != "$need" ]; then
		say "bench: not run: this machine has glibc ${have:-unknown}; h5ingest and its libraries need $need or newer"
		bench_failed=3
	fi
fi

# The bench's folder: /dev/shm if it has room for the capture, the
# decoded frames and the outputs (about 12 MB a frame and 600 MB), else
# the temporary folder.
need_kb=$(((FRAMES * 12 + 600) * 1024))
dir=${TMPDIR:-/tmp}
if [ -d /dev/shm ]; then
	avail=$(df -Pk /dev/shm 2>/dev/null | awk 'NR == 2 { print $4 }')
	if [ "${avail:-0}" -ge "$need_kb" ]; then
		dir=/dev/shm
	else
		say "bench: /dev/shm has $((${avail:-0} / 1024)) MB free, less than the $((need_kb / 1024)) MB the bench needs: files in $dir"
	fi
fi

# bench NAME SECONDS ARGS...: runs h5ingest bench, the table to NAME.txt,
# the progress to NAME.log, and the table without its legend to the
# summary.
bench() {
	name=$1 secs=$2
	shift 2
	echo "== h5ingest bench $* (at most ${secs}s)" >&2
	LD_LIBRARY_PATH=$kit/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} limit "$secs" "$kit/h5ingest" bench \
		--frames "$FRAMES" --rounds "$ROUNDS" --python "$PYTHON" --dir "$dir" "$@" \
		>"$out/$name.txt" 2>"$out/$name.log"
	rc=$?
	say ""
	case $rc in
	0)
		say "$name: h5ingest bench $*"
		sed '/^ratios: of rates/,/^$/d' "$out/$name.txt" >>"$summary"
		;;
	124 | 137)
		say "$name: FAILED, ran out of its ${secs}s (FRAMES=$FRAMES ROUNDS=$ROUNDS); last progress:"
		tail -n 3 "$out/$name.log" | sed 's/^/  /' >>"$summary"
		bench_failed=1
		;;
	*)
		say "$name: FAILED, exit $rc:"
		tail -n 5 "$out/$name.log" | sed 's/^/  /' >>"$summary"
		bench_failed=1
		;;
	esac
}

if [ $bench_failed -eq 0 ]; then
	bench bench-cpu "$BENCH_TIMEOUT" --backend cpu --workers "$WORKERS"
	if [ $run_rc -eq 0 ]; then
		bench bench-cuda "$CUDA_TIMEOUT" --backend cuda --workers "$CUDA_WORKERS"
	else
		say ""
		say "bench-cuda: not run: run.sh found no working GPU (exit $run_rc)"
	fi
fi

rc=$run_rc
case $run_rc in
124 | 137) rc=1 ;;
0 | 4) [ $bench_failed -ne 0 ] && rc=1 ;;
esac
[ $bench_failed -eq 3 ] && [ $rc -ne 2 ] && rc=3
case $rc in
0) verdict="everything ran; the device tests passed on a GPU" ;;
1) verdict="a step failed (logs in $out)" ;;
2) verdict="bin/gpu incomplete: run make gpu-binaries and carry bin/gpu" ;;
3) verdict="this machine's glibc is too old for the binaries" ;;
4) verdict="everything ran, but no GPU answered" ;;
*) verdict="exit $rc" ;;
esac
say ""
say "first-contact: exit $rc: $verdict"
cat "$summary"
exit $rc
