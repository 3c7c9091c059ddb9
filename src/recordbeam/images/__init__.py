"""Image work without Beam: cheap checks, transcoding, boxes and masks."""
