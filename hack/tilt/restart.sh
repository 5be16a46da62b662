#!/bin/sh
# Tilt's live update runs this after syncing a new /manager: start.sh starts it again.
run_dir=${CAPD_RS_RUN_DIR:-/tmp}
touch "$run_dir/manager.restart"
kill -TERM "$(cat "$run_dir/manager.pid")"
