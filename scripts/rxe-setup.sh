#!/usr/bin/env bash
# rxe-setup.sh - create (or remove) a soft-RoCE device so the ofi:verbs transport
# and the verbs channel tests can run on a machine without an RDMA NIC.
#
# Soft-RoCE (the kernel module rdma_rxe) runs RoCE v2 over an ordinary Ethernet
# interface. This script loads the module, then runs
#     rdma link add rxe0 type rxe netdev IFACE
# It changes nothing when a step cannot work, and says why; its exit codes:
#   0 done (or already there)   2 bad usage   3 the kernel lacks rdma_rxe
#   4 a tool is missing         5 not root    6 the rdma command failed
set -euo pipefail

NAME=rxe0
ACTION=add
IFACE=""
PROG=$(basename "$0")

usage() {
    cat <<USAGE
Usage: $PROG [--name NAME] [IFACE]
       $PROG --remove [--name NAME]
       $PROG --check

Creates a soft-RoCE (rxe) RDMA device named NAME (default rxe0) on the network
interface IFACE (default: the interface of the default route), so that
libfabric's verbs provider, 'slash doctor' and the ofi:verbs channel tests
find an RDMA device. Needs root and a kernel built with CONFIG_RDMA_RXE.

  --name NAME   device name (default rxe0)
  --remove      delete the device (rdma link delete NAME)
  --check       only report whether this kernel can do soft-RoCE; change nothing
  -h, --help    this help

Afterwards: 'rdma link show', 'ibv_devices' (rdma-core), 'slash doctor'.
USAGE
}

die() { # die CODE MESSAGE
    echo "$PROG: error: $2" >&2
    exit "$1"
}

while [ $# -gt 0 ]; do
    case "$1" in
        -h|--help) usage; exit 0 ;;
        --remove) ACTION=remove ;;
        --check) ACTION=check ;;
        --name)
            [ $# -ge 2 ] || die 2 "--name needs a value"
            NAME=$2; shift ;;
        --name=*) NAME=${1#--name=} ;;
        -*) usage >&2; die 2 "unknown option: $1" ;;
        *)
            [ -z "$IFACE" ] || die 2 "only one interface may be given (got '$IFACE' and '$1')"
            IFACE=$1 ;;
    esac
    shift
done
[[ "$NAME" =~ ^[A-Za-z0-9_.-]{1,32}$ ]] || die 2 "bad device name '$NAME'"

kernel_config_has_rxe() { # prints y, m, n or ? (unknown)
    local cfg
    for cfg in /proc/config.gz "/boot/config-$(uname -r)"; do
        [ -r "$cfg" ] || continue
        local line
        if [ "${cfg%.gz}" != "$cfg" ]; then
            line=$(zcat "$cfg" 2>/dev/null | grep -E '^CONFIG_RDMA_RXE=' || true)
        else
            line=$(grep -E '^CONFIG_RDMA_RXE=' "$cfg" || true)
        fi
        case "$line" in
            *=y) echo y; return ;;
            *=m) echo m; return ;;
            *) echo n; return ;;
        esac
    done
    echo "?"
}

# Loads rdma_rxe if needed; returns 0 when the kernel can create rxe devices.
ensure_rxe_module() {
    [ -d /sys/module/rdma_rxe ] && return 0
    local why=""
    if command -v modprobe >/dev/null 2>&1; then
        if [ "$ACTION" = check ]; then
            modprobe -n rdma_rxe 2>/dev/null && return 0
        elif modprobe rdma_rxe 2>/dev/null; then
            return 0
        fi
        why="modprobe rdma_rxe failed"
    else
        why="modprobe is not installed (apt-get install kmod)"
    fi
    case "$(kernel_config_has_rxe)" in
        y) return 0 ;;  # built in: nothing to load
        m) why="$why; the module exists in the kernel config but could not be loaded (is /lib/modules/$(uname -r) installed?)" ;;
        n) why="$why; kernel $(uname -r) is built without CONFIG_RDMA_RXE" ;;
        *) [ -d "/lib/modules/$(uname -r)" ] || why="$why; no modules for kernel $(uname -r) in /lib/modules" ;;
    esac
    RXE_WHY=$why
    return 1
}

rxe_unsupported() {
    die 3 "this kernel cannot create soft-RoCE devices: $RXE_WHY.
  Soft-RoCE needs the rdma_rxe module (CONFIG_RDMA_RXE) and root; containers and
  many cloud kernels lack it. Without it the verbs provider is unavailable, but
  Slash's shm and ofi:tcp transports work (see 'slash doctor')."
}

default_iface() {
    ip -o route show default 2>/dev/null | awk '{for (i = 1; i < NF; i++) if ($i == "dev") { print $(i + 1); exit }}'
}

device_exists() {
    rdma link show 2>/dev/null | grep -qE "^link $NAME/"
}

RXE_WHY=""
case "$ACTION" in
    check)
        if ensure_rxe_module; then
            echo "$PROG: this kernel can create soft-RoCE devices (rdma_rxe available)"
            exit 0
        fi
        rxe_unsupported ;;
    remove)
        command -v rdma >/dev/null 2>&1 || die 4 "the 'rdma' command is missing (apt-get install iproute2)"
        [ "$(id -u)" -eq 0 ] || die 5 "removing an RDMA link needs root (try: sudo $0 --remove)"
        if ! device_exists; then
            echo "$PROG: no RDMA link named $NAME; nothing to remove"
            exit 0
        fi
        rdma link delete "$NAME" || die 6 "rdma link delete $NAME failed"
        echo "$PROG: removed $NAME"
        exit 0 ;;
esac

command -v rdma >/dev/null 2>&1 || die 4 "the 'rdma' command is missing (apt-get install iproute2)"
command -v ip >/dev/null 2>&1 || die 4 "the 'ip' command is missing (apt-get install iproute2)"
[ "$(id -u)" -eq 0 ] || die 5 "creating an RDMA link needs root (try: sudo $0 ${IFACE})"
ensure_rxe_module || rxe_unsupported

if [ -z "$IFACE" ]; then
    IFACE=$(default_iface)
    [ -n "$IFACE" ] || die 2 "no default route, so no interface to use: name one (e.g. $PROG eth0)"
fi
[ -e "/sys/class/net/$IFACE" ] || die 2 "no network interface '$IFACE' (see 'ip link')"

if device_exists; then
    echo "$PROG: $NAME already exists:"
    rdma link show "$NAME/1" 2>/dev/null || rdma link show
    exit 0
fi
rdma link add "$NAME" type rxe netdev "$IFACE" || die 6 "rdma link add $NAME type rxe netdev $IFACE failed"
echo "$PROG: created $NAME on $IFACE:"
rdma link show "$NAME/1" 2>/dev/null || rdma link show
if command -v ibv_devices >/dev/null 2>&1; then
    ibv_devices
fi
echo "$PROG: remove it with: $0 --remove --name $NAME"
