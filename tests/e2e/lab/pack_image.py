#!/usr/bin/env python3
"""Packs a container image as a docker archive (the format `docker save` writes and
`ctr images import` reads) without a container engine or a registry.

The image is a base layer (a tar of a root filesystem, e.g. from debootstrap) plus one layer with
the files given by --add, and a config with the entrypoint, environment and working directory.

  pack_image.py --out node.tar --tag docker.io/vgpu-lab/vgpu-node:e2e --base rootfs.tar \
      --add build/vgpu-node:/opt/vgpu/bin/vgpu-node:0755 --env PATH=/opt/vgpu/bin:/usr/bin:/bin \
      --entrypoint /opt/vgpu/bin/vgpu-node

Layers are plain (uncompressed) tars; their sha256 is the diff id. Files of the added layer are
owned by root with the given mode and a fixed mtime, so the same inputs give the same image id.
"""
import argparse
import hashlib
import io
import json
import os
import sys
import tarfile

FIXED_MTIME = 0


def parse_add(text):
    """SRC:DEST[:MODE] -> (src, dest, mode or None)."""
    parts = text.split(":")
    if len(parts) not in (2, 3) or not parts[0] or not parts[1].startswith("/"):
        raise argparse.ArgumentTypeError(f"--add {text!r}: expected SRC:/absolute/DEST[:octal mode]")
    mode = None
    if len(parts) == 3:
        try:
            mode = int(parts[2], 8)
        except ValueError:
            raise argparse.ArgumentTypeError(f"--add {text!r}: mode {parts[2]!r} is not octal")
    if not os.path.isfile(parts[0]):
        raise argparse.ArgumentTypeError(f"--add {text!r}: {parts[0]} is not a file")
    return parts[0], parts[1], mode


def added_layer(adds):
    """A tar (bytes) holding every --add file and the directories above it."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as tar:
        made = set()
        for src, dest, mode in adds:
            parts = dest.strip("/").split("/")
            for depth in range(1, len(parts)):
                directory = "/".join(parts[:depth])
                if directory in made:
                    continue
                made.add(directory)
                info = tarfile.TarInfo(directory)
                info.type = tarfile.DIRTYPE
                info.mode = 0o755
                info.mtime = FIXED_MTIME
                tar.addfile(info)
            with open(src, "rb") as f:
                data = f.read()
            info = tarfile.TarInfo("/".join(parts))
            info.size = len(data)
            info.mode = mode if mode is not None else (os.stat(src).st_mode & 0o777)
            info.mtime = FIXED_MTIME
            tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def sha256_file(path):
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", required=True, help="docker archive to write")
    parser.add_argument("--tag", required=True, help="full image reference, e.g. docker.io/vgpu-lab/vgpu-node:e2e")
    parser.add_argument("--base", help="tar of the root filesystem (first layer); none: only the added files")
    parser.add_argument("--add", type=parse_add, action="append", default=[], help="SRC:DEST[:MODE], repeatable")
    parser.add_argument("--env", action="append", default=[], help="NAME=VALUE, repeatable")
    parser.add_argument("--entrypoint", action="append", default=[], help="entrypoint argument, repeatable")
    parser.add_argument("--workdir", default="/")
    args = parser.parse_args()
    for env in args.env:
        if "=" not in env or env.startswith("="):
            parser.error(f"--env {env!r}: expected NAME=VALUE")
    if args.base and not os.path.isfile(args.base):
        parser.error(f"--base {args.base}: not a file")
    if not args.base and not args.add:
        parser.error("nothing to pack: give --base and/or --add")

    layers = []  # (diff id hex, path or bytes)
    if args.base:
        layers.append((sha256_file(args.base), args.base))
    if args.add:
        data = added_layer(args.add)
        layers.append((hashlib.sha256(data).hexdigest(), data))

    config = {
        "architecture": "amd64",
        "os": "linux",
        "config": {"Env": args.env, "WorkingDir": args.workdir},
        "rootfs": {"type": "layers", "diff_ids": [f"sha256:{d}" for d, _ in layers]},
        "history": [{"created_by": "tests/e2e/lab/pack_image.py"} for _ in layers],
    }
    if args.entrypoint:
        config["config"]["Entrypoint"] = args.entrypoint
    config_bytes = json.dumps(config, sort_keys=True, separators=(",", ":")).encode()
    config_name = hashlib.sha256(config_bytes).hexdigest() + ".json"
    manifest = [{"Config": config_name, "RepoTags": [args.tag], "Layers": [f"{d}/layer.tar" for d, _ in layers]}]

    tmp = args.out + ".tmp"
    with tarfile.open(tmp, mode="w", format=tarfile.PAX_FORMAT) as out:
        def put(name, data=None, path=None):
            info = tarfile.TarInfo(name)
            info.mtime = FIXED_MTIME
            info.mode = 0o644
            if path is not None:
                info.size = os.path.getsize(path)
                with open(path, "rb") as f:
                    out.addfile(info, f)
            else:
                info.size = len(data)
                out.addfile(info, io.BytesIO(data))

        for digest, content in layers:
            directory = tarfile.TarInfo(digest)
            directory.type = tarfile.DIRTYPE
            directory.mode = 0o755
            directory.mtime = FIXED_MTIME
            out.addfile(directory)
            if isinstance(content, bytes):
                put(f"{digest}/layer.tar", data=content)
            else:
                put(f"{digest}/layer.tar", path=content)
        put(config_name, data=config_bytes)
        put("manifest.json", data=json.dumps(manifest, separators=(",", ":")).encode())
    os.replace(tmp, args.out)
    print(f"pack_image: {args.out}: {args.tag}, {len(layers)} layer(s), image id sha256:{config_name[:-5]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
