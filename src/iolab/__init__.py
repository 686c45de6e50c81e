"""iolab: a performance lab for the Linux storage stack across virtualization layers."""

__version__ = "0.1.0"
