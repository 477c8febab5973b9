//! Pieces of HdrHistogram's V2 encoding, for tests that craft histogram payloads.

use std::io::Write;

/// The V2 format's number: zig-zag, then LEB128 with a whole 9th byte.
pub fn number(n: i64) -> Vec<u8> {
    let mut zz = ((n << 1) ^ (n >> 63)) as u64;
    let mut out = Vec::new();
    for _ in 0..8 {
        if zz < 0x80 {
            out.push(zz as u8);
            return out;
        }
        out.push(0x80 | (zz & 0x7f) as u8);
        zz >>= 7;
    }
    out.push(zz as u8);
    out
}

/// `bytes` as a zlib stream (best compression).
pub fn zlib(bytes: &[u8]) -> Vec<u8> {
    let mut z = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::best());
    z.write_all(bytes).unwrap();
    z.finish().unwrap()
}
