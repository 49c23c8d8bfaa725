#!/usr/bin/python3
"""An independent reader of TensorBoard event files, for the tests: TFRecord framing with masked
CRC-32C (computed bit by bit here, not by table), the Event protobuf decoded by hand, and
TensorBoard's purge on a SessionLog START (events of earlier files from that step on dropped).

    read_tfevents.py DIR                 prints a JSON summary: {"scalars": {tag: {step: value}},
                                         "files": n, "restarts": [steps], "version": "..."}
Exits 1 with the reason on a bad CRC, a truncated record or a malformed event.
"""
import glob
import json
import os
import struct
import sys


def crc32c(data):
    crc = 0xFFFFFFFF
    for byte in data:
        crc ^= byte
        for _ in range(8):
            crc = (crc >> 1) ^ 0x82F63B78 if crc & 1 else crc >> 1
    return crc ^ 0xFFFFFFFF


def masked(data):
    crc = crc32c(data)
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


assert crc32c(b"123456789") == 0xE3069283  # the CRC-32C check value


def varint(buf, at):
    value = shift = 0
    while True:
        b = buf[at]
        at += 1
        value |= (b & 0x7F) << shift
        shift += 7
        if b < 0x80:
            return value, at


def fields(buf):
    """(field, wire type, value) of a message: ints for varints, bytes for the rest."""
    at = 0
    while at < len(buf):
        k, at = varint(buf, at)
        field, wire = k >> 3, k & 7
        if wire == 0:
            v, at = varint(buf, at)
        elif wire == 1:
            v, at = buf[at:at + 8], at + 8
        elif wire == 5:
            v, at = buf[at:at + 4], at + 4
        elif wire == 2:
            n, at = varint(buf, at)
            v, at = buf[at:at + n], at + n
        else:
            raise ValueError(f"wire type {wire}")
        yield field, wire, v


def records(path):
    data = open(path, "rb").read()
    at = 0
    while at < len(data):
        if at + 12 > len(data):
            raise ValueError(f"{path}: a truncated record header at byte {at}")
        length_bytes = data[at:at + 8]
        (length,) = struct.unpack("<Q", length_bytes)
        (length_crc,) = struct.unpack("<I", data[at + 8:at + 12])
        if masked(length_bytes) != length_crc:
            raise ValueError(f"{path}: the length's CRC at byte {at} is wrong")
        body = data[at + 12:at + 12 + length]
        if len(body) != length or at + 16 + length > len(data):
            raise ValueError(f"{path}: a truncated record at byte {at}")
        (body_crc,) = struct.unpack("<I", data[at + 12 + length:at + 16 + length])
        if masked(body) != body_crc:
            raise ValueError(f"{path}: the data's CRC of the record at byte {at} is wrong")
        yield body
        at += 16 + length


def main(directory):
    files = sorted(glob.glob(os.path.join(directory, "events.out.tfevents.*")))
    scalars, restarts, version = {}, [], None
    for path in files:
        for body in records(path):
            step, kind = 0, None
            for field, wire, v in fields(body):
                if field == 2:
                    step = v
                elif field == 3:
                    version = v.decode()
                elif field == 5:
                    kind = ("summary", v)
                elif field == 6:
                    kind = ("session_log", v)
            if kind and kind[0] == "session_log":
                status = dict((f, v) for f, _, v in fields(kind[1])).get(1)
                if status == 1:  # START: TensorBoard drops what came before from this step on
                    restarts.append(step)
                    for tag in scalars:
                        scalars[tag] = {s: x for s, x in scalars[tag].items() if s < step}
            elif kind:
                for field, _, value in fields(kind[1]):
                    if field != 1:
                        continue
                    tag, simple = None, None
                    for f, _, v in fields(value):
                        if f == 1:
                            tag = v.decode()
                        elif f == 2:
                            (simple,) = struct.unpack("<f", v)
                    scalars.setdefault(tag, {})[step] = simple
    print(json.dumps({"scalars": scalars, "files": len(files), "restarts": restarts,
                      "version": version}))


if __name__ == "__main__":
    try:
        main(sys.argv[1])
    except (ValueError, IndexError, struct.error) as e:
        print(f"bad event file: {e}", file=sys.stderr)
        sys.exit(1)
