#!/usr/bin/env bash
# Watches the CI host for processes spinning in the kernel and makes them SCHED_IDLE (nice 19 too).
#
#   bash .ci/spin_watchdog.sh &        (.ci/run starts it and ends it)
#
# Why: on this CI's kernel (6.18), a process that reaps children while /proc entries of those children are read
# (a memory or CPU sampler walking /proc/PID/task) has been seen spinning in the kernel's /proc dentry
# invalidation (wait4 -> release_task -> proc_invalidate_siblings_dcache -> shrink_dcache_parent), at 100%
# system time, deaf to SIGKILL. Two of those take both cores: every later stage then runs ~20x slower and times
# out. Making the spinning tasks SCHED_IDLE let the tasks they were waiting on run, and the spin ended within
# seconds (seen on 2026-11-28: after 25 minutes stuck, gone 6 s after). Every INTERVAL seconds, a process
# (not a kernel thread) whose system time grew by more than SHARE of that interval is treated so, and named.
set -u
INTERVAL=${SPIN_WATCHDOG_INTERVAL:-30}
SHARE=${SPIN_WATCHDOG_SHARE:-0.66}
HZ=$(getconf CLK_TCK)
limit=$(awk -v i="$INTERVAL" -v s="$SHARE" -v hz="$HZ" 'BEGIN { printf "%d", i * s * hz }')
declare -A last=()
while sleep "$INTERVAL"; do
  declare -A now=()
  for stat in /proc/[0-9]*/stat; do
    s=$(cat "$stat" 2>/dev/null) || continue
    pid=${stat#/proc/}; pid=${pid%/stat}
    rest=${s##*) }  # fields after "(comm)", which may hold spaces
    read -r _state ppid _ _ _ _ _ _ _ _ _ _ stime _ <<<"$rest"
    [ "$pid" -le 2 ] || [ "$ppid" -eq 2 ] || [ "$pid" -eq $$ ] && continue  # init, kernel threads, itself
    now[$pid]=$stime
    prev=${last[$pid]:-}
    if [ -n "$prev" ] && [ $((stime - prev)) -gt "$limit" ]; then
      echo "spin_watchdog: pid $pid spent $(((stime - prev) / HZ)) of the last $INTERVAL s in the kernel:" \
           "made SCHED_IDLE: $(tr '\0\n' '  ' < "/proc/$pid/cmdline" 2>/dev/null | cut -c1-160)" >&2
      for task in /proc/"$pid"/task/[0-9]*; do
        tid=${task##*/}
        chrt -i -p 0 "$tid" 2>/dev/null
        renice -n 19 -p "$tid" >/dev/null 2>&1
      done
    fi
  done
  last=()
  for k in "${!now[@]}"; do last[$k]=${now[$k]}; done
  unset now
done
