"""The VM lab: a built-in guest, its agent and channel, and the QEMU launcher.

guest_image  builds/caches the kernel + initramfs (cpio.py writes the archive)
guest/       agent.c and init.sh, shipped into the guest
protocol     the framed virtio-serial protocol (host side)
executor     GuestExecutor: iolab.core.exec.Executor through the agent
qemu         accel probe, validated disk/VM specs, command line, QMP, QemuVM
cleanup      the ledger cleaner for kind "process" (tagged QEMU processes)

See docs/vm.md.
"""
