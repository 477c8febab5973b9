//! A bounded reader of the profile's histogram payloads: HdrHistogram V2 compressed ("V2 +
//! deflate") decoded straight into [`Buckets`].
//!
//! Every field is checked before it is used, so no input makes the reader allocate or work in
//! proportion to what a header claims rather than to what the input holds:
//!
//! - the compressed header: cookie `0x1c849314`, and a deflate length equal to the bytes
//!   present;
//! - the deflate stream is inflated into a fixed buffer on the stack: at most
//!   [`V2_HEADER_LEN`] + 9 × (counters of the declared bounds) bytes, the most a V2 payload of
//!   those bounds can hold (one 9-byte number per counter); the inflater's state is reused per
//!   thread;
//! - the V2 header: cookie `0x1c849313`, a payload length equal to the bytes inflated, no
//!   normalizing offset, an integer-to-double ratio of 1, the profile's significant digits (2),
//!   a lowest trackable value of at least 1 and a highest of at most [`HIGHEST_NS`] (or the
//!   top of its bucket, 2^42 - 1, which earlier versions wrote for histograms holding it);
//! - the payload: zig-zag LEB128 numbers (counts, or runs of empty counters when negative) that
//!   stay inside the counters of the declared bounds and whose counts sum to at most
//!   `u64::MAX`.
//!
//! The output holds 16 bytes per non-empty bucket, allocated once at its exact size.

use std::cell::RefCell;

use flate2::{Decompress, FlushDecompress, Status};

use super::buckets::{index_of, value_of, COUNTS_LEN, TOP_NS};
use super::{Buckets, HIGHEST_NS, LOWEST_NS, SIGNIFICANT_DIGITS};

/// Cookie of a compressed V2 histogram.
const V2_COMPRESSED_COOKIE: u32 = 0x1c84_9314;
/// Cookie of an uncompressed V2 histogram (inside the deflate stream).
const V2_COOKIE: u32 = 0x1c84_9313;
/// Bytes of the compressed header: cookie and deflate length.
const COMPRESSED_HEADER_LEN: usize = 8;
/// Bytes of the V2 header: cookie, payload length, normalizing offset, significant digits,
/// lowest and highest trackable values, integer-to-double ratio.
pub(crate) const V2_HEADER_LEN: usize = 40;
/// The longest a zig-zag LEB128 number of the V2 format can be.
const MAX_NUMBER_LEN: usize = 9;
/// Sub-buckets per bucket half at 2 significant digits (hdrhistogram's
/// `sub_bucket_half_count`): 2 × 10² needs 256 sub-buckets, half of them 128.
const SUB_BUCKET_HALF_MAGNITUDE: u32 = 7;
/// The longest inflated histogram the reader accepts: the header and one 9-byte number per
/// counter of the widest histogram a profile may hold (lowest 1, highest [`HIGHEST_NS`]).
pub(crate) const MAX_INFLATED_LEN: usize = V2_HEADER_LEN + MAX_NUMBER_LEN * COUNTS_LEN;

thread_local! {
    /// One inflater per thread, reset for each histogram (its state is some 40 KiB).
    static INFLATER: RefCell<Option<Decompress>> = const { RefCell::new(None) };
}

/// How many times its compressed size a histogram may inflate to, beyond
/// [`INFLATE_SLACK`] bytes: spanprof's own histograms inflate less than 2×; a crafted one can
/// reach some 80× (thousands of equal counts). The bound keeps the time to read any profile
/// proportional to its size.
pub(crate) const MAX_INFLATE_RATIO: usize = 32;
/// Bytes any histogram may inflate to whatever its compressed size (small histograms compress
/// badly).
pub(crate) const INFLATE_SLACK: usize = 512;

/// Checks a compressed V2 histogram completely (headers, bounds, every number) without
/// keeping its buckets, and returns its number of samples.
pub(crate) fn validate(bytes: &[u8]) -> Result<u64, String> {
    with_v2(bytes, |v2| {
        let (header, payload) = split_v2(v2)?;
        let mut total = 0u64;
        walk(payload, &header, |_, count| total += count)?;
        Ok(total)
    })
}

/// Decodes a compressed V2 histogram into [`Buckets`], or says what is wrong with it.
pub(crate) fn decode(bytes: &[u8]) -> Result<Buckets, String> {
    with_v2(bytes, decode_v2)
}

/// Checks the compressed header of `bytes`, inflates it, and runs `f` on the V2 histogram.
fn with_v2<R>(bytes: &[u8], f: impl FnOnce(&[u8]) -> Result<R, String>) -> Result<R, String> {
    if bytes.len() < COMPRESSED_HEADER_LEN {
        return Err(format!(
            "{} bytes, shorter than the {COMPRESSED_HEADER_LEN}-byte header of a compressed \
             HdrHistogram",
            bytes.len()
        ));
    }
    let cookie = be_u32(&bytes[0..4]);
    if cookie != V2_COMPRESSED_COOKIE {
        return Err(format!(
            "cookie {cookie:#010x} is not a compressed HdrHistogram V2 ({V2_COMPRESSED_COOKIE:#010x})"
        ));
    }
    let declared = be_u32(&bytes[4..8]) as usize;
    let deflated = &bytes[COMPRESSED_HEADER_LEN..];
    if declared != deflated.len() {
        return Err(format!(
            "header declares {declared} compressed bytes, {} are present",
            deflated.len()
        ));
    }
    let mut buf = [0u8; MAX_INFLATED_LEN];
    let len = INFLATER.with(|cell| {
        let mut cell = cell.borrow_mut();
        let inflater = cell.get_or_insert_with(|| Decompress::new(true));
        inflater.reset(true);
        inflate(inflater, deflated, &mut buf)
    })?;
    f(&buf[..len])
}

/// Inflates `input` (a whole zlib stream) into `out`: first the V2 header, then at most the
/// payload its bounds can need. Returns the bytes inflated.
fn inflate(inflater: &mut Decompress, input: &[u8], out: &mut [u8]) -> Result<usize, String> {
    // The header first, to learn how much the payload may hold.
    let (mut consumed, mut produced, mut ended) = (0, 0, false);
    let mut limit = V2_HEADER_LEN;
    loop {
        let before = (inflater.total_in(), inflater.total_out());
        let status = inflater
            .decompress(
                &input[consumed..],
                &mut out[produced..limit],
                FlushDecompress::None,
            )
            .map_err(|e| format!("deflate stream does not inflate: {e}"))?;
        consumed = inflater.total_in() as usize;
        produced = inflater.total_out() as usize;
        if status == Status::StreamEnd {
            ended = true;
        }
        if produced == V2_HEADER_LEN && limit == V2_HEADER_LEN {
            let header = header(&out[..V2_HEADER_LEN])?;
            limit = V2_HEADER_LEN + header.payload_len;
            let allowed = input.len() * MAX_INFLATE_RATIO + INFLATE_SLACK;
            if limit > allowed {
                return Err(format!(
                    "its V2 header declares {limit} bytes from {} compressed, more than the \
                     {MAX_INFLATE_RATIO}× (+{INFLATE_SLACK}) a profile's histogram may inflate to",
                    input.len()
                ));
            }
            if ended || produced == limit {
                break;
            }
            continue;
        }
        if ended || produced == limit {
            break;
        }
        if (inflater.total_in(), inflater.total_out()) == before {
            return Err("deflate stream ends early".to_string());
        }
    }
    if produced < V2_HEADER_LEN {
        return Err(format!(
            "inflates to {produced} bytes, shorter than the {V2_HEADER_LEN}-byte V2 header"
        ));
    }
    if !ended {
        // The payload is complete; the stream must end here (a zero-length read finds its
        // end, or more data past the declared payload).
        let mut probe = [0u8; 1];
        let status = inflater
            .decompress(&input[consumed..], &mut probe, FlushDecompress::None)
            .map_err(|e| format!("deflate stream does not inflate: {e}"))?;
        if inflater.total_out() as usize != produced {
            return Err(format!(
                "inflates past the {} payload bytes its V2 header declares",
                produced - V2_HEADER_LEN
            ));
        }
        if status != Status::StreamEnd {
            return Err("deflate stream ends early".to_string());
        }
        consumed = inflater.total_in() as usize;
    }
    if consumed != input.len() {
        return Err(format!(
            "{} bytes follow the end of the deflate stream",
            input.len() - consumed
        ));
    }
    Ok(produced)
}

/// The checked V2 header.
struct Header {
    payload_len: usize,
    /// log2 of the lowest discernible value, rounded down.
    unit_magnitude: u32,
    /// Counters of the declared bounds.
    counts_len: usize,
}

fn header(h: &[u8]) -> Result<Header, String> {
    let cookie = be_u32(&h[0..4]);
    if cookie != V2_COOKIE {
        return Err(format!(
            "inner cookie {cookie:#010x} is not an HdrHistogram V2 ({V2_COOKIE:#010x})"
        ));
    }
    let payload_len = be_u32(&h[4..8]) as usize;
    let offset = be_u32(&h[8..12]);
    let digits = be_u32(&h[12..16]);
    let lowest = be_u64(&h[16..24]);
    let highest = be_u64(&h[24..32]);
    let ratio = f64::from_bits(be_u64(&h[32..40]));
    if offset != 0 {
        return Err(format!("normalizing index offset {offset}, expected 0"));
    }
    if ratio != 1.0 {
        return Err(format!("integer to double ratio {ratio}, expected 1"));
    }
    if digits != u32::from(SIGNIFICANT_DIGITS) {
        return Err(format!(
            "{digits} significant digits, expected {SIGNIFICANT_DIGITS} \
             (histograms.significant_digits)"
        ));
    }
    if lowest < LOWEST_NS {
        return Err(format!(
            "lowest trackable value {lowest}, expected at least {LOWEST_NS} (histograms.lowest)"
        ));
    }
    // Up to the top of the bucket holding HIGHEST_NS: hdrhistogram writes that when a
    // histogram grew to hold HIGHEST_NS (earlier spanprof versions did).
    if highest > TOP_NS {
        return Err(format!(
            "highest trackable value {highest}, expected at most {HIGHEST_NS} \
             (histograms.highest; up to {TOP_NS}, the top of its bucket)"
        ));
    }
    if highest / 2 < lowest {
        return Err(format!(
            "highest trackable value {highest} is less than twice the lowest ({lowest})"
        ));
    }
    let unit_magnitude = 63 - lowest.leading_zeros();
    // hdrhistogram's buckets_to_cover: buckets until the first untrackable value passes
    // `highest` (at most 35 here: highest < 2^42).
    let mut smallest_untrackable = (2u64 << SUB_BUCKET_HALF_MAGNITUDE) << unit_magnitude;
    let mut buckets = 1usize;
    while smallest_untrackable <= highest {
        smallest_untrackable <<= 1;
        buckets += 1;
    }
    let counts_len = (buckets + 1) << SUB_BUCKET_HALF_MAGNITUDE;
    let most = MAX_NUMBER_LEN * counts_len;
    if payload_len > most {
        return Err(format!(
            "V2 header declares {payload_len} payload bytes; {counts_len} counters need at most \
             {most}"
        ));
    }
    Ok(Header {
        payload_len,
        unit_magnitude,
        counts_len,
    })
}

/// The checked header of an inflated V2 histogram, and its payload.
fn split_v2(v2: &[u8]) -> Result<(Header, &[u8]), String> {
    let header = header(&v2[..V2_HEADER_LEN])?;
    let payload = &v2[V2_HEADER_LEN..];
    if payload.len() != header.payload_len {
        return Err(format!(
            "V2 header declares {} payload bytes, {} are present",
            header.payload_len,
            payload.len()
        ));
    }
    Ok((header, payload))
}

/// Decodes an inflated V2 histogram (header and payload).
fn decode_v2(v2: &[u8]) -> Result<Buckets, String> {
    let (header, payload) = split_v2(v2)?;
    // First pass: check every number and count the non-empty counters.
    let mut non_empty = 0usize;
    walk(payload, &header, |_, _| non_empty += 1)?;
    // Second pass: the buckets, mapped to spanprof's layout (the same one when the lowest
    // value is 1).
    let mut counts: Vec<(u64, u64)> = Vec::with_capacity(non_empty);
    walk(payload, &header, |index, count| {
        let value = spanprof_bucket(index, header.unit_magnitude);
        match counts.last_mut() {
            // UNWRAP-free: the first pass checked that the counts sum within u64.
            Some((last, n)) if *last == value => *n += count,
            _ => counts.push((value, count)),
        }
    })?;
    Ok(Buckets::from_sorted_counts(counts))
}

/// Calls `f(index, count)` for every non-zero counter of `payload`, in ascending index order.
fn walk(payload: &[u8], header: &Header, mut f: impl FnMut(usize, u64)) -> Result<(), String> {
    let mut at = 0;
    let mut index = 0usize;
    let mut total = 0u64;
    while at < payload.len() {
        let (zz, len) = read_number(&payload[at..])
            .ok_or_else(|| format!("payload ends inside a number at byte {at}"))?;
        at += len;
        // Zig-zag: the sign in the low bit. The magnitude of a negative number fits a u64
        // (i64::MIN included), so nothing is negated.
        let magnitude = zz >> 1;
        if zz & 1 == 1 {
            // A run of magnitude + 1 empty counters (-(n) is encoded as 2n - 1).
            let run = magnitude.saturating_add(1);
            let end = (index as u64).saturating_add(run);
            if end > header.counts_len as u64 {
                return Err(format!(
                    "a run of {run} empty counters at counter {index} passes the {} counters \
                     of the declared bounds",
                    header.counts_len
                ));
            }
            index = end as usize;
        } else {
            let count = magnitude;
            if count > 0 {
                if index >= header.counts_len {
                    return Err(format!(
                        "a count at counter {index}, past the {} counters of the declared bounds",
                        header.counts_len
                    ));
                }
                total = total
                    .checked_add(count)
                    .ok_or_else(|| "the counts add up to more than 2^64 - 1 samples".to_string())?;
                f(index, count);
            }
            // A count (even 0) advances one counter; a count past the end is an error above,
            // a zero one past the end is as well.
            if index >= header.counts_len {
                return Err(format!(
                    "a counter at index {index}, past the {} counters of the declared bounds",
                    header.counts_len
                ));
            }
            index += 1;
        }
    }
    Ok(())
}

/// Reads one LEB128-64b9B number (the V2 format's: 8 groups of 7 bits, then a whole 9th
/// byte). `None` if `bytes` ends inside it.
fn read_number(bytes: &[u8]) -> Option<(u64, usize)> {
    match bytes.first() {
        Some(&b) if b < 0x80 => return Some((u64::from(b), 1)),
        None => return None,
        _ => {}
    }
    let mut value = 0u64;
    for i in 0..MAX_NUMBER_LEN {
        let b = *bytes.get(i)?;
        if i == MAX_NUMBER_LEN - 1 {
            value |= u64::from(b) << 56;
            return Some((value, MAX_NUMBER_LEN));
        }
        value |= u64::from(b & 0x7f) << (7 * i);
        if b & 0x80 == 0 {
            return Some((value, i + 1));
        }
    }
    None
}

/// spanprof's bucket (its lowest value) holding counter `index` of a histogram of 2
/// significant digits whose lowest discernible value is `2^unit_magnitude`: the bucket of the
/// counter's highest equivalent value, as [`Buckets::from_histogram`] maps it.
fn spanprof_bucket(index: usize, unit_magnitude: u32) -> u64 {
    if unit_magnitude == 0 {
        // spanprof's own layout: the same counter, those past HIGHEST_NS's in its bucket.
        return value_of(index.min(index_of(HIGHEST_NS)));
    }
    let half = 1usize << SUB_BUCKET_HALF_MAGNITUDE;
    let mut bucket = (index >> SUB_BUCKET_HALF_MAGNITUDE) as i64 - 1;
    let mut sub_bucket = (index & (half - 1)) + half;
    if bucket < 0 {
        sub_bucket -= half;
        bucket = 0;
    }
    let shift = bucket as u32 + unit_magnitude;
    let lowest = (sub_bucket as u64) << shift;
    let highest_equivalent = lowest + ((1u64 << shift) - 1);
    value_of(index_of(highest_equivalent.min(HIGHEST_NS)))
}

fn be_u32(b: &[u8]) -> u32 {
    u32::from_be_bytes([b[0], b[1], b[2], b[3]])
}

fn be_u64(b: &[u8]) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[..8]);
    u64::from_be_bytes(a)
}

#[cfg(test)]
mod tests {
    use hdrhistogram::serialization::{Serializer, V2DeflateSerializer};
    use hdrhistogram::Histogram;

    use super::*;

    fn encoded(h: &Histogram<u64>) -> Vec<u8> {
        let mut bytes = Vec::new();
        V2DeflateSerializer::new().serialize(h, &mut bytes).unwrap();
        bytes
    }

    /// The reader gives what hdrhistogram's deserializer and [`Buckets::from_histogram`] give,
    /// for spanprof's bounds, smaller ones and a lowest value above 1.
    #[test]
    fn reads_what_hdrhistogram_writes() {
        let mut state = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        for (lowest, highest) in [(1, HIGHEST_NS), (1, 2), (1, 100_000), (1000, HIGHEST_NS)] {
            for round in 0..20 {
                let mut h = Histogram::<u64>::new_with_bounds(lowest, highest, 2).unwrap();
                for _ in 0..round * 7 {
                    let v = (next() % highest.min(1 << (next() % 42 + 1))).max(lowest);
                    h.record_n(v, next() % 1000 + 1).unwrap();
                }
                if round == 19 {
                    h.record_n(highest, 3).unwrap();
                }
                let bytes = encoded(&h);
                let back: Histogram<u64> = hdrhistogram::serialization::Deserializer::new()
                    .deserialize(&mut bytes.as_slice())
                    .unwrap();
                let ours = decode(&bytes).unwrap();
                assert_eq!(ours, Buckets::from_histogram(&back), "{lowest}..{highest}");
                assert_eq!(ours.len(), h.len());
            }
        }
    }

    /// What the profile writer writes reads back, up to the highest value.
    #[test]
    fn reads_what_the_writer_writes() {
        let mut h = Histogram::<u64>::new_with_bounds(LOWEST_NS, HIGHEST_NS, 2).unwrap();
        for v in [1, 2, 1000, 123_456_789, HIGHEST_NS - 1, HIGHEST_NS] {
            h.record_n(v, v % 5 + 1).unwrap();
        }
        let b = Buckets::from_histogram(&h);
        assert_eq!(decode(&encoded(&b.to_histogram())).unwrap(), b);
        assert_eq!(
            decode(&encoded(&Buckets::default().to_histogram())).unwrap(),
            Buckets::default()
        );
    }

    #[test]
    fn numbers() {
        assert_eq!(read_number(&[0x05]), Some((5, 1)));
        assert_eq!(read_number(&[0x80, 0x01]), Some((128, 2)));
        assert_eq!(read_number(&[0xff; 9]), Some((u64::MAX, 9)));
        assert_eq!(read_number(&[0x80; 8]), None);
        assert_eq!(read_number(&[]), None);
    }
}
