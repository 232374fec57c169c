#!/usr/bin/env python3
"""Packs a directory into a one-layer OCI image archive, without a container engine.

    ociarchive.py --rootfs DIR --name REF --out ARCHIVE [--entrypoint JSON] [--env K=V]...
                  [--user UID:GID] [--workdir DIR] [--expose PORT/PROTO]...
                  [--owner PATH=UID:GID]...

The archive is an OCI image layout (oci-layout, index.json, blobs) that also carries Docker's
manifest.json, so `ctr images import` and `docker load` read the same file. The layer is an
uncompressed tar with fixed timestamps: the same inputs give the same digests. Files belong to
root unless --owner gives a path (and what is under it) to another user.
"""

import argparse
import hashlib
import io
import json
import os
import tarfile


def layer(rootfs, owners):
    """The rootfs as tar bytes: sorted, mtime 0, root-owned except where owners says."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for dirpath, dirnames, filenames in os.walk(rootfs):
            dirnames.sort()
            for name in sorted(dirnames + filenames):
                path = os.path.join(dirpath, name)
                rel = os.path.relpath(path, rootfs)
                info = tar.gettarinfo(path, arcname=rel)
                info.mtime = 0
                info.uid, info.gid, info.uname, info.gname = 0, 0, "", ""
                for prefix, (uid, gid) in owners.items():
                    if rel == prefix or rel.startswith(prefix + "/"):
                        info.uid, info.gid = uid, gid
                if info.isfile():
                    with open(path, "rb") as f:
                        tar.addfile(info, f)
                else:
                    tar.addfile(info)
    return buf.getvalue()


def blob(tar, data):
    """Adds data as blobs/sha256/<hex>; returns its descriptor fields."""
    digest = hashlib.sha256(data).hexdigest()
    info = tarfile.TarInfo("blobs/sha256/" + digest)
    info.size, info.mtime = len(data), 0
    tar.addfile(info, io.BytesIO(data))
    return {"digest": "sha256:" + digest, "size": len(data)}


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--rootfs", required=True)
    p.add_argument("--name", required=True, help="e.g. localhost/compositor:0.1.0")
    p.add_argument("--out", required=True)
    p.add_argument("--entrypoint", default="[]", help="a JSON list")
    p.add_argument("--cmd", default="[]", help="a JSON list")
    p.add_argument("--env", action="append", default=[])
    p.add_argument("--user", default="")
    p.add_argument("--workdir", default="")
    p.add_argument("--expose", action="append", default=[])
    p.add_argument("--owner", action="append", default=[], help="PATH=UID:GID")
    a = p.parse_args()

    owners = {}
    for spec in a.owner:
        path, ids = spec.split("=", 1)
        uid, gid = ids.split(":")
        owners[path.strip("/")] = (int(uid), int(gid))
    layer_tar = layer(a.rootfs, owners)
    diff_id = "sha256:" + hashlib.sha256(layer_tar).hexdigest()
    config = {"Env": a.env}
    if json.loads(a.entrypoint):
        config["Entrypoint"] = json.loads(a.entrypoint)
    if json.loads(a.cmd):
        config["Cmd"] = json.loads(a.cmd)
    if a.user:
        config["User"] = a.user
    if a.workdir:
        config["WorkingDir"] = a.workdir
    if a.expose:
        config["ExposedPorts"] = {port: {} for port in a.expose}
    image_config = {
        "architecture": "amd64",
        "os": "linux",
        "created": "1970-01-01T00:00:00Z",
        "config": config,
        "rootfs": {"type": "layers", "diff_ids": [diff_id]},
        "history": [{"created": "1970-01-01T00:00:00Z", "created_by": "e2e/ociarchive.py"}],
    }
    # A tag without a registry would be read by docker as docker.io/library/...; keep it as given.
    tag = a.name.rsplit(":", 1)[1] if ":" in a.name.rsplit("/", 1)[-1] else "latest"

    tmp = a.out + ".tmp"
    with tarfile.open(tmp, mode="w", format=tarfile.PAX_FORMAT) as tar:
        layer_desc = blob(tar, layer_tar)
        config_desc = blob(tar, json.dumps(image_config, sort_keys=True).encode())
        manifest = {
            "schemaVersion": 2,
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "config": {"mediaType": "application/vnd.oci.image.config.v1+json", **config_desc},
            "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar", **layer_desc}],
        }
        manifest_desc = blob(tar, json.dumps(manifest, sort_keys=True).encode())
        index = {
            "schemaVersion": 2,
            "mediaType": "application/vnd.oci.image.index.v1+json",
            "manifests": [{
                "mediaType": "application/vnd.oci.image.manifest.v1+json",
                **manifest_desc,
                "platform": {"architecture": "amd64", "os": "linux"},
                "annotations": {
                    "io.containerd.image.name": a.name,
                    "org.opencontainers.image.ref.name": tag,
                },
            }],
        }
        docker_manifest = [{
            "Config": "blobs/sha256/" + config_desc["digest"].split(":")[1],
            "RepoTags": [a.name],
            "Layers": ["blobs/sha256/" + layer_desc["digest"].split(":")[1]],
        }]
        for name, value in [
            ("oci-layout", {"imageLayoutVersion": "1.0.0"}),
            ("index.json", index),
            ("manifest.json", docker_manifest),
        ]:
            data = json.dumps(value).encode()
            info = tarfile.TarInfo(name)
            info.size, info.mtime = len(data), 0
            tar.addfile(info, io.BytesIO(data))
    os.replace(tmp, a.out)


if __name__ == "__main__":
    main()
