//! The Perfetto backend (feature `perfetto`): one `tracing_perfetto_file::PerfettoLayer` per
//! window, writing Perfetto's protobuf format into the window's [`WindowWriter`], and the
//! completion of a window's file (spans still entered closed, counter tracks appended).
//!
//! tracing-perfetto-file keeps its per-thread state (packet queue, interned names, incremental
//! timestamps) per layer, so a fresh layer per window starts every thread's packet sequence
//! anew: each window's file stands alone. Between windows there is no layer. The open window
//! (its layer, and the spans the layer knows: [`Announced`]) sits in a [`Slot`]; a traced
//! thread takes it from there once, at its first call in the window, and keeps a reference of
//! its own (see the gate, `layer`), so that its calls read no shared state. Closing the window
//! takes it out of the slot once the calls into it returned (the session waits on each
//! thread's in-flight flag) and hands it, with its flush guard, to the `spanprof-perfetto`
//! thread, which drains the threads' queues into the window's writer and completes the file
//! ([`complete`]) on that thread, not on a traced one. The file is completed explicitly, not
//! when the layer is dropped: threads may still hold a reference to a closed window (until
//! their next call, or the session's end), which writes nothing more.

use std::collections::BTreeMap;
use std::hash::BuildHasher;
use std::io::{self, Write};
use std::path::Path;
use std::sync::mpsc::{self, SyncSender};
use std::sync::{Arc, Mutex, RwLock};
use std::thread::JoinHandle;
use std::time::{Instant, SystemTime};

use prost::Message;
use tracing_perfetto_file::{FlushGuard, PerfettoLayer, SpanMode};

use super::announced::Announced;
use super::counters::Counter;
use super::session::MAX_PENDING_WINDOWS;
use super::trace_file::{Disk, WindowInfo, WindowWriter};
use super::ChromeOptions;
use crate::error::Result;

/// The open window, `None` between windows. Read once per thread and window.
pub(super) type Slot = RwLock<Option<Arc<Window>>>;

/// A window's layer and the spans it knows.
pub(super) struct Window {
    /// The window's number in the session (`Session::current` while it is open).
    pub(super) number: u64,
    pub(super) layer: PerfettoLayer,
    pub(super) announced: Announced,
}

/// The window's writer as tracing-perfetto-file holds it: shared with the writer thread, which
/// takes it out (completing the file) once the threads' queues are drained; writes after that
/// (a closed window's layer dropped later) go nowhere. Locked at each drain of a thread's queue
/// (every few hundred spans), never per span.
struct SharedWriter(Arc<Mutex<Option<WindowWriter>>>);

impl SharedWriter {
    fn lock(&self) -> std::sync::MutexGuard<'_, Option<WindowWriter>> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Write for SharedWriter {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self.lock().as_mut() {
            Some(writer) => writer.write(buf),
            None => Ok(buf.len()),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        match self.lock().as_mut() {
            Some(writer) => writer.flush(),
            None => Ok(()),
        }
    }
}

/// A closed window on its way to the writer thread.
struct Closed {
    window: Arc<Window>,
    guard: FlushGuard,
    writer: Arc<Mutex<Option<WindowWriter>>>,
}

impl Closed {
    /// Drains every thread's queue into the window's writer, then completes the file (dropping
    /// the writer completes it: see `trace_file`).
    fn complete(self) {
        let _ = self.guard.flush();
        let writer = self.writer.lock().unwrap_or_else(|e| e.into_inner()).take();
        drop(writer);
        drop(self.window);
        drop(self.guard);
    }
}

/// The session's side of the Perfetto backend: the slot the gate reads, the open window's
/// flush guard and writer, and the thread that completes the windows' files.
pub(super) struct Windows {
    slot: Arc<Slot>,
    open: Option<(FlushGuard, Arc<Mutex<Option<WindowWriter>>>)>,
    to_writer: Option<SyncSender<Closed>>,
    writer: Option<JoinHandle<()>>,
}

impl Windows {
    /// Starts the thread that completes the windows' files (if it cannot start, windows are
    /// completed on the thread that closes them).
    pub(super) fn start() -> Self {
        // Never full: at most MAX_PENDING_WINDOWS windows are open or waiting (session.rs).
        let (to_writer, windows) = mpsc::sync_channel::<Closed>(MAX_PENDING_WINDOWS);
        let writer = std::thread::Builder::new()
            .name("spanprof-perfetto".into())
            .spawn(move || {
                for closed in windows {
                    closed.complete();
                }
            })
            .ok();
        Self {
            slot: Arc::new(RwLock::new(None)),
            open: None,
            to_writer: writer.as_ref().map(|_| to_writer),
            writer,
        }
    }

    /// The slot the gate reads.
    pub(super) fn slot(&self) -> Arc<Slot> {
        self.slot.clone()
    }

    /// Opens window `number`, writing into `writer`. Thread tracks (each entry a slice on the
    /// thread that entered it, as tracing-chrome's threaded style and spanprof's per-entry
    /// figures).
    pub(super) fn start_window(
        &mut self,
        number: u64,
        writer: WindowWriter,
        options: &ChromeOptions,
    ) {
        let writer = Arc::new(Mutex::new(Some(writer)));
        let mut builder =
            PerfettoLayer::builder(SharedWriter(writer.clone())).span_mode(SpanMode::ThreadTracks);
        if options.include_args {
            builder = builder.with_debug_annotations();
        }
        if options.include_locations {
            builder = builder.with_source_locations();
        }
        let (layer, guard) = builder.build();
        *self.slot.write().unwrap_or_else(|e| e.into_inner()) = Some(Arc::new(Window {
            number,
            layer,
            announced: Announced::new(),
        }));
        self.open = Some((guard, writer));
    }

    /// Closes the open window (the session has waited for the calls into it): it leaves the
    /// slot and goes to the writer thread.
    pub(super) fn end_window(&mut self) {
        let window = self.slot.write().unwrap_or_else(|e| e.into_inner()).take();
        let (Some(window), Some((guard, writer))) = (window, self.open.take()) else {
            return;
        };
        let closed = Closed {
            window,
            guard,
            writer,
        };
        let unsent = match &self.to_writer {
            Some(to_writer) => to_writer.try_send(closed).err().map(|e| match e {
                mpsc::TrySendError::Full(c) | mpsc::TrySendError::Disconnected(c) => c,
            }),
            None => Some(closed),
        };
        if let Some(closed) = unsent {
            closed.complete();
        }
    }

    /// Closes the open window and waits until every window's file is complete (as dropping
    /// does).
    pub(super) fn finish(self) {
        drop(self);
    }
}

impl Drop for Windows {
    fn drop(&mut self) {
        self.end_window();
        drop(self.to_writer.take());
        if let Some(writer) = self.writer.take() {
            let _ = writer.join();
        }
    }
}

/// Perfetto's `TracePacket`, `TrackEvent` and the descriptors: only the fields spanprof reads
/// or writes (field numbers from `perfetto_trace.proto`; others are skipped when decoding).
mod proto {
    #[derive(Clone, PartialEq, prost::Message)]
    pub(super) struct TracePacket {
        #[prost(uint64, optional, tag = "8")]
        pub(super) timestamp: Option<u64>,
        #[prost(uint32, optional, tag = "58")]
        pub(super) timestamp_clock_id: Option<u32>,
        #[prost(uint32, optional, tag = "10")]
        pub(super) trusted_packet_sequence_id: Option<u32>,
        #[prost(message, optional, tag = "11")]
        pub(super) track_event: Option<TrackEvent>,
        #[prost(message, optional, tag = "59")]
        pub(super) trace_packet_defaults: Option<TracePacketDefaults>,
        #[prost(message, optional, tag = "60")]
        pub(super) track_descriptor: Option<TrackDescriptor>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub(super) struct TrackEvent {
        #[prost(int32, optional, tag = "9")]
        pub(super) r#type: Option<i32>,
        #[prost(uint64, optional, tag = "11")]
        pub(super) track_uuid: Option<u64>,
        #[prost(string, optional, tag = "23")]
        pub(super) name: Option<String>,
        #[prost(message, repeated, tag = "4")]
        pub(super) debug_annotations: Vec<DebugAnnotation>,
        #[prost(double, optional, tag = "44")]
        pub(super) double_counter_value: Option<f64>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub(super) struct DebugAnnotation {
        #[prost(string, optional, tag = "10")]
        pub(super) name: Option<String>,
        #[prost(bool, optional, tag = "2")]
        pub(super) bool_value: Option<bool>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub(super) struct TracePacketDefaults {
        #[prost(message, optional, tag = "11")]
        pub(super) track_event_defaults: Option<TrackEventDefaults>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub(super) struct TrackEventDefaults {
        #[prost(uint64, optional, tag = "11")]
        pub(super) track_uuid: Option<u64>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub(super) struct TrackDescriptor {
        #[prost(uint64, optional, tag = "1")]
        pub(super) uuid: Option<u64>,
        #[prost(string, optional, tag = "2")]
        pub(super) name: Option<String>,
        #[prost(message, optional, tag = "3")]
        pub(super) process: Option<ProcessDescriptor>,
        #[prost(message, optional, tag = "4")]
        pub(super) thread: Option<ThreadDescriptor>,
        #[prost(uint64, optional, tag = "5")]
        pub(super) parent_uuid: Option<u64>,
        #[prost(message, optional, tag = "8")]
        pub(super) counter: Option<CounterDescriptor>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub(super) struct ProcessDescriptor {
        #[prost(int32, optional, tag = "1")]
        pub(super) pid: Option<i32>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub(super) struct ThreadDescriptor {
        #[prost(int32, optional, tag = "1")]
        pub(super) pid: Option<i32>,
        #[prost(int32, optional, tag = "2")]
        pub(super) tid: Option<i32>,
        #[prost(string, optional, tag = "5")]
        pub(super) thread_name: Option<String>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub(super) struct CounterDescriptor {
        #[prost(string, optional, tag = "6")]
        pub(super) unit_name: Option<String>,
    }

    pub(super) const SLICE_BEGIN: i32 = 1;
    pub(super) const SLICE_END: i32 = 2;
    pub(super) const COUNTER: i32 = 4;
    /// `BuiltinClock`: the clocks spanprof stamps its own packets with.
    pub(super) const CLOCK_REALTIME: u32 = 1;
    #[cfg(target_os = "linux")]
    pub(super) const CLOCK_MONOTONIC: u32 = 3;
    #[cfg(target_os = "linux")]
    pub(super) const CLOCK_BOOTTIME: u32 = 6;
    /// The clock of spanprof's counter packets: tracing-perfetto-file's on Linux, else REALTIME
    /// (Perfetto converts it through the clock snapshots of the file).
    #[cfg(target_os = "linux")]
    pub(super) const COUNTER_CLOCK: u32 = CLOCK_BOOTTIME;
    #[cfg(not(target_os = "linux"))]
    pub(super) const COUNTER_CLOCK: u32 = CLOCK_REALTIME;
    /// The first clock id a sequence may define for itself (tracing-perfetto-file's
    /// incremental clock is 64): timestamps on it are deltas.
    pub(super) const FIRST_SEQUENCE_CLOCK: u32 = 64;
}

/// The sequence spanprof's own packets go on. tracing-perfetto-file numbers its sequences from
/// 65536 up.
const SPANPROF_SEQUENCE: u32 = 1;

/// A builtin clock read now, in ns, beside `Instant::now()`: maps instants onto that clock.
#[derive(Debug, Clone, Copy)]
pub(super) struct ClockReading {
    pub(super) id: u32,
    pub(super) ns: u64,
    pub(super) at: Instant,
}

impl ClockReading {
    /// Reads builtin clock `id`, if spanprof can here: REALTIME everywhere; BOOTTIME (what
    /// tracing-perfetto-file stamps with on Linux) and MONOTONIC on Linux.
    pub(super) fn now(id: u32) -> Option<Self> {
        let at = Instant::now();
        let ns = match id {
            proto::CLOCK_REALTIME => SystemTime::now()
                .duration_since(SystemTime::UNIX_EPOCH)
                .ok()?
                .as_nanos() as u64,
            #[cfg(target_os = "linux")]
            proto::CLOCK_BOOTTIME => linux_clock(libc::CLOCK_BOOTTIME)?,
            #[cfg(target_os = "linux")]
            proto::CLOCK_MONOTONIC => linux_clock(libc::CLOCK_MONOTONIC)?,
            _ => return None,
        };
        Some(Self { id, ns, at })
    }

    /// `at` on this clock.
    pub(super) fn ns_at(&self, at: Instant) -> u64 {
        match at.checked_duration_since(self.at) {
            Some(after) => self.ns.saturating_add(after.as_nanos() as u64),
            None => self
                .ns
                .saturating_sub(self.at.duration_since(at).as_nanos() as u64),
        }
    }
}

#[cfg(target_os = "linux")]
fn linux_clock(clock: libc::clockid_t) -> Option<u64> {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid out-pointer for the call.
    #[allow(unsafe_code)]
    let rc = unsafe { libc::clock_gettime(clock, &mut ts) };
    (rc == 0).then(|| (ts.tv_sec as u64) * 1_000_000_000 + ts.tv_nsec as u64)
}

/// What [`complete`] adds to a window's packets.
pub(super) struct Completion<'a> {
    pub(super) start: Instant,
    pub(super) end: Instant,
    pub(super) counters: &'a [Counter],
    /// Shown as the window track's one slice, e.g. `train_step steps 16-18`.
    pub(super) label: &'a str,
    /// Reads a builtin clock (tests fix it).
    pub(super) clock: &'a dyn Fn(u32) -> Option<ClockReading>,
}

/// A packet sequence as read back: its clock, and the slices still open on its thread track.
#[derive(Debug, Default)]
struct Sequence {
    /// The builtin clock of its absolute timestamps, and its time now.
    clock: Option<u32>,
    time: u64,
    thread_track: Option<u64>,
    open: u64,
}

/// Reads a window's packets (tracing-perfetto-file's output) and returns the packets to append:
///
/// * every slice begun on a thread track and not ended (a span still entered when the window
///   closed) is ended at the window's end (or at its sequence's last packet, if later), marked
///   with the debug annotation `unfinished: true`;
/// * one counter track per counter series (`memory.rss_mib`, `cpu.process_pct`,
///   `gpu0.util_pct`, …) under the process, with a value per sample;
/// * a track `spanprof window` under the process with one slice, the window's label, from its
///   start to its end.
///
/// Also returns how many slices it ended.
///
/// # Errors
/// If `bytes` is not a Perfetto trace (a `Trace` message of `TracePacket`s).
pub(super) fn complete(bytes: &[u8], with: &Completion<'_>) -> io::Result<(Vec<u8>, usize)> {
    let invalid = |e: prost::DecodeError| io::Error::new(io::ErrorKind::InvalidData, e);
    let mut sequences: BTreeMap<u32, Sequence> = BTreeMap::new();
    let mut process = None;
    let mut buf = bytes;
    while !buf.is_empty() {
        let (tag, wire) = prost::encoding::decode_key(&mut buf).map_err(invalid)?;
        if (tag, wire) != (1, prost::encoding::WireType::LengthDelimited) {
            prost::encoding::skip_field(wire, tag, &mut buf, Default::default())
                .map_err(invalid)?;
            continue;
        }
        let len = prost::encoding::decode_varint(&mut buf).map_err(invalid)? as usize;
        if len > buf.len() {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "a packet runs past the end of the file",
            ));
        }
        let packet = proto::TracePacket::decode(&buf[..len]).map_err(invalid)?;
        buf = &buf[len..];
        if let Some(d) = &packet.track_descriptor {
            if d.process.is_some() {
                process = process.or(d.uuid);
            }
        }
        let Some(id) = packet.trusted_packet_sequence_id else {
            continue;
        };
        let seq = sequences.entry(id).or_default();
        if let Some(ts) = packet.timestamp {
            match packet.timestamp_clock_id {
                // An absolute time on a builtin clock (the sequence's first packet).
                Some(clock) if clock < proto::FIRST_SEQUENCE_CLOCK => {
                    seq.clock = Some(clock);
                    seq.time = ts;
                }
                // A delta on the sequence's incremental clock.
                _ => seq.time = seq.time.saturating_add(ts),
            }
        }
        if let Some(track) = packet
            .trace_packet_defaults
            .as_ref()
            .and_then(|d| d.track_event_defaults.as_ref())
            .and_then(|d| d.track_uuid)
        {
            seq.thread_track = Some(track);
        }
        if let Some(event) = &packet.track_event {
            // Slices on the thread track (no track of their own).
            if event.track_uuid.is_none() {
                match event.r#type {
                    Some(proto::SLICE_BEGIN) => seq.open += 1,
                    Some(proto::SLICE_END) => seq.open = seq.open.saturating_sub(1),
                    _ => {}
                }
            }
        }
    }

    let mut out = Vec::new();
    let mut push = |packet: proto::TracePacket| {
        let packet = proto::TracePacket {
            trusted_packet_sequence_id: Some(SPANPROF_SEQUENCE),
            ..packet
        };
        prost::encoding::message::encode(1, &packet, &mut out);
    };
    let mut ended = 0;
    for seq in sequences.values() {
        let (Some(clock), Some(track), 1..) = (seq.clock, seq.thread_track, seq.open) else {
            continue;
        };
        let end = (with.clock)(clock).map_or(seq.time, |c| c.ns_at(with.end).max(seq.time));
        for _ in 0..seq.open {
            push(proto::TracePacket {
                timestamp: Some(end),
                timestamp_clock_id: Some(clock),
                track_event: Some(proto::TrackEvent {
                    r#type: Some(proto::SLICE_END),
                    track_uuid: Some(track),
                    debug_annotations: vec![proto::DebugAnnotation {
                        name: Some("unfinished".into()),
                        bool_value: Some(true),
                    }],
                    ..Default::default()
                }),
                ..Default::default()
            });
            ended += 1;
        }
    }

    let Some(clock) = (with.clock)(proto::COUNTER_CLOCK) else {
        return Ok((out, ended));
    };
    // Track ids of spanprof's own: tracing-perfetto-file draws its own from a random base.
    let base = std::collections::hash_map::RandomState::new().hash_one(("spanprof", with.label));
    let mut uuids = (1u64..).map(|i| base.wrapping_add(i << 20));
    let track = |name: String, counter: bool, uuid: u64| proto::TracePacket {
        track_descriptor: Some(proto::TrackDescriptor {
            uuid: Some(uuid),
            name: Some(name),
            parent_uuid: process,
            counter: counter.then(proto::CounterDescriptor::default),
            ..Default::default()
        }),
        ..Default::default()
    };
    let event = |at: Instant, event: proto::TrackEvent| proto::TracePacket {
        timestamp: Some(clock.ns_at(at)),
        timestamp_clock_id: Some(clock.id),
        track_event: Some(event),
        ..Default::default()
    };
    let window = uuids.next().unwrap_or(base);
    push(track("spanprof window".into(), false, window));
    for (at, ty) in [
        (with.start, proto::SLICE_BEGIN),
        (with.end, proto::SLICE_END),
    ] {
        push(event(
            at,
            proto::TrackEvent {
                r#type: Some(ty),
                track_uuid: Some(window),
                name: (ty == proto::SLICE_BEGIN).then(|| with.label.to_string()),
                ..Default::default()
            },
        ));
    }
    let mut series: BTreeMap<String, u64> = BTreeMap::new();
    for counter in with.counters {
        for (name, value) in &counter.values {
            if !value.is_finite() {
                continue;
            }
            let key = format!("{}.{name}", counter.name);
            let uuid = match series.get(&key) {
                Some(uuid) => *uuid,
                None => {
                    let uuid = uuids.next().unwrap_or(base);
                    push(track(key.clone(), true, uuid));
                    series.insert(key, uuid);
                    uuid
                }
            };
            push(event(
                counter.at,
                proto::TrackEvent {
                    r#type: Some(proto::COUNTER),
                    track_uuid: Some(uuid),
                    double_counter_value: Some(*value),
                    ..Default::default()
                },
            ));
        }
    }
    Ok((out, ended))
}

/// Completes a window's file: its packets as tracing-perfetto-file wrote them, then those
/// [`complete`] adds, written at the window's path atomically.
pub(super) fn complete_file(info: &WindowInfo, partial: &Path) -> Result<()> {
    let bytes =
        std::fs::read(partial).map_err(|source| info.io_error("reading perfetto trace", source))?;
    let end = info.end.get().copied().unwrap_or_else(Instant::now);
    let counters = match &info.counters {
        Some(source) => source.window(info.start, end),
        None => Vec::new(),
    };
    let (tail, _) = complete(
        &bytes,
        &Completion {
            start: info.start,
            end,
            counters: &counters,
            label: &info.label,
            clock: &ClockReading::now,
        },
    )
    .map_err(|source| info.io_error("parsing perfetto trace", source))?;
    crate::atomic_file::write(&info.path, "writing perfetto trace", |out| {
        let mut out = Disk {
            inner: out,
            left: info.disk.clone(),
        };
        out.write_all(&bytes)?;
        out.write_all(&tail)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn packet(seq: u32, ts: Option<(u64, Option<u32>)>, event: Option<i32>) -> proto::TracePacket {
        proto::TracePacket {
            timestamp: ts.map(|t| t.0),
            timestamp_clock_id: ts.and_then(|t| t.1),
            trusted_packet_sequence_id: Some(seq),
            track_event: event.map(|ty| proto::TrackEvent {
                r#type: Some(ty),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    fn encode(packets: &[proto::TracePacket]) -> Vec<u8> {
        let mut out = Vec::new();
        for p in packets {
            prost::encoding::message::encode(1, p, &mut out);
        }
        out
    }

    fn decode(mut buf: &[u8]) -> Vec<proto::TracePacket> {
        let mut out = Vec::new();
        while !buf.is_empty() {
            prost::encoding::decode_key(&mut buf).unwrap();
            let len = prost::encoding::decode_varint(&mut buf).unwrap() as usize;
            out.push(proto::TracePacket::decode(&buf[..len]).unwrap());
            buf = &buf[len..];
        }
        out
    }

    #[test]
    fn ends_open_slices_and_appends_counter_tracks() {
        let t0 = Instant::now();
        // A clock at 1 000 000 ns at t0, for every clock id.
        let clock = move |id| {
            Some(ClockReading {
                id,
                ns: 1_000_000,
                at: t0,
            })
        };
        let defaults = |seq, track| proto::TracePacket {
            trace_packet_defaults: Some(proto::TracePacketDefaults {
                track_event_defaults: Some(proto::TrackEventDefaults {
                    track_uuid: Some(track),
                }),
            }),
            ..packet(seq, Some((1_000_000, Some(6))), None)
        };
        let process = proto::TracePacket {
            track_descriptor: Some(proto::TrackDescriptor {
                uuid: Some(77),
                process: Some(proto::ProcessDescriptor { pid: Some(1) }),
                ..Default::default()
            }),
            ..packet(70_000, None, None)
        };
        let bytes = encode(&[
            defaults(70_000, 11),
            process,
            packet(70_000, Some((10, None)), Some(proto::SLICE_BEGIN)),
            packet(70_000, Some((10, None)), Some(proto::SLICE_BEGIN)),
            packet(70_000, Some((10, None)), Some(proto::SLICE_END)),
            // Another thread: balanced.
            defaults(70_001, 12),
            packet(70_001, Some((5, None)), Some(proto::SLICE_BEGIN)),
            packet(70_001, Some((5, None)), Some(proto::SLICE_END)),
        ]);
        let counters = [Counter {
            at: t0 + Duration::from_micros(3),
            name: "memory".into(),
            values: vec![("rss_mib".into(), 12.5), ("heap_mib".into(), f64::NAN)],
        }];
        let (tail, ended) = complete(
            &bytes,
            &Completion {
                start: t0,
                end: t0 + Duration::from_micros(20),
                counters: &counters,
                label: "step steps 1-2",
                clock: &clock,
            },
        )
        .unwrap();
        assert_eq!(ended, 1);
        let tail = decode(&tail);
        assert!(tail
            .iter()
            .all(|p| p.trusted_packet_sequence_id == Some(SPANPROF_SEQUENCE)));
        let end = &tail[0];
        assert_eq!(end.timestamp, Some(1_020_000), "at the window's end");
        assert_eq!(end.timestamp_clock_id, Some(6), "on the sequence's clock");
        let e = end.track_event.as_ref().unwrap();
        assert_eq!((e.r#type, e.track_uuid), (Some(proto::SLICE_END), Some(11)));
        assert_eq!(e.debug_annotations[0].bool_value, Some(true));
        // The window track and its slice, then one counter track (NaN left out) and its value.
        let names: Vec<&str> = tail
            .iter()
            .filter_map(|p| p.track_descriptor.as_ref()?.name.as_deref())
            .collect();
        assert_eq!(names, ["spanprof window", "memory.rss_mib"]);
        assert!(tail
            .iter()
            .filter_map(|p| p.track_descriptor.as_ref())
            .all(|d| d.parent_uuid == Some(77)));
        let label = tail
            .iter()
            .find_map(|p| p.track_event.as_ref()?.name.as_deref());
        assert_eq!(label, Some("step steps 1-2"));
        let value = tail.last().unwrap();
        assert_eq!(value.timestamp, Some(1_003_000));
        let v = value.track_event.as_ref().unwrap();
        assert_eq!(v.r#type, Some(proto::COUNTER));
        assert_eq!(v.double_counter_value, Some(12.5));
    }

    #[test]
    fn not_a_trace_is_an_error() {
        let with = Completion {
            start: Instant::now(),
            end: Instant::now(),
            counters: &[],
            label: "l",
            clock: &|_| None,
        };
        assert!(complete(b"[\n{\"ph\":\"B\"}", &with).is_err());
        // Nothing to complete, no clock: nothing appended.
        assert_eq!(complete(b"", &with).unwrap(), (Vec::new(), 0));
    }
}
