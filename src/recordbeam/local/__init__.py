"""The local runner: the only package that touches Beam's runner internals, behind
one version check (``internals``)."""
