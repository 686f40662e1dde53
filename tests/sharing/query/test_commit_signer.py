"""The change feed's per-commit signer gives a file one URL even when batches of the same
commit are signed at once on the formatting pool (sharing.query.batch_pipeline).

A Delta reader pairs a commit's remove and add of one file (its deletion vector replaced)
by path; two URLs for that file make it read a whole-file delete and insert instead of the
rows that changed (tests/clients/test_cdf_client.py, table `cdc_and_dvs`, failed that way
now and then). The race needs the first signing to still be running when the second
starts; a real LocalSigner made to pause inside `sign` forces that order (the pause is the
only stand-in: no real signer is slow on demand).
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor

from sharing.presign.base import SignedUrls
from sharing.presign.local import LocalSigner, TableRef, UrlHolder
from sharing.query.changes import _CommitSigner

ROOT = "/data/table"


class _PausingSigner(LocalSigner):
    """Signs like LocalSigner after a pause the first time (as a batch being signed while
    the next batch of the commit starts on another thread)."""

    def __init__(self) -> None:
        super().__init__(
            secret="secret-for-commit-signer",
            base_url="http://lakeshare.test/",
            endpoint="/delta-sharing",
            table=TableRef("s", "d", "t"),
            table_root=ROOT,
            ttl_seconds=900,
            holder=UrlHolder("recipient"),
        )
        self.calls = 0
        self._second = threading.Event()

    def sign(self, keys: Sequence[str]) -> SignedUrls:
        self.calls += 1
        if self.calls == 1:
            self._second.wait(0.3)  # the other batch enters here unless it is held back
        else:
            self._second.set()
        return super().sign(keys)


def test_one_url_per_file_when_a_commits_batches_sign_concurrently() -> None:
    inner = _PausingSigner()
    signer = _CommitSigner(inner)
    key = f"{ROOT}/part-00000.parquet"
    with ThreadPoolExecutor(max_workers=2) as pool:
        adds = pool.submit(signer.sign, [key])
        removes = pool.submit(signer.sign, [key, f"{ROOT}/deletion_vector_1.bin"])
        add_url, remove_url = adds.result().urls[0], removes.result().urls[0]
    assert add_url == remove_url
