"""COCO: an instances (detection), person keypoints or LVIS JSON, and/or a captions JSON,
+ a folder of images. The reader is :mod:`recordbeam.sources.coco.reader`."""
