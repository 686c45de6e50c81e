"""`python -m iolab`: the same command as `iolab`."""

from iolab.entry import main

main()
