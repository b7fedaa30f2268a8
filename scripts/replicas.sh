#!/usr/bin/env bash
# Several replicas of the dashboard behind HAProxy on 127.0.0.1, sticky by cookie: deploy/haproxy.cfg with its
# bind and server lines pointed at local ports (what deploy/compose.yaml runs in containers). One Streamlit process
# uses one core (Python's GIL); the replicas use the others. Needs Debian's haproxy (apt-get install haproxy).
#   PORT=8501 REPLICAS=2 bash scripts/replicas.sh      then http://127.0.0.1:8501
# Prints one line "ready PORT proxy=PID replicas=PID:PORT,PID:PORT" once every replica answers through the proxy,
# and stops them all when it is stopped (TERM or Ctrl-C). Extra arguments go to each `streamlit run`.
set -euo pipefail
cd "$(dirname "$0")/.."
PORT="${PORT:-8501}"
REPLICAS="${REPLICAS:-2}"
PY="${PYTHON:-.venv/bin/python}"
command -v haproxy >/dev/null || { echo "haproxy not found: apt-get install haproxy" >&2; exit 2; }
RUN="$(mktemp -d)"
PIDS=()
stop() {
  trap - EXIT INT TERM
  for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$RUN"
}
trap stop EXIT INT TERM

# each replica on a port the kernel says is free now (PORT+1, PORT+2, ... may be some other program's, e.g. an
# outgoing connection's ephemeral port); all asked at once so that no two are the same
mapfile -t FREE < <("$PY" -c '
import socket, sys
socks = [socket.socket() for _ in range(int(sys.argv[1]))]
for s in socks:
    s.bind(("127.0.0.1", 0))
print("\n".join(str(s.getsockname()[1]) for s in socks))
' "$REPLICAS")
SERVERS=""
REPLICA_PIDS=()
for i in $(seq 1 "$REPLICAS"); do
  port="${FREE[$((i - 1))]}"
  "$PY" -m streamlit run app.py --server.port "$port" --server.address 127.0.0.1 --server.headless true \
    --browser.gatherUsageStats false --server.fileWatcherType none "$@" >"$RUN/app$i.log" 2>&1 &
  PIDS+=($!)
  REPLICA_PIDS+=("$!:$port")
  SERVERS+="    server app$i 127.0.0.1:$port check inter 2s cookie app$i\n"
done
# the shipped configuration, bound to 127.0.0.1 and pointed at these replicas; a stats socket for the tests
sed -e "s/^    bind :8501$/    bind 127.0.0.1:$PORT/" -e '/^    server app[0-9]/d' \
    -e "s#^global\$#global\n    stats socket $RUN/haproxy.sock mode 600 level user#" deploy/haproxy.cfg >"$RUN/haproxy.cfg"
printf "%b" "$SERVERS" >>"$RUN/haproxy.cfg"
haproxy -c -q -f "$RUN/haproxy.cfg"
haproxy -db -f "$RUN/haproxy.cfg" >"$RUN/haproxy.log" 2>&1 &
PROXY=$!
PIDS+=("$PROXY")

for _ in $(seq 1 180); do  # up to 90 s: every replica healthy behind the proxy
  up=0
  for entry in "${REPLICA_PIDS[@]}"; do
    curl -fsS "http://127.0.0.1:${entry#*:}/_stcore/health" >/dev/null 2>&1 && up=$((up + 1))
  done
  if [ "$up" = "$REPLICAS" ] && curl -fsS "http://127.0.0.1:$PORT/_stcore/health" >/dev/null 2>&1; then
    echo "ready $PORT proxy=$PROXY replicas=$(IFS=,; echo "${REPLICA_PIDS[*]}") stats=$RUN/haproxy.sock"
    wait -n "${PIDS[@]}" || true  # until one of them exits, or this script is stopped
    exit 1
  fi
  sleep 0.5
done
echo "not ready within 90 s; logs in $RUN" >&2
tail -n 20 "$RUN"/*.log >&2
exit 1
