#!/bin/busybox sh
# iolab guest init (PID 1): mount the API filesystems, load the storage drivers in the
# dependency order the host computed from modules.dep, then become the agent.
# Everything the host needs comes back over virtio-serial, never over this console.
/bin/busybox --install -s /bin
# real binaries added to the image win over busybox applets of the same name
export PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev 2>/dev/null
mkdir -p /dev/pts /dev/shm /run /tmp /mnt
mount -t devpts devpts /dev/pts
mount -t tmpfs tmpfs /dev/shm
mount -t tmpfs tmpfs /run
mount -t cgroup2 cgroup2 /sys/fs/cgroup 2>/dev/null
mount -t debugfs debugfs /sys/kernel/debug 2>/dev/null
ln -sf /proc/self/mounts /etc/mtab
# the loopback interface, as any Linux system has it: Java's networking (YCSB) refuses to start without one
ifconfig lo 127.0.0.1 up 2>/dev/null
kver=$(uname -r)
# iolab_modules=virtio-blk,ext4 on the kernel command line names the module groups to load
groups="base $(echo "${iolab_modules:-}" | tr ',' ' ')"
[ -n "${iolab_modules:-}" ] || groups=$(cd /etc/iolab && ls modules.* | sed 's/^modules\.//')
loaded=" "
for g in $groups; do
    [ -f "/etc/iolab/modules.$g" ] || { echo "iolab-init: unknown module group $g" >/dev/kmsg; continue; }
    while read -r mod; do
        case "$loaded" in *" $mod "*) continue ;; esac
        [ -n "$mod" ] || continue
        loaded="$loaded$mod "
        insmod "/lib/modules/$kver/$mod" 2>/dev/null || echo "iolab-init: insmod $mod failed" >/dev/kmsg
    done <"/etc/iolab/modules.$g"
done
echo "iolab-init: modules loaded, starting agent" >/dev/kmsg
exec /sbin/iolab-agent
