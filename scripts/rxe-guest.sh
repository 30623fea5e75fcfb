#!/usr/bin/env bash
# rxe-guest.sh - run a command in a throw-away virtual machine that has a
# soft-RoCE (rxe) RDMA device, over this checkout, and return its exit status.
#
# Why a virtual machine: soft-RoCE is the kernel module rdma_rxe, and a host
# (or container) whose kernel lacks it cannot load it. The guest boots
# Debian's own kernel (linux-image-amd64, which builds rdma_rxe as a module)
# under QEMU's software CPU (TCG: it works where KVM cannot boot a stock
# kernel, e.g. under PVM), with no disk image: the host's / is shared
# read-only over virtio-9p as the lower layer of an overlayfs (a tmpfs on
# top), so the guest runs the host's own Python, virtual environment and
# build. The checkout is shared writable at the same path. eth0 is QEMU user
# networking (10.0.2.15/24) and rxe0 runs on it.
#
# Everything is slow in the guest (a software CPU, ~5-20x): it proves
# function, never speed.
#
# Usage: rxe-guest.sh [options] [--] COMMAND [ARG...]
#        rxe-guest.sh --check      can this machine run the guest? (exit 0 or 126)
#        rxe-guest.sh --prepare    install, download and build the cache only
# Options:
#   --timeout SEC   the whole run, boot included (default 600); then 124
#   --cpus N        virtual CPUs (default 2; TCG is heavy, keep it small)
#   --mem MB        guest memory (default 4096)
#   --cwd DIR       directory the command starts in (default: the current one,
#                   which must be inside the checkout or a path the guest sees)
#   --env NAME      pass the host's $NAME into the command (repeatable); PATH,
#                   VIRTUAL_ENV and every SLASH_* variable are passed anyway
#   --verbose       show the guest's kernel and init messages
#   --net BACKEND   QEMU's -netdev backend for eth0 in place of user
#                   networking, e.g. socket,listen=:PORT or
#                   socket,connect=127.0.0.1:PORT: guests on one virtual
#                   network (scripts/rxe-two-hosts.sh); no route out then
#   --index I       the guest's number on that network: eth0 is
#                   10.0.2.(15+I)/24 with MAC 52:54:00:12:34:(56+I) (default 0)
# Exit status: the command's own, or
#   124  the run did not finish within --timeout (the guest was killed)
#   125  the guest failed: did not boot, no rxe device, or died before the
#        command's status came back
#   126  this machine cannot run the guest (why is printed): no QEMU and no
#        way to install it, or no kernel package reachable
#
# Cache: ${SLASH_RXE_CACHE:-~/.cache/slash/rxe-guest}/KERNEL-VERSION holds
# the unpacked kernel and the initramfs; it is rebuilt when this script
# changes or the kernel package does. Host packages come from apt-get.
set -euo pipefail

PROG=$(basename "$0")
SELF=$(readlink -f "$0")
ROOT=$(cd "$(dirname "$SELF")/.." && pwd)
CACHE=${SLASH_RXE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/slash/rxe-guest}
TIMEOUT=600
CPUS=2
MEM=4096
CWD=$PWD
VERBOSE=0
MODE=run
PASS_ENV=()
NET=user
INDEX=0

# the modules the guest loads, in an order modprobe --show-depends expands
GUEST_MODULES="virtio_pci virtio_net 9pnet_virtio 9p overlay rdma_rxe rdma_ucm ib_umad crc32_generic"
HOST_PACKAGES="qemu-system-x86 busybox-static kmod cpio rdma-core ibverbs-providers ibverbs-utils iproute2"

log() { echo "$PROG: $*" >&2; }
cannot() { log "cannot run the soft-RoCE guest on this machine: $*"; exit 126; }
guest_failed() { log "the guest failed: $*"; exit 125; }

usage() { sed -n '2,/^set -euo/p' "$SELF" | sed -e '$d' -e 's/^# \{0,1\}//'; }

while [ $# -gt 0 ]; do
    case "$1" in
        -h|--help) usage; exit 0 ;;
        --check) MODE=check ;;
        --prepare) MODE=prepare ;;
        --timeout) TIMEOUT=$2; shift ;;
        --cpus) CPUS=$2; shift ;;
        --mem) MEM=$2; shift ;;
        --cwd) CWD=$2; shift ;;
        --env) PASS_ENV+=("$2"); shift ;;
        --verbose) VERBOSE=1 ;;
        --net) NET=$2; shift ;;
        --index) INDEX=$2; shift ;;
        --) shift; break ;;
        -*) usage >&2; log "unknown option: $1"; exit 2 ;;
        *) break ;;
    esac
    shift
done
[[ "$TIMEOUT" =~ ^[0-9]+$ && "$CPUS" =~ ^[0-9]+$ && "$MEM" =~ ^[0-9]+$ && "$INDEX" =~ ^[0-9]+$ ]] &&
    [ "$INDEX" -lt 40 ] ||
    { log "--timeout, --cpus, --mem and --index (under 40) take whole numbers"; exit 2; }
if [ "$MODE" = run ] && [ $# -eq 0 ]; then
    usage >&2
    exit 2
fi

# ---- host packages -----------------------------------------------------------

missing_packages() {
    local p out=()
    for p in $HOST_PACKAGES; do
        dpkg -s "$p" >/dev/null 2>&1 || out+=("$p")
    done
    echo "${out[*]:-}"
}

ensure_host() {
    [ "$(uname -m)" = x86_64 ] || cannot "the guest is x86_64 and this machine is $(uname -m)"
    command -v apt-get >/dev/null 2>&1 || cannot "no apt-get (the guest is built from Debian packages)"
    local miss
    miss=$(missing_packages)
    if [ -n "$miss" ]; then
        local sudo=""
        if [ "$(id -u)" != 0 ]; then
            sudo -n true 2>/dev/null || cannot "packages missing ($miss) and no root to install them"
            sudo="sudo -n"
        fi
        log "apt-get install $miss"
        local tries=0
        # another apt-get may hold the lock: wait for it rather than fail
        until DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends \
                $miss >/dev/null 2>"$CACHE.apt.err"; do
            tries=$((tries + 1))
            if grep -q "lock" "$CACHE.apt.err" && [ $tries -lt 60 ]; then
                sleep 5
                continue
            fi
            if [ $tries -eq 1 ] || [ $tries -lt 3 ]; then
                $sudo apt-get update -qq >/dev/null 2>&1 || true
                continue
            fi
            cannot "apt-get install $miss failed: $(tail -2 "$CACHE.apt.err" | tr '\n' ' ')"
        done
        rm -f "$CACHE.apt.err"
    fi
    command -v qemu-system-x86_64 >/dev/null 2>&1 || cannot "qemu-system-x86_64 missing after install"
}

# ---- kernel and initramfs (cached) -------------------------------------------

kernel_package() { # the image linux-image-amd64 depends on, e.g. linux-image-6.1.0-57-amd64
    local pkg
    pkg=$(apt-cache depends linux-image-amd64 2>/dev/null | awk '/Depends: linux-image-[0-9]/ {print $2; exit}')
    if [ -z "$pkg" ]; then
        local sudo=""
        [ "$(id -u)" = 0 ] || sudo="sudo -n"
        $sudo apt-get update -qq >/dev/null 2>&1 || true
        pkg=$(apt-cache depends linux-image-amd64 2>/dev/null | awk '/Depends: linux-image-[0-9]/ {print $2; exit}')
    fi
    [ -n "$pkg" ] || cannot "apt-cache knows no linux-image-amd64 (no Debian package lists?)"
    echo "$pkg"
}

# The /init of the guest's initramfs (busybox sh). Reads its orders from the
# kernel command line: slash.cmd=1 runs /xfer/cmd.sh in the chroot.
write_init() {
    cat >"$1" <<'INIT'
#!/bin/busybox sh
/bin/busybox --install -s /bin
export PATH=/bin
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
say() { echo "rxe-guest: $*" > /dev/console; }
fail() { say "FAILED: $*"; echo "guest: $*" > /xfer/guest-error 2>/dev/null; poweroff -f; }
for m in $(cat /modules.order); do
    insmod "/modules/$m" || fail "insmod $m"
done
mkdir -p /lower /upper /newroot /xfer
mount -t 9p -o trans=virtio,version=9p2000.L,ro,cache=loose,msize=262144 hostroot /lower || fail "mount hostroot"
mount -t 9p -o trans=virtio,version=9p2000.L,msize=262144 xfer /xfer || fail "mount xfer"
mount -t tmpfs -o size=75% tmpfs /upper
mkdir -p /upper/u /upper/w
mount -t overlay overlay -o lowerdir=/lower,upperdir=/upper/u,workdir=/upper/w /newroot || fail "overlay"
. /xfer/guest.conf
# the guest's own /tmp and /run first: a checkout under /tmp (a clone there) is then mounted
# on top of them, not hidden by them
mount -t tmpfs tmpfs /newroot/tmp
mount -t tmpfs tmpfs /newroot/run
mkdir -p "/newroot$WORKDIR"
mount -t 9p -o trans=virtio,version=9p2000.L,msize=262144 work "/newroot$WORKDIR" || fail "mount work"
mount -t proc proc /newroot/proc
mount -t sysfs sysfs /newroot/sys
mount -t devtmpfs devtmpfs /newroot/dev
# what udev would make: bash's <(...) needs /dev/fd (Spark's spark-class uses it)
ln -sfn /proc/self/fd /newroot/dev/fd
ln -sfn /proc/self/fd/0 /newroot/dev/stdin
ln -sfn /proc/self/fd/1 /newroot/dev/stdout
ln -sfn /proc/self/fd/2 /newroot/dev/stderr
mkdir -p /newroot/dev/shm /newroot/dev/pts
mount -t tmpfs tmpfs /newroot/dev/shm
mount -t devpts devpts /newroot/dev/pts
mount --bind /xfer /newroot/mnt
ip link set lo up
ip link set eth0 up
ip addr add "$GUEST_IP/24" dev eth0
if [ "$GUEST_NET" = user ]; then
    ip route add default via 10.0.2.2
    echo "nameserver 10.0.2.3" > /newroot/etc/resolv.conf 2>/dev/null
fi
echo "rxe-guest$GUEST_INDEX" > /proc/sys/kernel/hostname
# the name resolves (Java's getLocalHost, which Spark calls, fails otherwise)
echo "$GUEST_IP rxe-guest$GUEST_INDEX" >> /newroot/etc/hosts
chroot /newroot rdma link add rxe0 type rxe netdev eth0 || fail "rdma link add rxe0"
i=0
until grep -q ACTIVE /sys/class/infiniband/rxe0/ports/1/state 2>/dev/null; do
    i=$((i + 1)); [ $i -lt 100 ] || fail "rxe0 port not ACTIVE"; sleep 0.1
done
say "ready, $(cut -d" " -f1 /proc/uptime) s after the kernel started"
chroot /newroot /bin/bash /mnt/cmd.sh > /dev/console 2>&1
echo $? > /xfer/status
sync
poweroff -f
INIT
    chmod +x "$1"
}

prepare() { # fills $CACHE/$KVER; sets KDIR
    mkdir -p "$CACHE"
    ensure_host
    local pkg kver stamp
    pkg=$(kernel_package)
    kver=${pkg#linux-image-}
    KDIR=$CACHE/$kver
    stamp="$pkg $(sha256sum "$SELF" | cut -c1-16)"
    if [ -f "$KDIR/stamp" ] && [ "$(cat "$KDIR/stamp")" = "$stamp" ]; then
        return
    fi
    log "preparing the guest ($pkg) in $KDIR"
    rm -rf "$KDIR"
    mkdir -p "$KDIR/dl"
    (cd "$KDIR/dl" && apt-get download -q "$pkg" >/dev/null 2>&1) ||
        cannot "apt-get download $pkg failed (no Debian mirror reachable?)"
    dpkg -x "$KDIR"/dl/*.deb "$KDIR/root"
    rm -rf "$KDIR/dl"
    cp "$KDIR/root/boot/vmlinuz-$kver" "$KDIR/vmlinuz"
    depmod -b "$KDIR/root" "$kver"
    local ird=$KDIR/initrd.d
    mkdir -p "$ird"/{bin,proc,sys,dev,modules}
    cp /bin/busybox "$ird/bin/busybox"
    write_init "$ird/init"
    : >"$ird/modules.order"
    local seen=" " line ko base
    # shellcheck disable=SC2086
    while read -r line; do
        case "$line" in insmod*) ;; *) continue ;; esac
        ko=$(echo "$line" | awk '{print $2}')
        base=$(basename "$ko")
        case "$seen" in *" $base "*) continue ;; esac
        seen="$seen$base "
        case "$ko" in
            *.ko) cp "$ko" "$ird/modules/$base" ;;
            *.ko.xz) xz -dc "$ko" >"$ird/modules/${base%.xz}"; base=${base%.xz} ;;
            *.ko.zst) zstd -qdc "$ko" >"$ird/modules/${base%.zst}"; base=${base%.zst} ;;
            *) guest_failed "unexpected module file $ko" ;;
        esac
        echo "$base" >>"$ird/modules.order"
    done < <(for m in $GUEST_MODULES; do
                 modprobe -d "$KDIR/root" -S "$kver" --show-depends "$m" || echo "MISSING $m"
             done)
    ! grep -q MISSING "$ird/modules.order" || guest_failed "a module is missing from $pkg"
    (cd "$ird" && find . | cpio -o -H newc --quiet | gzip -1) >"$KDIR/initrd.gz"
    rm -rf "$KDIR/root" "$ird"
    echo "$stamp" >"$KDIR/stamp"
}

case "$MODE" in
    check)
        ensure_host
        kernel_package >/dev/null
        log "this machine can run the soft-RoCE guest (QEMU $(qemu-system-x86_64 --version | head -1 | awk '{print $4}'), $(nproc) cores)"
        exit 0 ;;
    prepare)
        prepare
        log "ready: $KDIR"
        exit 0 ;;
esac

prepare

# ---- one run -------------------------------------------------------------------

XFER=$(mktemp -d "${TMPDIR:-/tmp}/rxe-guest.XXXXXX")
QPID=""
cleanup() {
    if [ -n "$QPID" ] && kill -0 "$QPID" 2>/dev/null; then kill -KILL "$QPID" 2>/dev/null || true; fi
    rm -rf "$XFER"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# the writable share: the checkout (git's top level, so a worktree's .venv is in it)
WORKDIR=$(git -C "$ROOT" rev-parse --show-toplevel 2>/dev/null || echo "$ROOT")
{
    printf 'WORKDIR=%q\n' "$WORKDIR"
    printf 'GUEST_IP=10.0.2.%d\nGUEST_NET=%q\nGUEST_INDEX=%d\n' $((15 + INDEX)) "${NET%%,*}" "$INDEX"
} >"$XFER/guest.conf"
{
    echo "#!/bin/bash"
    for v in PATH VIRTUAL_ENV HOME LANG "${PASS_ENV[@]}" $(compgen -e | grep '^SLASH_' || true); do
        [ -n "${!v+x}" ] && printf 'export %s=%q\n' "$v" "${!v}"
    done
    printf 'cd %q || exit 125\n' "$CWD"
    printf '%q ' "$@"
    echo
} >"$XFER/cmd.sh"

QEMU=(qemu-system-x86_64 -accel tcg,thread=multi -cpu max -smp "$CPUS" -m "$MEM"
      -kernel "$KDIR/vmlinuz" -initrd "$KDIR/initrd.gz"
      -append "console=ttyS0 panic=-1 $([ $VERBOSE = 1 ] || echo quiet) init=/init"
      -display none -serial stdio -monitor none -no-reboot
      -virtfs "local,path=/,mount_tag=hostroot,readonly=on,multidevs=remap,security_model=none"
      -virtfs "local,path=$WORKDIR,mount_tag=work,multidevs=remap,security_model=none"
      -virtfs "local,path=$XFER,mount_tag=xfer,security_model=none"
      -netdev "$NET,id=n0" -device "virtio-net-pci,netdev=n0,mac=52:54:00:12:34:$((56 + INDEX))")

START=$(date +%s)
if [ $VERBOSE = 1 ]; then
    "${QEMU[@]}" </dev/null &
else
    # the kernel's own lines stay out; the command's output and init's notes pass
    "${QEMU[@]}" </dev/null > >(grep --line-buffered -v -E '^\[ *[0-9]+\.[0-9]+\]|^\r?$') &
fi
QPID=$!
while kill -0 "$QPID" 2>/dev/null; do
    if [ $(($(date +%s) - START)) -ge "$TIMEOUT" ]; then
        kill -KILL "$QPID" 2>/dev/null || true
        wait "$QPID" 2>/dev/null || true
        log "timed out after $TIMEOUT s (guest killed)"
        exit 124
    fi
    sleep 1
done
wait "$QPID" 2>/dev/null || true
QPID=""
if [ -f "$XFER/status" ]; then
    exit "$(cat "$XFER/status")"
fi
if [ -f "$XFER/guest-error" ]; then
    guest_failed "$(cat "$XFER/guest-error")"
fi
guest_failed "it stopped without returning the command's status (run with --verbose to see its boot)"
