"""Fixtures shared by the unit tests."""

from __future__ import annotations

import pytest
from PIL import ImageFile


@pytest.fixture()
def decoded_sizes(monkeypatch) -> list[tuple[str, tuple[int, int]]]:
    """``(format, size)`` of every image Pillow decodes while the test runs, at the size
    it decodes it (after any DCT scaling)."""
    decoded = []
    prepare = ImageFile.ImageFile.load_prepare

    def recording_prepare(image):
        decoded.append((image.format, image.size))
        return prepare(image)

    monkeypatch.setattr(ImageFile.ImageFile, "load_prepare", recording_prepare)
    return decoded
