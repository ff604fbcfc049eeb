#!/usr/bin/env bash
# Tests deploy/install-host.sh (the DaemonSet's init step) against temporary directories:
# fresh install, a re-run that skips unchanged files, an atomic replacement of a changed library
# (rename: a reader holding the old file keeps the old bytes), the state dir and board, and clear
# errors for bad paths.
set -euo pipefail

root=$(cd "$(dirname "$0")/../.." && pwd)
script="$root/deploy/install-host.sh"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
failures=0

fail() {
  echo "FAIL: $*" >&2
  failures=$((failures + 1))
}
expect_contains() {  # TEXT NEEDLE WHAT
  case "$1" in *"$2"*) ;; *) fail "$3: expected \"$2\" in: $1" ;; esac
}

mkdir -p "$work/src" "$work/host/usr/local"
printf 'library version 1\n' >"$work/src/libvgpu.so"
target="$work/host/usr/local/vgpu"

# 1. Fresh install: the target is created, both files written with their modes.
out=$("$script" --source "$work/src" --target "$target" --state-dir "$work/host/var-lib-vgpu" 2>&1)
echo "$out"
expect_contains "$out" "created $target" "fresh install"
expect_contains "$out" "installed $target/libvgpu.so" "fresh install"
expect_contains "$out" "installed $target/ld.so.preload" "fresh install"
cmp -s "$work/src/libvgpu.so" "$target/libvgpu.so" || fail "fresh install: library content differs"
[ "$(cat "$target/ld.so.preload")" = "/usr/local/vgpu/libvgpu.so" ] || fail "ld.so.preload content: $(cat "$target/ld.so.preload")"
[ "$(stat -c %a "$target/libvgpu.so")" = 755 ] || fail "library mode $(stat -c %a "$target/libvgpu.so")"
[ "$(stat -c %a "$target/ld.so.preload")" = 644 ] || fail "preload mode $(stat -c %a "$target/ld.so.preload")"
[ -f "$work/host/var-lib-vgpu/board" ] && [ ! -s "$work/host/var-lib-vgpu/board" ] || fail "board not created empty"
[ "$(stat -c %a "$work/host/var-lib-vgpu/board")" = 666 ] || fail "board mode $(stat -c %a "$work/host/var-lib-vgpu/board")"
[ "$(stat -c %a "$work/host/var-lib-vgpu")" = 755 ] || fail "state dir mode"

# 2. Re-run with the same files: nothing is rewritten (same inode, same mtime).
inode_before=$(stat -c %i "$target/libvgpu.so")
mtime_before=$(stat -c %Y.%y "$target/libvgpu.so")
preload_inode_before=$(stat -c %i "$target/ld.so.preload")
printf 'board in use\n' >"$work/host/var-lib-vgpu/board"
sleep 1.1
out=$("$script" --source "$work/src" --target "$target" --state-dir "$work/host/var-lib-vgpu" 2>&1)
echo "$out"
expect_contains "$out" "unchanged $target/libvgpu.so" "re-run"
expect_contains "$out" "unchanged $target/ld.so.preload" "re-run"
expect_contains "$out" "unchanged $work/host/var-lib-vgpu/board" "re-run"
[ "$(stat -c %i "$target/libvgpu.so")" = "$inode_before" ] || fail "re-run replaced the unchanged library"
[ "$(stat -c %Y.%y "$target/libvgpu.so")" = "$mtime_before" ] || fail "re-run rewrote the unchanged library"
[ "$(stat -c %i "$target/ld.so.preload")" = "$preload_inode_before" ] || fail "re-run replaced the unchanged preload file"
[ "$(cat "$work/host/var-lib-vgpu/board")" = "board in use" ] || fail "re-run touched an existing board"

# 3. A changed library replaces the old one by rename: a reader that opened the old file (as a
#    running process maps it) still reads the old bytes; the path has the new bytes; no
#    temporary file is left behind.
printf 'library version 2, longer than before\n' >"$work/src/libvgpu.so"
exec 3<"$target/libvgpu.so"
out=$("$script" --source "$work/src" --target "$target" 2>&1)
echo "$out"
expect_contains "$out" "replaced $target/libvgpu.so" "update"
expect_contains "$out" "unchanged $target/ld.so.preload" "update"
[ "$(stat -c %i "$target/libvgpu.so")" != "$inode_before" ] || fail "update: same inode (written in place, not renamed)"
[ "$(cat <&3)" = "library version 1" ] || fail "update: the open old file changed under its reader"
exec 3<&-
cmp -s "$work/src/libvgpu.so" "$target/libvgpu.so" || fail "update: new content not installed"
leftover=$(find "$target" -mindepth 1 ! -name libvgpu.so ! -name ld.so.preload | wc -l)
[ "$leftover" -eq 0 ] || fail "update: temporary files left: $(ls "$target")"

# 4. A different preload path (--preload-names) rewrites only ld.so.preload.
out=$("$script" --source "$work/src" --target "$target" --preload-names /opt/vgpu/libvgpu.so 2>&1)
expect_contains "$out" "unchanged $target/libvgpu.so" "preload names"
expect_contains "$out" "replaced $target/ld.so.preload" "preload names"
[ "$(cat "$target/ld.so.preload")" = "/opt/vgpu/libvgpu.so" ] || fail "preload names: $(cat "$target/ld.so.preload")"

# 5. Bad input: exit status 2 and a message naming the path.
expect_error() {  # WHAT NEEDLE ARGS...
  local what=$1 needle=$2
  shift 2
  local rc=0 text
  text=$("$script" "$@" 2>&1) || rc=$?
  [ "$rc" -eq 2 ] || fail "$what: exit status $rc, expected 2 (output: $text)"
  expect_contains "$text" "$needle" "$what"
  echo "ok: $what -> $text"
}
printf 'x' >"$work/a-file"
ln -s "$target" "$work/a-link"
expect_error "relative target" 'is not an absolute path' --source "$work/src" --target relative/dir
expect_error "target is a file" "\"$work/a-file\" exists and is not a directory" --source "$work/src" --target "$work/a-file"
expect_error "missing parent" "parent directory \"$work/no/such\" does not exist" --source "$work/src" --target "$work/no/such/vgpu"
expect_error "symlinked target" "is a symbolic link" --source "$work/src" --target "$work/a-link"
expect_error "missing library" "no libvgpu.so there" --source "$work/empty" --target "$target"
expect_error "no target" "--target is required" --source "$work/src"
expect_error "unknown argument" 'unknown argument "--bogus"' --source "$work/src" --target "$target" --bogus
expect_error "state dir is a file" "--state-dir \"$work/a-file\" exists and is not a directory" --source "$work/src" --target "$target" --state-dir "$work/a-file"
mkdir -p "$work/dir-target/libvgpu.so"
expect_error "library path is a directory" "exists and is not a regular file" --source "$work/src" --target "$work/dir-target"
[ ! -e "$work/no" ] || fail "missing parent: something was created"
[ "$(cat "$target/ld.so.preload")" = "/opt/vgpu/libvgpu.so" ] || fail "a refused run wrote files before checking its paths"

if [ "$failures" -ne 0 ]; then
  echo "install_host_test: $failures failure(s)" >&2
  exit 1
fi
echo "install_host_test: all passed"
