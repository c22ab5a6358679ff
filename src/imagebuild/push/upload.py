"""An image the engine holds as the push wants it (push/asheld.py: its own zstd manifest and blobs) written to the
registry by digest from this process: each blob the registry lacks in one streamed PUT, side by side, then the
manifest by its digest; no tag moves (issue 44: push from where the bytes are).

skopeo still sends what push/compress.py compressed (the classic store's images, gzip on request); for an image
already in its final form it only read each file again, hashed it again and copied it through its own process:
0.6-0.7 s of a 370 MB runtime's 1.7 s upload on this machine (bench/loop-cpu.md, round 23). Here every byte was
hashed against its descriptor as it was put into the layout (`Prepared.fill`), the registry checks each blob's
digest as it stores it, and push/pusher.py asks it for the manifest's digest afterwards, as after skopeo.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

from imagebuild.oci import RegistryClient
from imagebuild.push.compress import Prepared

SIDE_BY_SIDE = 4  # blobs in flight at once (containers/image and the engine send a few at a time too)


def send_held(client: RegistryClient, repository: str, prepared: Prepared, blobs: list[tuple[str, int]]) -> None:
    """`blobs` (digest, size) of `prepared`'s layout into `repository`, then its manifest by digest. The first
    RegistryError (RegistryAuthError) of any blob is raised once the others have ended; no manifest then."""
    if blobs:
        with ThreadPoolExecutor(max_workers=min(SIDE_BY_SIDE, len(blobs)), thread_name_prefix="imagebuild-upload") \
                as pool:
            sent = [pool.submit(client.put_blob, repository, digest, prepared.layout / digest.removeprefix("sha256:"),
                                size) for digest, size in blobs]
            for one in sent:
                one.result()
    client.put_manifest(repository, prepared.digest, prepared.manifest, prepared.media_type)
