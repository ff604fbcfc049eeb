#!/bin/sh
# install-host.sh: installs libvgpu.so and its ld.so.preload file on a node (the DaemonSet's init
# container runs it against hostPath mounts; an operator may run it on a host directly).
#
#   install-host.sh --source DIR --target DIR [--state-dir DIR] [--preload-names PATH]
#
#   --source DIR         directory holding the libvgpu.so to install (in the image: /opt/vgpu/lib)
#   --target DIR         where the library goes on the host (the DaemonSet mounts the host's
#                        /usr/local/vgpu here). Created when its parent exists.
#   --state-dir DIR      optional: vgpu-node's state directory on the host; created 0755 with an
#                        empty node-wide board file (<dir>/board, 0666) when those are absent, so
#                        the container runtime finds a file (not a missing path) to bind-mount.
#   --preload-names PATH the library path written into <target>/ld.so.preload. This is the path
#                        INSIDE a container (where Allocate mounts the library), default
#                        /usr/local/vgpu/libvgpu.so. The file is mounted as the container's
#                        /etc/ld.so.preload; the host's own /etc/ld.so.preload is never touched.
#
# Files written: <target>/libvgpu.so (0755) and <target>/ld.so.preload (0644).
# A file whose content is already identical is left alone ("unchanged"); otherwise the new
# content is written to a temporary file in <target> and renamed over the old one (rename(2) is
# atomic: running processes keep the inode they mapped, new processes get the new file; no
# process ever sees a half-written library).
#
# Exit status: 0 done; 2 usage or a bad path (the message names it); 1 a failed write.
set -eu

prog=install-host.sh
source_dir=""
target_dir=""
state_dir=""
preload_names="/usr/local/vgpu/libvgpu.so"

die() {
  echo "$prog: error: $*" >&2
  exit 2
}
fail() {
  echo "$prog: error: $*" >&2
  exit 1
}
usage() {
  sed -n '2,/^set -eu/p' "$0" | sed -e '/^set -eu/d' -e 's/^# \{0,1\}//'
}

while [ $# -gt 0 ]; do
  case "$1" in
    --source) [ $# -ge 2 ] || die "--source needs a value"; source_dir=$2; shift 2 ;;
    --source=*) source_dir=${1#*=}; shift ;;
    --target) [ $# -ge 2 ] || die "--target needs a value"; target_dir=$2; shift 2 ;;
    --target=*) target_dir=${1#*=}; shift ;;
    --state-dir) [ $# -ge 2 ] || die "--state-dir needs a value"; state_dir=$2; shift 2 ;;
    --state-dir=*) state_dir=${1#*=}; shift ;;
    --preload-names) [ $# -ge 2 ] || die "--preload-names needs a value"; preload_names=$2; shift 2 ;;
    --preload-names=*) preload_names=${1#*=}; shift ;;
    -h | --help) usage; exit 0 ;;
    *) die "unknown argument \"$1\" (see --help)" ;;
  esac
done

[ -n "$source_dir" ] || die "--source is required"
[ -n "$target_dir" ] || die "--target is required"
case "$target_dir" in /*) ;; *) die "--target \"$target_dir\" is not an absolute path" ;; esac
case "$preload_names" in /*) ;; *) die "--preload-names \"$preload_names\" is not an absolute path" ;; esac
case "$preload_names" in *"
"*) die "--preload-names must be one line" ;; esac
[ -f "$source_dir/libvgpu.so" ] || die "--source \"$source_dir\": no libvgpu.so there"

# Every path is checked before anything is written.
if [ -n "$state_dir" ]; then
  case "$state_dir" in /*) ;; *) die "--state-dir \"$state_dir\" is not an absolute path" ;; esac
  if [ -e "$state_dir" ] && [ ! -d "$state_dir" ]; then die "--state-dir \"$state_dir\" exists and is not a directory"; fi
fi

# The target: an existing directory, or created inside an existing directory (never a whole tree:
# a missing parent usually means a wrong mount).
if [ -L "$target_dir" ]; then
  die "--target \"$target_dir\" is a symbolic link; refusing to write through it"
elif [ -e "$target_dir" ] && [ ! -d "$target_dir" ]; then
  die "--target \"$target_dir\" exists and is not a directory"
elif [ ! -e "$target_dir" ]; then
  parent=$(dirname "$target_dir")
  [ -d "$parent" ] || die "--target \"$target_dir\": parent directory \"$parent\" does not exist (is the host path mounted?)"
  mkdir -m 0755 "$target_dir" 2>/dev/null || die "--target \"$target_dir\": cannot create the directory"
  echo "$prog: created $target_dir"
fi
[ -w "$target_dir" ] || die "--target \"$target_dir\" is not writable"

# install_file SRC DEST MODE: skip when identical, else write a temporary file and rename it.
install_file() {
  src=$1
  dest=$2
  mode=$3
  if [ -L "$dest" ] || { [ -e "$dest" ] && [ ! -f "$dest" ]; }; then
    die "\"$dest\" exists and is not a regular file; refusing to replace it"
  fi
  if [ -f "$dest" ] && cmp -s "$src" "$dest"; then
    chmod "$mode" "$dest" || fail "cannot chmod \"$dest\""
    echo "$prog: unchanged $dest"
    return 0
  fi
  tmp="$dest.tmp.$$"
  rm -f "$tmp"
  if ! cp "$src" "$tmp" || ! chmod "$mode" "$tmp"; then
    rm -f "$tmp"
    fail "cannot write \"$tmp\""
  fi
  sync "$tmp" 2>/dev/null || sync
  if [ -f "$dest" ]; then verb=replaced; else verb=installed; fi
  mv -f "$tmp" "$dest" || { rm -f "$tmp"; fail "cannot rename \"$tmp\" to \"$dest\""; }
  echo "$prog: $verb $dest"
}

install_file "$source_dir/libvgpu.so" "$target_dir/libvgpu.so" 0755

# Staged in the target itself: the init container's root filesystem is read-only.
preload_tmp=$(mktemp "$target_dir/.ld.so.preload.new.XXXXXX") || fail "cannot write in \"$target_dir\""
trap 'rm -f "$preload_tmp"' EXIT
printf '%s\n' "$preload_names" >"$preload_tmp"
install_file "$preload_tmp" "$target_dir/ld.so.preload" 0644

if [ -n "$state_dir" ]; then
  if [ ! -d "$state_dir" ]; then
    mkdir -m 0755 "$state_dir" 2>/dev/null || die "--state-dir \"$state_dir\": cannot create the directory"
    echo "$prog: created $state_dir"
  fi
  board="$state_dir/board"
  if [ -L "$board" ] || { [ -e "$board" ] && [ ! -f "$board" ]; }; then
    die "\"$board\" exists and is not a regular file (remove it; the board is recreated)"
  elif [ ! -e "$board" ]; then
    # Empty: the first process that opens it sizes it and writes the header under flock
    # (src/ledger/board.h). An existing board is never touched: live processes map it.
    (umask 0 && : >"$board") || fail "cannot create \"$board\""
    chmod 0666 "$board" || fail "cannot chmod \"$board\""
    echo "$prog: created $board"
  else
    echo "$prog: unchanged $board"
  fi
fi
echo "$prog: done"
