"""A real S3 API on 127.0.0.1 (moto's server) holding the benchmark's datasets, read through s3fs as users read a
bucket: the ``s3`` place of ``roboreel bench read --s3``.

The server runs in this process on an OS-chosen port; the usual AWS variables (credentials, region, endpoint) are
set for the length of the run, so every reader process (isolated runs, DataLoader workers) reaches it the way a
training job reaches its object store. The host's own AWS configuration is hidden meanwhile, so nothing can reach
AWS. What it measures is the S3 protocol's cost on loopback (signed requests, XML listings, one range GET per
shard read), not a network: add a real bucket's round trip on top.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path

BUCKET = "roboreel-bench"
_ENV = {"AWS_ACCESS_KEY_ID": "roboreel-bench-key", "AWS_SECRET_ACCESS_KEY": "roboreel-bench-secret",
        "AWS_DEFAULT_REGION": "us-east-1", "AWS_CONFIG_FILE": "/nonexistent/roboreel-aws-config",
        "AWS_SHARED_CREDENTIALS_FILE": "/nonexistent/roboreel-aws-credentials", "AWS_EC2_METADATA_DISABLED": "true"}
_HIDDEN = ("AWS_SESSION_TOKEN", "AWS_PROFILE", "AWS_DEFAULT_PROFILE", "AWS_ENDPOINT_URL_S3")


@contextlib.contextmanager
def _environment(endpoint: str) -> Iterator[None]:
    """The AWS variables pointing at ``endpoint``, restored on exit."""
    saved = {k: os.environ.get(k) for k in (*_ENV, *_HIDDEN, "AWS_ENDPOINT_URL")}
    try:
        for k in _HIDDEN:
            os.environ.pop(k, None)
        os.environ.update(_ENV, AWS_ENDPOINT_URL=endpoint)
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


@contextlib.contextmanager
def served_s3(datasets: dict[str, str]) -> Iterator[dict[str, str]]:
    """Upload each local folder of ``datasets`` (name -> path) to ``s3://BUCKET/name`` on a loopback S3 server and
    yield name -> URL; the server stops and the environment is restored on exit."""
    try:
        import s3fs
        from moto.server import ThreadedMotoServer
    except ImportError as e:
        raise RuntimeError(f"--s3 needs moto's server and s3fs ({e}): pip install 'moto[server]' s3fs "
                           "(both are in roboreel's dev extras)") from e
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    endpoint = f"http://{host}:{port}"
    try:
        with _environment(endpoint):
            s3fs.S3FileSystem.clear_instance_cache()
            fs = s3fs.S3FileSystem(skip_instance_cache=True)
            fs.mkdir(BUCKET)
            urls = {}
            for name, local in datasets.items():
                root = Path(local)
                for f in sorted(p for p in root.rglob("*") if p.is_file()):
                    fs.put_file(str(f), f"{BUCKET}/{name}/{f.relative_to(root).as_posix()}")
                urls[name] = f"s3://{BUCKET}/{name}"
            yield urls
    finally:
        server.stop()
        s3fs.S3FileSystem.clear_instance_cache()
