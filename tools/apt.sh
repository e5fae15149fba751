#!/bin/sh
# apt.sh ARGS...: apt-get ARGS, waiting up to APT_LOCK_WAIT seconds (default
# 600) for another apt or dpkg (an unattended upgrade, another install) to
# let go of the package locks instead of failing at once. apt-get waits for
# the dpkg lock itself (DPkg::Lock::Timeout); "apt-get update" does not wait
# for the package lists' lock, so it is tried again while that is held.
wait=${APT_LOCK_WAIT:-600}
end=$(( $(date +%s) + wait ))
while :; do
	out=$(apt-get -o DPkg::Lock::Timeout="$wait" "$@" 2>&1)
	status=$?
	if [ $status = 0 ] || ! printf '%s\n' "$out" | grep -q 'Could not get lock' || [ "$(date +%s)" -ge "$end" ]; then
		[ -n "$out" ] && printf '%s\n' "$out" >&2
		exit $status
	fi
	echo "apt.sh: another apt holds the package lock; waiting (up to ${wait}s)" >&2
	sleep 5
done
