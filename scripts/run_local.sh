#!/usr/bin/env bash
# `make run`: start the local platform, deploy examples/hello, run a few tasks
# over the SDK, REST (curl) and the CLI, print where everything is, then serve
# until Ctrl-C. The stop trap is set before anything starts, so Ctrl-C (or a
# TERM) at any moment stops whatever is up by then (`ratchet dev down`).
# Usage: scripts/run_local.sh VENV STATE_DIR
set -uo pipefail
VENV=$1
STATE_DIR=$2
RATCHET="$VENV/bin/ratchet"
PY="$VENV/bin/python"
ARGS=(--state-dir "$STATE_DIR")

stop() {
  # A second Ctrl-C while stopping must not leave half the platform up.
  trap '' INT TERM
  echo
  "$RATCHET" dev down "${ARGS[@]}"
  exit "${1:-0}"
}
trap 'stop 130' INT
trap 'stop 143' TERM
fail() { echo "make run: $*" >&2; stop 1; }

"$RATCHET" dev up --detach "${ARGS[@]}" || fail "the platform did not start (logs in $STATE_DIR/logs/)"

echo; echo '$ ratchet deploy examples/hello --app default'
"$RATCHET" deploy examples/hello --app default "${ARGS[@]}" | "$PY" -c 'import json,sys; d=json.load(sys.stdin); print("  deployed", d["digest"][:19] + "...", "handlers:", ", ".join(h["name"] for h in d["handlers"]))' \
  || fail "deploying examples/hello failed"

echo; "$PY" examples/demo.py "${ARGS[@]}" || fail "the demo failed"

eval "$("$RATCHET" dev env "${ARGS[@]}")"
echo
echo "Enqueueing over REST:"
echo "  \$ curl -X POST $RATCHET_REST/v1/tasks -H 'Authorization: Bearer ...' -d '{\"task_type\": \"greet\", \"payload\": {\"name\": \"curl\"}}'"
RESP=$(curl -sS --max-time 30 -X POST "$RATCHET_REST/v1/tasks" -H "Authorization: Bearer $RATCHET_API_KEY" \
  -H 'Content-Type: application/json' -d '{"task_type": "greet", "payload": {"name": "curl"}}') || fail "the REST enqueue failed"
echo "  $RESP"
TASK=$(echo "$RESP" | "$PY" -c 'import json,sys; print(json.load(sys.stdin)["task_id"])') || fail "the REST answer had no task_id"
echo "  \$ ratchet tasks wait $TASK"
"$RATCHET" tasks wait "$TASK" "${ARGS[@]}" | "$PY" -c 'import json,sys; d=json.load(sys.stdin); print("  ", d["state"], json.dumps(d["result"]))' \
  || fail "waiting for $TASK failed"

echo; "$RATCHET" dev status "${ARGS[@]}" | sed 's/^/  /'
echo
echo "Ratchet is serving (state in $STATE_DIR/, logs in $STATE_DIR/logs/):"
echo "  REST     $RATCHET_REST   (OpenAPI: $RATCHET_REST/openapi.json)"
echo "  gRPC     $RATCHET_ENDPOINT"
echo "  API key  $RATCHET_API_KEY"
echo "  Try:     eval \"\$($VENV/bin/ratchet dev env)\"; $VENV/bin/ratchet tasks enqueue greet --payload '{\"name\": \"you\"}' --wait 30"
echo "Press Ctrl-C to stop."
# `wait` on a background sleep returns at once when a signal arrives, so the
# trap runs without waiting out the sleep.
while true; do sleep 1 & wait $!; done
