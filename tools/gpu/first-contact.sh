#!/bin/sh
# first-contact.sh: the first call on a lent GPU machine (16 cores, an
# NVIDIA GPU, none of our Debian libraries), in at most $TOTAL seconds
# (480), of which only the last 12,000 characters printed come back.
#
# Here (the build machine):   make gpu-binaries
# There, from the repository: tools/gpu/first-contact.sh   (carry bin/gpu)
#
# 0. How fast this machine hands out fresh memory (gpu.test -test.bench
#    FirstTouch: a fresh mapping touched, and where a GPU answers
#    page-locked memory allocated and registered afresh). The bench's
#    frames and the steps' time limits are sized from it.
# 1. tools/gpu/run.sh: the GPU's name, driver, compute mode and PCIe link,
#    the device tests, the kernel, end-to-end and pipeline benchmarks.
# 2. h5ingest bench --workers $WORKERS on the CPU decode backend: replay
#    to bitshuffle-LZ4 HDF5 at each count of workers, the pipeline's own
#    time beside the process's, against h5py + hdf5plugin and the C
#    bitshuffle library where a Python has them.
# 3. Where the device tests passed (TestDevice, whatever else failed):
#    the same bench on the cuda decode backend at $CUDA_WORKERS workers.
#
# It prints the long tables first and a digest last, under 8 KB: the
# verdict; the GPU, driver, compute mode and PCIe link; first touch and
# the sizes it set; each step; the copy rates; the end-to-end rows per
# encoding; the kernel rows; the pipeline rows; the CPU scaling line.
#
# h5ingest comes packed in bin/gpu/h5ingest.tar.gz with the shared
# libraries it needs but glibc; it is unpacked into a temporary folder
# and run with LD_LIBRARY_PATH set to its lib/. The bench's files go on
# /dev/shm where it has room for them, else in the temporary folder.
#
# Settings (environment): FRAMES (sized from first touch, at most 200),
# ROUNDS (5), WORKERS (1,2,4,8,16), CUDA_WORKERS (16), PYTHON (python3 on
# PATH; the bench tries /usr/bin/python3 where it lacks numpy), TOTAL
# (480 s), the limits RUN_TIMEOUT, BENCH_TIMEOUT and CUDA_TIMEOUT (shares
# of what is left of TOTAL), and run.sh's BENCHTIME, PIPELINE_BENCHTIME and
# SHORT.
#
# Full logs go under $OUT (default out/first-contact), seven files at most:
# run-logs.txt (first touch and every log of run.sh), bench-cpu.txt and
# bench-cpu.log (the table, the progress), bench-cuda.txt and
# bench-cuda.log, summary.txt (everything printed) and digest.txt.
#
# Exit status: 0 when everything ran and the device tests passed on a GPU;
# 1 when a step failed or ran out of time and no GPU answered; 2 when
# bin/gpu is incomplete; 3 when this machine's glibc is older than the
# binaries need; 4 when everything ran but no GPU answered; 5 when the
# device tests passed on a GPU but another step failed or ran out of time.
set -u
root=$(cd "$(dirname "$0")/../.." && pwd)
bin=${GPU_BIN:-$root/bin/gpu}
out=${OUT:-$root/out/first-contact}
ROUNDS=${ROUNDS:-5}
WORKERS=${WORKERS:-1,2,4,8,16}
CUDA_WORKERS=${CUDA_WORKERS:-16}
PYTHON=${PYTHON:-$(command -v python3 || echo /usr/bin/python3)}
TOTAL=${TOTAL:-480}
began=$(date +%s)
mkdir -p "$out"
summary=$out/summary.txt
digest=$out/digest.txt
: >"$summary"
: >"$digest"
say() { echo "$*" >>"$summary"; }
dig() { echo "$*" >>"$digest"; }
elapsed() { echo $(($(date +%s) - began)); }

# limit SECONDS CMD...: runs CMD, killed after SECONDS (exit 124).
limit() {
	if command -v timeout >/dev/null 2>&1; then
		timeout -k 10 "$@"
	else
		shift
		"$@"
	fi
}

# metric FILE UNIT: the first value reported in UNIT by a benchmark line of FILE.
metric() {
	awk -v unit="$2" '/^Benchmark/ { for (i = 3; i < NF; i++) if ($(i + 1) == unit) { print $i; exit } }' "$1" 2>/dev/null
}

# rows FILE UNITS...: a header naming the units, then each benchmark line
# of FILE on one short line: its name without "Benchmark" and the -N
# suffix, then the value of each unit ("-" where it has none).
rows() {
	f=$1
	shift
	awk -v units="$*" '
	BEGIN { n = split(units, u, " "); h = sprintf("  %-40s", "(name)"); for (k = 1; k <= n; k++) h = h " " u[k]; print h }
	/^Benchmark[^ \t]*[ \t]+[0-9]+[ \t]/ {
		name = $1; sub(/^Benchmark/, "", name); sub(/-[0-9]+$/, "", name)
		split("", v)
		for (i = 3; i < NF; i++) v[$(i + 1)] = $i
		line = sprintf("  %-40s", name)
		for (k = 1; k <= n; k++) line = line " " ((u[k] in v) ? v[u[k]] : "-")
		print line
	}' "$f" 2>/dev/null
}

if [ ! -e "$bin/h5ingest.tar.gz" ]; then
	echo "first-contact.sh: $bin/h5ingest.tar.gz missing: run make gpu-binaries and carry bin/gpu" >&2
	exit 2
fi
work=$(mktemp -d "${TMPDIR:-/tmp}/first-contact.XXXXXX") || exit 1
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/run"
say "first contact: $(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc 2>/dev/null || echo '?') CPUs, $(uname -r)"

# 0. First touch, in gpu/cuda where gpu.test's data is.
echo "== first touch (gpu.test -test.bench FirstTouch)" >&2
(cd "$root/gpu/cuda" && limit 90 "$bin/gpu.test" -test.run '^$' -test.bench FirstTouch -test.benchtime 1x -test.v) \
	>"$work/first-touch.log" 2>&1
touch_mbs=$(metric "$work/first-touch.log" touch-MB/s)
pin_mbs=$(metric "$work/first-touch.log" pin-MB/s)
register_mbs=$(metric "$work/first-touch.log" register-MB/s)
rate=${touch_mbs%.*}
[ -n "$rate" ] && [ "$rate" -gt 0 ] 2>/dev/null || rate=1000
pinrate=${pin_mbs%.*}
[ -n "$pinrate" ] && [ "$pinrate" -gt 0 ] 2>/dev/null || pinrate=$rate

# The steps' limits: what is left of TOTAL, less a margin for unpacking
# and printing, shared between run.sh (at least 120 s, and time for the
# about 6 GB its benchmarks page-lock afresh), the CPU bench and the cuda
# bench (decided after run.sh: the cuda bench gets 40% of what is left
# where the device tests passed).
left=$((TOTAL - $(elapsed) - 30))
fresh_run_s=$((6000 / pinrate))
RUN_TIMEOUT=${RUN_TIMEOUT:-$((left * 45 / 100 > 120 + fresh_run_s ? left * 45 / 100 : 120 + fresh_run_s))}
[ "$RUN_TIMEOUT" -gt $((left - 60)) ] && RUN_TIMEOUT=$((left - 60))

# 1. run.sh, its logs gathered into one file (a call brings back 8 at most).
echo "== run.sh (at most ${RUN_TIMEOUT}s)" >&2
OUT=$work/run limit "$RUN_TIMEOUT" sh "$root/tools/gpu/run.sh" >"$work/run.out" 2>&1
run_rc=$?
for f in "$work/first-touch.log" "$work/run.out" "$work"/run/*; do
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
# The device works where TestDevice passed, whatever else failed.
gpu_ok=no
grep -q '^--- PASS: TestDevice ' "$work/run/device.log" 2>/dev/null && gpu_ok=yes

say ""
say "run.sh: exit $run_rc ($run_says)"
if [ -s "$work/run.out" ]; then
	sed 's/^/  /' "$work/run.out" | grep -v -e '^  == ' >>"$summary"
fi

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

# What is left for the benches, and the frames a row: the fresh memory a
# CPU bench round takes (per row, its output, about 3.2 MB a frame, and
# a process of about 300 MB) must take at most half its limit at the
# measured first-touch rate.
left=$((TOTAL - $(elapsed) - 20))
if [ $gpu_ok = yes ]; then
	BENCH_TIMEOUT=${BENCH_TIMEOUT:-$((left * 60 / 100))}
	CUDA_TIMEOUT=${CUDA_TIMEOUT:-$((left - BENCH_TIMEOUT))}
else
	BENCH_TIMEOUT=${BENCH_TIMEOUT:-$left}
	CUDA_TIMEOUT=${CUDA_TIMEOUT:-0}
fi
# The frames a row: the fresh memory a round takes (per row its output,
# about 3.2 MB a frame, and a process of about 300 MB) must take at most
# half the limit at the measured first-touch rate; and the rounds' CPU
# time, estimated from run.sh's CPU pipeline benchmark (ms per frame and
# core, each row at min(workers, cores) cores, the Python rows at a third
# of h5ingest's rate, a second a row to start), at most a third of it.
cores=$(nproc 2>/dev/null || echo 1)
bench_rows=$(($(echo "$WORKERS" | tr ',' '\n' | grep -c .) + 6))
frames_why="as given"
if [ -z "${FRAMES:-}" ]; then
	FRAMES=$(((rate * BENCH_TIMEOUT / 2 / (bench_rows * ROUNDS) - 300) * 10 / 32))
	frames_why="sized from first touch"
	fps=$(awk '/^BenchmarkPipeline\/cpu\/source=go\/backend-shuffle=false/ { for (i = 3; i < NF; i++) if ($(i + 1) == "frames/s") print int($i) }' \
		"$work/run/pipeline.log" 2>/dev/null | head -n 1)
	if [ -n "$fps" ] && [ "$fps" -gt 0 ]; then
		pcores=$(metric "$work/run/pipeline.log" cpus)
		pcores=${pcores%.*}
		[ -n "$pcores" ] && [ "$pcores" -gt 0 ] 2>/dev/null || pcores=$cores
		core_ms=$((pcores * 1000 / fps))
		share=$((14000 / cores))
		for w in $(echo "$WORKERS" | tr ',' ' '); do
			share=$((share + 1000 / (w < cores ? w : cores)))
		done
		by_cpu=$(((BENCH_TIMEOUT * 1000 / 3 / ROUNDS - bench_rows * 1000) * 1000 / (core_ms * share + 1)))
		if [ "$by_cpu" -lt "$FRAMES" ]; then
			FRAMES=$by_cpu
			frames_why="sized from the CPU pipeline's $fps frames/s on $pcores cores"
		fi
	fi
	[ "$FRAMES" -gt 200 ] && FRAMES=200
	[ "$FRAMES" -lt 20 ] && FRAMES=20
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
# the progress to NAME.log, the table without its legend to the summary;
# sets NAME's status line for the digest.
bench() {
	name=$1 secs=$2
	shift 2
	echo "== h5ingest bench $* (at most ${secs}s)" >&2
	bench_began=$(date +%s)
	LD_LIBRARY_PATH=$kit/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} limit "$secs" "$kit/h5ingest" bench \
		--frames "$FRAMES" --rounds "$ROUNDS" --python "$PYTHON" --dir "$dir" --disk-dir "" "$@" \
		>"$out/$name.txt" 2>"$out/$name.log"
	rc=$?
	say ""
	case $rc in
	0)
		say "$name: h5ingest bench $*"
		sed '/^ratios: of rates/,/^$/d' "$out/$name.txt" >>"$summary"
		echo "$name: ok, h5ingest bench $* (FRAMES=$FRAMES ROUNDS=$ROUNDS), in $(($(date +%s) - bench_began)) s" >>"$work/steps"
		;;
	124 | 137)
		say "$name: FAILED, ran out of its ${secs}s (FRAMES=$FRAMES ROUNDS=$ROUNDS); last progress:"
		tail -n 3 "$out/$name.log" | sed 's/^/  /' >>"$summary"
		echo "$name: FAILED, ran out of its ${secs}s (FRAMES=$FRAMES ROUNDS=$ROUNDS): $(tail -n 1 "$out/$name.log")" >>"$work/steps"
		bench_failed=1
		;;
	*)
		say "$name: FAILED, exit $rc:"
		tail -n 5 "$out/$name.log" | sed 's/^/  /' >>"$summary"
		echo "$name: FAILED, exit $rc: $(tail -n 1 "$out/$name.log")" >>"$work/steps"
		bench_failed=1
		;;
	esac
}

: >"$work/steps"
if [ $bench_failed -eq 0 ]; then
	bench bench-cpu "$BENCH_TIMEOUT" --backend cpu --workers "$WORKERS"
	if [ $gpu_ok = yes ]; then
		bench bench-cuda "$CUDA_TIMEOUT" --backend cuda --workers "$CUDA_WORKERS"
	else
		echo "bench-cuda: not run: the device tests did not pass (run.sh exit $run_rc)" >>"$work/steps"
	fi
fi

rc=$run_rc
case $run_rc in
124 | 137) rc=1 ;;
0 | 4) [ $bench_failed -ne 0 ] && rc=1 ;;
esac
[ $bench_failed -eq 3 ] && [ $rc -ne 2 ] && rc=3
[ $gpu_ok = yes ] && [ $rc -eq 1 ] && rc=5
case $rc in
0) verdict="everything ran; the device tests passed on a GPU" ;;
1) verdict="a step failed, and no GPU answered (logs in $out)" ;;
2) verdict="bin/gpu incomplete: run make gpu-binaries and carry bin/gpu" ;;
3) verdict="this machine's glibc is too old for the binaries" ;;
4) verdict="everything ran, but no GPU answered" ;;
5) verdict="the GPU works (the device tests passed), but a step failed (logs in $out)" ;;
*) verdict="exit $rc" ;;
esac

# The digest, printed last: what the call must bring back, under 8 KB.
logs=$work/run
dig "===== first-contact digest"
dig "verdict: exit $rc: $verdict"
dig "machine: $(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc 2>/dev/null || echo '?') CPUs, $(uname -r), $(head -n 1 "$logs/glibc.txt" 2>/dev/null || echo 'glibc not checked'); took $(elapsed) s of $TOTAL"
# nvidia-smi's CSV: a header line, then one line per GPU.
if [ -s "$logs/gpu.txt" ]; then
	head -n 3 "$logs/gpu.txt" | sed 's/^/gpu: /' >>"$digest"
else
	dig "gpu: not recorded (run.sh did not reach nvidia-smi)"
fi
device=$(grep -h -o 'device ".*; driver CUDA [0-9.]*' "$logs/device.log" 2>/dev/null | head -n 1)
dig "device: ${device:-no device answered$(grep -h -B1 '^--- SKIP: TestDevice ' "$logs/device.log" 2>/dev/null | head -n 1 | sed 's/^ */: /')}"
ptx=$(grep -h -o 'ptx=[a-z_0-9]*' "$logs"/*.log 2>/dev/null | head -n 1)
dig "first touch: ${touch_mbs:-not measured} MB/s fresh memory touched, ${pin_mbs:--} MB/s page-locked afresh, ${register_mbs:--} MB/s registered in place${ptx:+; kernels $ptx}"
dig "  sized from it: FRAMES=$FRAMES ($frames_why) ROUNDS=$ROUNDS; limits: run.sh ${RUN_TIMEOUT}s (its ~6 GB page-locked afresh: ~${fresh_run_s}s), bench-cpu ${BENCH_TIMEOUT}s, bench-cuda ${CUDA_TIMEOUT}s"
dig "steps:"
dig "  run.sh: exit $run_rc ($run_says)"
grep -v '^device: no GPU measured' "$logs/summary.txt" 2>/dev/null | sed 's/^/  /' >>"$digest"
sed 's/^/  /' "$work/steps" >>"$digest"
fails=$(grep -h -- '^--- FAIL' "$logs"/*.log 2>/dev/null | awk '{ print $3 }' | sort -u | head -n 12 | tr '\n' ' ')
[ -n "$fails" ] && dig "  tests failed: $fails"
copies=$(grep -h -o 'copies: .*' "$logs/end-to-end.log" 2>/dev/null | head -n 1)
dig "${copies:-copies: not measured}"
if grep -q '^BenchmarkEndToEnd/' "$logs/end-to-end.log" 2>/dev/null; then
	dig "end-to-end, raw payload (one module 7.08 GB/s, a 2x2 array 28.3):"
	rows "$logs/end-to-end.log" GB/s >>"$digest"
fi
if grep -q '^BenchmarkKernels/' "$logs/kernels.log" 2>/dev/null; then
	dig "kernels (payload GB/s, each kernel's rate, fold, transpose, traffic against device-to-device):"
	rows "$logs/kernels.log" GB/s decode-GB/s crc-GB/s fold-µs shuffle-GB/s of-d2d >>"$digest"
fi
if grep -q '^BenchmarkPipeline/' "$logs/pipeline.log" 2>/dev/null; then
	dig "pipeline (whole pipeline, 64 Pi-mega frames from memory):"
	rows "$logs/pipeline.log" frames/s GB/s setup-ms >>"$digest"
fi
for name in bench-cpu bench-cuda; do
	[ -s "$out/$name.txt" ] || continue
	dig "$name:"
	grep -h -e '^scaling (pipeline time' -e '^one module at' "$out/$name.txt" | sed 's/^/  /' >>"$digest"
	grep -h -e '^ours / reference (defaults)' -e '^ours / the faster C row' -e '^transpose on the backend' \
		"$out/$name.txt" | tr -s ' ' | sed 's/^/  /' >>"$digest"
	sed -n '/^rows not run/,/^$/p' "$out/$name.txt" | head -n 3 | cut -c 1-200 | sed 's/^/  /' >>"$digest"
done
[ -s "$out/bench-cpu.txt" ] || dig "bench-cpu: no scaling line (the CPU bench did not finish)"
dig "===== end of digest: exit $rc"
# A digest over 8 KB loses its middle, never its verdict and its end.
if [ "$(wc -c <"$digest")" -gt 8000 ]; then
	{ head -c 5000 "$digest"; echo; echo "[... digest cut to 8 KB: the whole in $digest ...]"; tail -c 2800 "$digest"; } >"$work/digest" &&
		cp "$work/digest" "$digest"
fi

cat "$summary"
echo
cat "$digest"
cat "$digest" >>"$summary"
exit $rc
