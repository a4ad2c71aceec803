#!/usr/bin/env bash
# End-to-end tests on a kind cluster: build the image, create a cluster, install the
# chart with the bundled PostgreSQL, apply the example ScheduledJobs, run the example
# worker in the cluster as its ServiceAccount, and check (e2e/check.py) that cron,
# delayed and failing runs reach their states, that a container job's run is one Job
# per attempt (the chart's job-runner, a real Job controller and real pods), that
# killing a scheduler pod loses nothing and that killing the leading operator pod
# hands over to the standby; then
# that the chart renders the same twice, that an upgrade with the same values changes
# neither the migration Job nor the Secrets drawn at install, and that an uninstall
# leaves no ScheduledJob held by the operator's finalizer. Needs docker (a running
# daemon), kind, kubectl and helm; without them it says what is missing and exits 2.
#
#   make e2e                      # everything, then delete the cluster
#   E2E_KEEP=1 make e2e           # keep the cluster afterwards (kubectl --context kind-tickwork-e2e)
set -euo pipefail

cd "$(dirname "$0")/.."
CLUSTER="${E2E_CLUSTER:-tickwork-e2e}"
IMAGE="${E2E_IMAGE:-tickwork:e2e}"
NAMESPACE=tickwork
RELEASE=tw
PYTHON="${PYTHON:-python3}"

missing=()
for tool in docker kind kubectl helm "$PYTHON"; do
  command -v "$tool" >/dev/null 2>&1 || missing+=("$tool")
done
if ((${#missing[@]})); then
  echo "make e2e needs ${missing[*]} on PATH (and a running Docker daemon); nothing was run" >&2
  exit 2
fi
if ! docker info >/dev/null 2>&1; then
  echo "make e2e needs a running Docker daemon (docker info failed); nothing was run" >&2
  exit 2
fi

log() { printf '\n== %s\n' "$*"; }

log "building $IMAGE"
docker build -f operator/Dockerfile -t "$IMAGE" .

if ! kind get clusters | grep -qx "$CLUSTER"; then
  log "creating kind cluster $CLUSTER"
  kind create cluster --name "$CLUSTER" --wait 120s
fi
cleanup() {
  if [[ -z "${E2E_KEEP:-}" ]]; then
    log "deleting kind cluster $CLUSTER"
    kind delete cluster --name "$CLUSTER"
  fi
}
trap cleanup EXIT
export KUBECONFIG="${KUBECONFIG_E2E:-$(mktemp)}"
kind get kubeconfig --name "$CLUSTER" >"$KUBECONFIG"
kind load docker-image "$IMAGE" --name "$CLUSTER"

VALUES=(
  --set image.repository="${IMAGE%%:*}" --set image.tag="${IMAGE##*:}"
  --set image.pullPolicy=Never
  --set postgresql.enabled=true --set postgresql.persistence.enabled=false
  --set shards=4 --set scheduler.replicas=2
  --set dispatcher.autoscaling.enabled=false --set dispatcher.replicas=1
  --set logFormat=json
  --set-json 'teams=[{"namespace":"default","serviceAccount":"example-worker","queues":["default","billing"]}]'
  --set jobRunner.enabled=true --set-json 'jobRunner.namespaces=["default"]'
)

log "installing the chart"
helm upgrade --install "$RELEASE" charts/tickwork \
  --namespace "$NAMESPACE" --create-namespace "${VALUES[@]}" --wait --timeout 10m

log "applying the examples and starting the example worker"
# The chart's NetworkPolicies let the namespaces labelled for workers call the
# dispatcher (the teams' namespaces too; the label is what other namespaces need).
kubectl label namespace default tickwork.dev/workers=true --overwrite
kubectl apply -f examples/jobs/
kubectl -n default create configmap example-worker --from-file=worker.py=examples/worker.py \
  --dry-run=client -o yaml | kubectl apply -f -
sed -e "s|IMAGE|$IMAGE|" -e "s|DISPATCHER|http://$RELEASE-tickwork-dispatcher.$NAMESPACE.svc|" \
  e2e/worker.yaml | kubectl apply -f -
kubectl -n default rollout status deployment/example-worker --timeout 180s
sed -e "s|IMAGE|$IMAGE|" e2e/container-job.yaml | kubectl apply -f -
kubectl -n default rollout status "deployment/$RELEASE-tickwork-job-runner-$NAMESPACE" --timeout 180s

log "checking runs"
"$PYTHON" e2e/check.py --namespace "$NAMESPACE" --release "$RELEASE"

log "rendering the chart twice: what a GitOps tool compares must not change"
render() { helm template "$RELEASE" charts/tickwork --namespace "$NAMESPACE" "${VALUES[@]}"; }
if ! diff <(render) <(render) >/dev/null; then
  echo "two renders of the same values differ" >&2
  exit 1
fi

log "upgrading with the same values: the same migration Job, the same Secrets"
state() {
  kubectl -n "$NAMESPACE" get jobs -l app.kubernetes.io/component=migrate -o name
  kubectl -n "$NAMESPACE" get secrets -l "tickwork.dev/release=$RELEASE" \
    -o jsonpath='{range .items[*]}{.metadata.name} {.metadata.resourceVersion}{"\n"}{end}'
}
before=$(state)
helm upgrade "$RELEASE" charts/tickwork --namespace "$NAMESPACE" "${VALUES[@]}" --wait --timeout 10m
if [[ "$(state)" != "$before" ]]; then
  printf 'the upgrade changed the migration Job or a drawn Secret:\n%s\n---\n%s\n' "$before" "$(state)" >&2
  exit 1
fi

log "uninstalling: no ScheduledJob may stay held by the operator's finalizer"
helm uninstall "$RELEASE" --namespace "$NAMESPACE" --wait --timeout 10m
held=$(kubectl get sj -A -o jsonpath='{range .items[*]}{.metadata.namespace}/{.metadata.name} {.metadata.finalizers}{"\n"}{end}' |
  grep -c 'tickwork.dev/finalizer' || true)
if ((held)); then
  echo "$held ScheduledJob(s) still hold tickwork.dev/finalizer after the uninstall" >&2
  exit 1
fi
kubectl delete -f examples/jobs/ --timeout 60s
kubectl -n default delete scheduledjob e2e-container --timeout 60s
log "end-to-end tests passed"
