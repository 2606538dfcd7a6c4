//! The I/O layer's fixed limits, in one place. Each bounds memory, a queue
//! or work that input from the network can grow; units are last in the
//! names, and each says why it is what it is.
//!
//! These are fixed because they bound the node's own structures (buffers,
//! tables, queues) at sizes that are safe on any host and that no
//! deployment has needed to change. What an operator tunes is a config
//! field instead (`config.rs`): `[limits]` (what one source may cost the
//! DSHT, `coral::Config`), `[proxy]` (`connections_max`, `object_bytes_max`,
//! `vary_variants_max`, timeouts) and `[dnssrv]` (rates, `clients_max`,
//! `tcp_connections_max`, `held_max`). The core crate's own fixed bounds
//! are `coral::limits` (dnssrv's and the proxy's, `coral::limits::DNS`,
//! `coral::limits::PROXY`), `coral::dsht::limits` and
//! `coral::proxy::http::Limits`; SECURITY.md lists them all.
//!
//! Each file keeps its constants' names, defined from these structs
//! (`const CONNECTIONS_MAX: usize = limits::ADMIN.connections_max;`).

use std::time::Duration;

/// The admin endpoint (`admin.rs`): loopback, no authentication, so local
/// users can hold connections open; these keep one of them from starving
/// core 0.
pub struct AdminLimits {
    /// Largest request head accepted: the admin requests are one line and a
    /// few headers.
    pub request_bytes_max: usize,
    /// Longest a client may take to send its whole request (one deadline
    /// for all its reads: a slowloris cannot stretch it).
    pub request_timeout: Duration,
    /// Longest one connection is served, start to end: the request, a DSHT
    /// operation (`operation_timeout_ms`, 30 s by default) and the answer.
    pub connection_deadline: Duration,
    /// Admin connections open at once (each a descriptor and a task).
    pub connections_max: usize,
}

/// The admin endpoint's limits.
pub const ADMIN: AdminLimits = AdminLimits {
    request_bytes_max: 8 << 10,
    request_timeout: Duration::from_secs(5),
    connection_deadline: Duration::from_secs(40),
    connections_max: 64,
};

/// The one TCP accept loop (`accept.rs`), for every listener.
pub struct AcceptLimits {
    /// Connections evicted at a listener's cap that may still be closing
    /// (their tasks not yet ended, their descriptors still open) before
    /// the listener accepts again; at most its `connections_max` too.
    /// With the cap, a listener holds at most `connections_max` plus this
    /// many descriptors (it held up to twice its cap: 280 of a node's 256
    /// descriptors at a cap of 140 under a slowloris flood, so `accept`
    /// met EMFILE).
    pub closing_max: usize,
}

/// The accept loop's limits.
pub const ACCEPT: AcceptLimits = AcceptLimits { closing_max: 32 };

/// dnssrv's runtime (`dns.rs`); the answers' own limits are `[dnssrv]`
/// fields and `coral::dns` constants.
pub struct DnsLimits {
    /// Largest query datagram read: the most any EDNS client may send, as
    /// our advertised payload size is at most 4096. A longer datagram is
    /// dropped unread (the kernel's MSG_TRUNC) and counted (`oversized`).
    pub udp_query_bytes_max: usize,
    /// Datagrams read in one go once the socket is readable (then the
    /// loop waits through the ring again, and the executor's other tasks
    /// get their turn).
    pub recv_batch_max: usize,
    /// Proxies of one level pinged per verification follow-up: a query can
    /// trigger this much DSHT traffic, no more (the core's
    /// `verify_pings_max` bounds the node's pings in flight in all).
    pub verify_proxy_pings_per_level_max: usize,
    /// DSHT addresses pinged for one liveness check of a proxy (issue 24):
    /// the routing tables' contacts with the proxy's IP address (one node
    /// per address in a deployment; more only where nodes share one).
    pub live_check_pings_max: usize,
    /// Hops a client's path is probed out to (all at once): past ~24 hops
    /// a path has left any network near the client.
    pub probe_hops_max: u8,
    /// Hint lookups (each a few DSHT gets) running at once per core; beyond
    /// it a client's lookup is dropped (it finds no near node this time).
    pub hint_lookups_inflight_max: usize,
    /// Probes queued per core for the probe thread before new ones are
    /// dropped.
    pub probes_queued_max: usize,
    /// A DNS-over-TCP connection's socket send buffer (`SO_SNDBUF`; the
    /// kernel doubles it): the answers a pipelining client may leave
    /// unread, since the next query is read only once the last answer is
    /// written. Half the largest answer; a larger one is written as the
    /// client reads.
    pub tcp_send_buffer_bytes: usize,
}

/// dnssrv's runtime limits.
pub const DNS: DnsLimits = DnsLimits {
    udp_query_bytes_max: 4096,
    recv_batch_max: 256,
    verify_proxy_pings_per_level_max: 8,
    live_check_pings_max: 2,
    probe_hops_max: 24,
    hint_lookups_inflight_max: 16,
    probes_queued_max: 64,
    tcp_send_buffer_bytes: 32 << 10,
};

/// CoralProxy's runtime (`proxy/`): the per-core tables anyone can grow by
/// requesting names, and what a client may send.
pub struct ProxyLimits {
    /// Largest request body drained (a GET with a body); more closes the
    /// connection.
    pub request_body_bytes_max: u64,
    /// Objects per core whose hits take the fast path: slots of the
    /// direct-mapped table from Host and target bytes to the key (a flood
    /// of names only evicts, sending hits down the full path).
    pub hot_objects_max: usize,
    /// Longest Host plus target a hot-object entry is made for.
    pub hot_name_bytes_max: usize,
    /// Longest stored head a hot-object entry is made for (it keeps the
    /// bytes, the decoded head and the built client head: a few KiB per
    /// entry at most).
    pub hot_head_bytes_max: usize,
    /// URLs whose first variant's pointer under its variant key is renewed
    /// (`Vary`), per core.
    pub variant_pointers_max: usize,
    /// Decoded stored heads kept per core (`stored::DecodedHeads`).
    pub decoded_heads_max: usize,
    /// Longest stored head whose decoded form is kept: a longer one (up to
    /// `Limits::head_bytes_max`) is decoded on each use, so the memo holds
    /// at most `decoded_heads_max` heads of a few KiB each.
    pub decoded_head_bytes_max: usize,
    /// Free client input buffers a core keeps for its connections' next
    /// requests (each `Limits::head_bytes_max` plus 16 KiB): an idle
    /// keep-alive connection gives its buffer back, so this many at most
    /// are held beyond those of connections reading (issue 27).
    pub pooled_input_buffers_max: usize,
    /// Input buffers a core keeps parked in its readiness set for the
    /// connections that gave them up to wait for their next request, so
    /// that a keep-alive client's next request takes its own buffer back
    /// without the pool (issue 27, session 7). Each is parked until that
    /// request comes or for one to two seconds (the deadline sweep takes
    /// it to the pool), and beyond this many a waiting connection gives its
    /// buffer to the pool as before: an idle connection holds none.
    pub parked_input_buffers_max: usize,
}

/// CoralProxy's runtime limits.
pub const PROXY: ProxyLimits = ProxyLimits {
    request_body_bytes_max: 1 << 20,
    hot_objects_max: 2048,
    hot_name_bytes_max: 1024,
    hot_head_bytes_max: 4096,
    variant_pointers_max: 1 << 16,
    decoded_heads_max: 4096,
    decoded_head_bytes_max: 4096,
    pooled_input_buffers_max: 64,
    parked_input_buffers_max: 64,
};

/// What the proxy relays of an origin's answers that it does not store
/// (`proxy/fetcher.rs`, `proxy/upstream.rs`; issue 26 items 1, 5, 9).
pub struct RelayLimits {
    /// Largest body of an origin's error answer (a 5xx not stored) held in
    /// memory to relay to every request waiting for the fetch; a larger
    /// one answers them with coral's own page naming the status.
    pub error_body_bytes_max: usize,
    /// Interim (1xx) responses forwarded before an answer; more are read
    /// and dropped.
    pub interim_responses_max: usize,
    /// Bytes of interim responses kept to forward per answer.
    pub interim_bytes_max: usize,
    /// Largest body copied to store a 304's updated head with it (RFC 9111
    /// §4.3.4); above, only the copy's freshness is updated.
    pub revalidated_copy_bytes_max: u64,
    /// Fields `[proxy] forward_request_fields` may list.
    pub forward_request_fields_max: usize,
}

/// Limits of what the proxy relays without storing.
pub const RELAY: RelayLimits = RelayLimits {
    error_body_bytes_max: 64 << 10,
    interim_responses_max: 4,
    interim_bytes_max: 8 << 10,
    revalidated_copy_bytes_max: 16 << 20,
    forward_request_fields_max: 16,
};

/// The disk cache (`cache/`): bounds of its record format and segment
/// table.
pub struct CacheLimits {
    /// The largest object the cache stores, in bytes: the space reserved
    /// for a body of unknown length (`[proxy] object_bytes_max` bounds what
    /// is fetched; its default is the same 50 MB).
    pub object_bytes_max: u64,
    /// The largest stored response head, in bytes: the index keeps its
    /// length in 16 bits (a format bound).
    pub head_bytes_max: usize,
    /// Segment table slots per core (packing, solo and in-progress
    /// segments).
    pub segments_per_core_max: u32,
    /// Smallest packing segment, in bytes.
    pub segment_bytes_min: u64,
    /// Largest packing segment, in bytes.
    pub segment_bytes_max: u64,
    /// The default object cap (`[proxy] cache_objects_max` unset) allows
    /// one object per this many bytes of the cache's size: the index's RAM
    /// (at most `cache::INDEX_BYTES_PER_OBJECT_MAX` per object) is then
    /// about 1% of the disk space at most.
    pub object_bytes_mean_default: u64,
    /// The default object cap's floor and ceiling, whole cache (the
    /// ceiling keeps a huge disk's index under ~2.5 GiB of RAM unless the
    /// operator raises `cache_objects_max`).
    pub objects_default_min: u64,
    pub objects_default_max: u64,
    /// Cleanings in a row, within one store's `make_room`, that leave the
    /// core's accounted bytes no lower than their lowest so far; past it the
    /// store only evicts. A cleaning that must open a new packing segment
    /// for the objects it moves frees nothing unless a following one fills
    /// that segment's room, so two are allowed; more moved objects from
    /// segment to segment without end (a 4 KiB store into a 200,000-byte
    /// cache cleaned 60 GB in 348 s before it said full).
    pub cleans_without_gain_max: u32,
    /// Steps (evictions, cleanings, sweeps) one `make_room` takes before it
    /// answers full: each step evicts an object or frees bytes, so this
    /// bounds one store's work whatever the cache holds.
    pub make_room_steps_max: u32,
}

/// The disk cache's limits.
pub const CACHE: CacheLimits = CacheLimits {
    object_bytes_max: 50_000_000,
    head_bytes_max: (64 << 10) - 1,
    segments_per_core_max: 4096,
    segment_bytes_min: 64 << 10,
    segment_bytes_max: 64 << 20,
    object_bytes_mean_default: 16 << 10,
    objects_default_min: 4096,
    objects_default_max: 16 << 20,
    cleans_without_gain_max: 2,
    make_room_steps_max: 1_000_000,
};

/// The access log (`accesslog.rs`): a line per response, of fields a
/// client chooses, written by one thread.
pub struct AccessLogLimits {
    /// Batches queued for the writer before new ones are dropped (a slow
    /// disk loses lines, never stalls a core).
    pub batches_queued_max: usize,
    /// Escaped bytes kept of the request line; with the next three, a line
    /// stays under PIPE_BUF (4096), so concurrent appends never interleave.
    pub request_line_bytes_max: usize,
    /// Escaped bytes kept of the Referer.
    pub referer_bytes_max: usize,
    /// Escaped bytes kept of the User-Agent.
    pub user_agent_bytes_max: usize,
    /// Escaped bytes kept of the Host.
    pub host_bytes_max: usize,
}

/// The access log's limits.
pub const ACCESS_LOG: AccessLogLimits = AccessLogLimits {
    batches_queued_max: 64,
    request_line_bytes_max: 1536,
    referer_bytes_max: 768,
    user_agent_bytes_max: 768,
    host_bytes_max: 300,
};

/// What the status page and `/metrics` keep (`status.rs`, `metrics.rs`):
/// fixed-size sketches, whatever names requests carry.
pub struct StatusLimits {
    /// Entries in each core's top-objects sketch.
    pub top_objects_per_core: usize,
    /// Top objects in the merged answer.
    pub top_objects_max: usize,
    /// Longest URL kept for an entry, in bytes (longer ones are cut).
    pub url_bytes_max: usize,
    /// Samples kept per core: an hour at one every 10 s.
    pub samples_max: usize,
    /// Hottest DSHT keys reported per core and in the merged answer.
    pub hot_keys_max: usize,
    /// Cluster members reported per level (the nearest by RTT).
    pub members_per_level_max: usize,
    /// Distinct (method, status, cache) combinations a core counts; more
    /// are counted under status 0.
    pub http_series_max: usize,
}

/// The status page's and `/metrics`' limits.
pub const STATUS: StatusLimits = StatusLimits {
    top_objects_per_core: 32,
    top_objects_max: 32,
    url_bytes_max: 256,
    samples_max: 360,
    hot_keys_max: 16,
    members_per_level_max: 64,
    http_series_max: 256,
};

/// The runtime (`runtime.rs`): channels between cores and the DSHT
/// socket's reads.
pub struct RuntimeLimits {
    /// Messages queued per mesh channel between two cores.
    pub mesh_channel_capacity: usize,
    /// DSHT datagrams read without waiting after each awaited one (in
    /// `recvmmsg` batches of `mmsg_batch`); then the core's other tasks run.
    pub recv_batch_max: usize,
    /// DSHT datagrams moved per `recvmmsg` / `sendmmsg` call: the receive
    /// buffers are this many of `coral::dsht::wire::MESSAGE_BYTES_MAX` + 1
    /// bytes per core (300 KiB), whatever arrives.
    pub mmsg_batch: usize,
    /// Contacts per level sent in one routing-table sync from core 0.
    pub table_sync_contacts_max: usize,
    /// Routers probed for clustering hints (§4.4: up to five hops out).
    pub hint_hops_max: u8,
}

/// The runtime's limits.
pub const RUNTIME: RuntimeLimits = RuntimeLimits {
    mesh_channel_capacity: 4096,
    recv_batch_max: 256,
    mmsg_batch: 32,
    table_sync_contacts_max: 4096,
    hint_hops_max: 5,
};

/// The value of a limit named as SECURITY.md names it
/// (`limits::ADMIN.connections_max`), as it writes it: a count or bytes as
/// a number, a duration as seconds ("5 s").
#[cfg(test)]
pub fn value_of(name: &str) -> Option<String> {
    let n = |v: u64| Some(v.to_string());
    let secs = |d: Duration| Some(format!("{} s", d.as_secs()));
    match name {
        "limits::ADMIN.request_bytes_max" => n(ADMIN.request_bytes_max as u64),
        "limits::ADMIN.request_timeout" => secs(ADMIN.request_timeout),
        "limits::ADMIN.connection_deadline" => secs(ADMIN.connection_deadline),
        "limits::ADMIN.connections_max" => n(ADMIN.connections_max as u64),
        "limits::ACCEPT.closing_max" => n(ACCEPT.closing_max as u64),
        "limits::DNS.udp_query_bytes_max" => n(DNS.udp_query_bytes_max as u64),
        "limits::DNS.recv_batch_max" => n(DNS.recv_batch_max as u64),
        "limits::DNS.verify_proxy_pings_per_level_max" => {
            n(DNS.verify_proxy_pings_per_level_max as u64)
        }
        "limits::DNS.probe_hops_max" => n(u64::from(DNS.probe_hops_max)),
        "limits::DNS.live_check_pings_max" => n(DNS.live_check_pings_max as u64),
        "limits::DNS.hint_lookups_inflight_max" => n(DNS.hint_lookups_inflight_max as u64),
        "limits::DNS.probes_queued_max" => n(DNS.probes_queued_max as u64),
        "limits::DNS.tcp_send_buffer_bytes" => n(DNS.tcp_send_buffer_bytes as u64),
        "limits::PROXY.request_body_bytes_max" => n(PROXY.request_body_bytes_max),
        "limits::PROXY.hot_objects_max" => n(PROXY.hot_objects_max as u64),
        "limits::PROXY.hot_name_bytes_max" => n(PROXY.hot_name_bytes_max as u64),
        "limits::PROXY.hot_head_bytes_max" => n(PROXY.hot_head_bytes_max as u64),
        "limits::PROXY.variant_pointers_max" => n(PROXY.variant_pointers_max as u64),
        "limits::PROXY.decoded_heads_max" => n(PROXY.decoded_heads_max as u64),
        "limits::PROXY.decoded_head_bytes_max" => n(PROXY.decoded_head_bytes_max as u64),
        "limits::PROXY.pooled_input_buffers_max" => n(PROXY.pooled_input_buffers_max as u64),
        "limits::PROXY.parked_input_buffers_max" => n(PROXY.parked_input_buffers_max as u64),
        "limits::RELAY.error_body_bytes_max" => n(RELAY.error_body_bytes_max as u64),
        "limits::RELAY.interim_responses_max" => n(RELAY.interim_responses_max as u64),
        "limits::RELAY.interim_bytes_max" => n(RELAY.interim_bytes_max as u64),
        "limits::RELAY.revalidated_copy_bytes_max" => n(RELAY.revalidated_copy_bytes_max),
        "limits::RELAY.forward_request_fields_max" => n(RELAY.forward_request_fields_max as u64),
        "limits::CHUNK_RECORDS.bytes_max" => n(CHUNK_RECORDS.bytes_max as u64),
        "limits::FILL.in_flight_reported_max" => n(FILL.in_flight_reported_max as u64),
        "limits::CACHE.object_bytes_max" => n(CACHE.object_bytes_max),
        "limits::CACHE.head_bytes_max" => n(CACHE.head_bytes_max as u64),
        "limits::CACHE.segments_per_core_max" => n(u64::from(CACHE.segments_per_core_max)),
        "limits::CACHE.segment_bytes_min" => n(CACHE.segment_bytes_min),
        "limits::CACHE.segment_bytes_max" => n(CACHE.segment_bytes_max),
        "limits::CACHE.object_bytes_mean_default" => n(CACHE.object_bytes_mean_default),
        "limits::CACHE.objects_default_min" => n(CACHE.objects_default_min),
        "limits::CACHE.objects_default_max" => n(CACHE.objects_default_max),
        "limits::CACHE.cleans_without_gain_max" => n(u64::from(CACHE.cleans_without_gain_max)),
        "limits::CACHE.make_room_steps_max" => n(u64::from(CACHE.make_room_steps_max)),
        "limits::ACCESS_LOG.batches_queued_max" => n(ACCESS_LOG.batches_queued_max as u64),
        "limits::ACCESS_LOG.request_line_bytes_max" => n(ACCESS_LOG.request_line_bytes_max as u64),
        "limits::ACCESS_LOG.referer_bytes_max" => n(ACCESS_LOG.referer_bytes_max as u64),
        "limits::ACCESS_LOG.user_agent_bytes_max" => n(ACCESS_LOG.user_agent_bytes_max as u64),
        "limits::ACCESS_LOG.host_bytes_max" => n(ACCESS_LOG.host_bytes_max as u64),
        "limits::STATUS.top_objects_per_core" => n(STATUS.top_objects_per_core as u64),
        "limits::STATUS.top_objects_max" => n(STATUS.top_objects_max as u64),
        "limits::STATUS.url_bytes_max" => n(STATUS.url_bytes_max as u64),
        "limits::STATUS.samples_max" => n(STATUS.samples_max as u64),
        "limits::STATUS.hot_keys_max" => n(STATUS.hot_keys_max as u64),
        "limits::STATUS.members_per_level_max" => n(STATUS.members_per_level_max as u64),
        "limits::STATUS.http_series_max" => n(STATUS.http_series_max as u64),
        "limits::RUNTIME.mesh_channel_capacity" => n(RUNTIME.mesh_channel_capacity as u64),
        "limits::RUNTIME.recv_batch_max" => n(RUNTIME.recv_batch_max as u64),
        "limits::RUNTIME.mmsg_batch" => n(RUNTIME.mmsg_batch as u64),
        "limits::RUNTIME.table_sync_contacts_max" => n(RUNTIME.table_sync_contacts_max as u64),
        "limits::RUNTIME.hint_hops_max" => n(u64::from(RUNTIME.hint_hops_max)),
        _ => None,
    }
}

/// Verified peer bytes (issue 22 item 4, `cache/chunks.rs`): the signed
/// records kept beside cached objects so they can be served to peers.
pub struct ChunkRecordLimits {
    /// Bytes of records kept for all cores (a signed head is 300 bytes, a
    /// chunk's signature 64 per 64 KiB of body: 64 MiB covers about 60 GiB
    /// of cached bodies); beyond it the oldest object's records go, and
    /// that copy is then served to clients only, never to peers.
    pub bytes_max: usize,
}

/// The limits of the chunk records.
pub const CHUNK_RECORDS: ChunkRecordLimits = ChunkRecordLimits {
    bytes_max: 64 << 20,
};

/// Fills in flight as the status page shows them (`proxy/fetcher.rs`,
/// issue 24 item 4).
pub struct FillLimits {
    /// Objects in flight each core reports (the merged answer holds at most
    /// this many per core).
    pub in_flight_reported_max: usize,
}

/// The limits of the objects-in-flight report.
pub const FILL: FillLimits = FillLimits {
    in_flight_reported_max: 32,
};
