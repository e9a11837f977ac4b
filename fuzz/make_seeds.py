#!/usr/bin/env python3
"""Seeds for the fuzz target pt2_entries: each archive's entries as records of
[u16 name length][name][u32 data length][data] (little endian), the format fuzz_pt2_entries.cpp
reads. Weight, constant and sample-input blobs are written as their length with the top bit set
(the harness makes that many zero bytes), so the seeds are mostly JSON. Standard library only.

    python3 fuzz/make_seeds.py OUT_DIR models/*.pt2
"""
import os
import struct
import sys
import zipfile


def main() -> int:
    if len(sys.argv) < 3:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    for path in sys.argv[2:]:
        with zipfile.ZipFile(path) as z:
            blob = b""
            for info in z.infolist():
                name = info.filename.encode()
                data = z.read(info)
                blob += struct.pack("<H", len(name)) + name
                blob_entry = "/data/" in info.filename and not info.filename.endswith(".json")
                if blob_entry:
                    blob += struct.pack("<I", 0x80000000 | len(data))
                else:
                    blob += struct.pack("<I", len(data)) + data
        with open(os.path.join(out, os.path.basename(path) + ".entries"), "wb") as f:
            f.write(blob)
    return 0


if __name__ == "__main__":
    sys.exit(main())
