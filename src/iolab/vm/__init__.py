"""The VM lab: a built-in guest, its agent and channel, and QEMU from start to reaped.

guest_image  builds/caches the kernel + initramfs (cpio.py writes the archive)
guest/       agent.c and init.sh, shipped into the guest
protocol     the framed virtio-serial protocol (host side)
executor     GuestExecutor: iolab.core.exec.Executor through the agent
disk         the test disk's axes (DiskSpec, cache flags) and the LUKS key (Secret)
image        qemu-img create/info and the qemu-io prefill of the disk image
cmdline      VmSpec, NetSpec and the QEMU argv built from them
accel        KVM or TCG: the boot probe, its cache, the forced choices
qmp          QMP through qemu.qmp, with a bounded connect
lifecycle    QemuVM: ledger entry, start to the agent's hello, shutdown, reap
guest_setup  steps run in a booted guest: find the disk, mkfs + mount, network
cleanup      the ledger cleaner for kind "process" (tagged QEMU processes)
errors       VmError
See docs/vm.md.
"""
