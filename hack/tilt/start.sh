#!/bin/sh
# The container command under Tilt: CAPI's tilt-prepare starts a provider that lists
# live_reload_deps as `sh /start.sh /manager <args>`. Runs the manager, and runs it again after
# restart.sh stopped it for a live update (Tilt synced a new binary); any other exit ends the
# container with the manager's status. SIGTERM from the kubelet goes to the manager, so the Pod
# still shuts down cleanly (the manager releases its leader lease).
# CAPD_RS_RUN_DIR (default /tmp, the image's only writable folder) is for the tests.
run_dir=${CAPD_RS_RUN_DIR:-/tmp}
pidfile=$run_dir/manager.pid
marker=$run_dir/manager.restart
trap 'kill -TERM "$(cat "$pidfile")" 2>/dev/null' TERM INT
while :; do
  rm -f "$marker"
  "$@" &
  pid=$!
  echo "$pid" > "$pidfile"
  # wait returns early when a trapped signal arrives: wait again until the manager has exited.
  wait "$pid"; status=$?
  while kill -0 "$pid" 2>/dev/null; do wait "$pid"; status=$?; done
  [ -e "$marker" ] || exit "$status"
  echo "start.sh: restarting $1 (live update)"
done
