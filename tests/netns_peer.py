"""A channel end run inside a network namespace by test_channel_netns.py.

    python netns_peer.py consume SPEC BIND TOKEN N   -> prints the address, then "ok N"
    python netns_peer.py produce SPEC ADDR TOKEN N
"""
import sys
import zlib

import slash


def main() -> int:
    role, spec, where, token, n = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5])
    if role == "consume":
        with slash.Listener(spec, token=token, bind=where) as lst:
            print(lst.address, flush=True)
            ch = lst.accept(buffer_size=8192, credits=8, timeout=60)
            count = 0
            for buf in ch:
                seq = int.from_bytes(buf[:8], "little")
                crc = int.from_bytes(buf[8:12], "little")
                if seq != count or zlib.crc32(buf[12:]) != crc:
                    print(f"bad buffer {count}", flush=True)
                    return 1
                count += 1
            print(f"ok {count}", flush=True)
            ch.close()
        return 0 if count == n else 1
    ch = slash.Channel.connect(spec, where, token=token, timeout=60)
    for seq in range(n):
        body = bytes([seq % 251]) * (100 + seq % 7000)
        ch.send(seq.to_bytes(8, "little") + zlib.crc32(body).to_bytes(4, "little") + body)
    ch.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
