#!/usr/bin/env bash
# Fetch the pinned upstream files the tests and benchmarks read, for use outside the development
# workplace (where ../shared is provided).  Usage: tools/fetch-shared.sh DIR ; then
# export QUEUEPILOT_SHARED=DIR.  Same commits as shared/crds/*/SOURCE.md and shared/traces/SOURCE.md.
set -euo pipefail
out=${1:-.shared}
KUEUE=ff69552e79ad21652c36caa97038382e55625cf7
KUBERAY=59d663aeec13760646da3db9c1cf8cfe883e30b7
ADAPTDL=c793c7089bd307462686339d29707925c461f9a9
raw=https://raw.githubusercontent.com
get() { mkdir -p "$(dirname "$2")"; curl -fsSL --retry 3 -o "$2" "$1"; echo "fetched $2"; }
for kind in workloads clusterqueues localqueues admissionchecks resourceflavors workloadpriorityclasses cohorts; do
  get "$raw/kubernetes-sigs/kueue/$KUEUE/config/components/crd/bases/kueue.x-k8s.io_$kind.yaml" "$out/crds/kueue/kueue.x-k8s.io_$kind.yaml"
done
for kind in rayclusters rayjobs rayservices; do
  get "$raw/ray-project/kuberay/$KUBERAY/ray-operator/config/crd/bases/ray.io_$kind.yaml" "$out/crds/kuberay/ray.io_$kind.yaml"
done
get "$raw/petuum/adaptdl/$ADAPTDL/simulator/traces/philly.csv" "$out/traces/philly-pollux/philly.csv"
echo "sha256 of the Philly trace must be ebffb3dd1589bdf4e7bcd74496201c5ded1d557d498ee14f560463f37ec353da:"
sha256sum "$out/traces/philly-pollux/philly.csv"
echo "Ray API fixtures (fixtures/ray) are recordings, not upstream files: record them with tests/ray (see docs/controller.md)."
