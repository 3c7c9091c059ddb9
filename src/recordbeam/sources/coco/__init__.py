"""COCO: an instances (detection), person keypoints or LVIS JSON, and/or a captions JSON,
+ a folder of images. The reader is :mod:`recordbeam.sources.coco.reader`; the modules
beside it hold its roles: ``json_stream`` (reading the JSON), ``checks`` (each item),
``input_tasks`` (the first stage), ``join`` (by file name, then by image id), ``labels``
(categories as written), ``encoder`` and ``records`` (what the stages hand each other)."""
