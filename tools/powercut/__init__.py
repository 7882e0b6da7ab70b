"""A FUSE file system that loses, at a simulated power cut, every write that was not
fsynced (tools/powercut/fs.py); ``python -m tools.powercut`` serves it and
tools/powercut/mount.py drives it from a test."""
