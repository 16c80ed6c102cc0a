//! An observer: a `plaza-client` session behind the emulated link that renders every remote
//! avatar at 60 Hz through the replica directory and records what it showed.

use std::time::{Duration, Instant};

use plaza_client::tokio::{Client, ClientOptions, Polled};
use plaza_client::{Event, ReplicaDirectory, SmoothingConfig};

/// One rendered pose.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Shown {
    /// Local time, seconds since the run started.
    pub(crate) local_s: f64,
    /// The server time the smoother shows (pose tick / tick rate), seconds.
    pub(crate) render_t: f64,
    /// Entity.
    pub(crate) entity: u32,
    /// Position shown, metres.
    pub(crate) position: [f64; 3],
    /// Snaps of this entity's smoother so far: teleport, distance, gap, blend.
    pub(crate) snaps: [u64; 4],
    /// Whether this entry is in its first-sighting cooldown.
    pub(crate) cooling: bool,
    /// Whether the smoother ran past its newest sample (extrapolating).
    pub(crate) extrapolating: bool,
    /// The entity's tier for this observer (0 near .. 3 far; the room sends a tier-`t`
    /// avatar's steady motion every `2^t` frames, PROTOCOL.md §2.8).
    pub(crate) tier: u8,
    /// The smoother's trailing interval, seconds (diagnostics: `FELT_DUMP`).
    pub(crate) interval_s: f64,
    /// The smoother's link-delay envelope on the log's clock (arrival since the run started
    /// minus server time), seconds (diagnostics: `FELT_DUMP`).
    pub(crate) link_s: f64,
}

/// What an observer saw.
#[derive(Debug, Default)]
pub(crate) struct ObserverLog {
    /// Rendered poses, in order.
    pub(crate) shown: Vec<Shown>,
    /// Frame arrivals: (local seconds since the run started, tick).
    pub(crate) frames: Vec<(f64, u32)>,
    /// The room's tick rate.
    pub(crate) tick_hz: u32,
    /// The room's broadcast rate.
    pub(crate) broadcast_hz: u32,
    /// The observer's own entity.
    pub(crate) entity: u32,
    /// Own entities over the run (a resume keeps it).
    pub(crate) entities: Vec<u32>,
    /// Entries created (a new render binding each).
    pub(crate) inserted: u64,
    /// Entries kept across a reconnect.
    pub(crate) kept_across_resume: u64,
    /// Entries that had a binding before a cut and got a new one after it.
    pub(crate) rebound_after_cut: u64,
    /// Reconnects (transports opened after the first).
    pub(crate) reconnects: u64,
    /// Sessions resumed with the token.
    pub(crate) resumes: u64,
    /// Resyncs sent.
    pub(crate) resyncs: u64,
    /// Chain breaks and check mismatches.
    pub(crate) frame_failures: u64,
    /// Ping round trips, ms.
    pub(crate) rtts_ms: Vec<f64>,
    /// Session ids seen (exact u64).
    pub(crate) session_ids: Vec<u64>,
}

/// Observes until `until`; `t0` is the run's start (the log's clock).
pub(crate) async fn observe(
    url: String,
    room: String,
    smoothing: SmoothingConfig,
    t0: Instant,
    until: Instant,
) -> anyhow::Result<ObserverLog> {
    let mut opts = ClientOptions::new(url).room(room);
    opts.connection.client_name = "plaza-felt-observer".into();
    opts.connection.ping_interval_s = 1.0;
    let mut c = Client::connect(opts).await?;
    let mut dir: ReplicaDirectory<u64> = ReplicaDirectory::new(smoothing);
    let mut log = ObserverLog::default();
    let base = t0.duration_since(c.instant_at(0.0)).as_secs_f64();
    let frame = Duration::from_micros(16_667);
    let mut next_render = Instant::now();
    let mut handles = 0u64;
    let mut bound_before_cut: std::collections::BTreeMap<u32, u64> = Default::default();
    let mut cut_seen = false;
    let mut tiers: std::collections::BTreeMap<u32, u8> = Default::default();
    let mut samples = std::env::var_os("FELT_SAMPLES").and_then(|p| std::fs::File::create(p).ok());
    while Instant::now() < until {
        match c.next(Some(next_render.min(until))).await {
            Polled::Event(e) => {
                let now = c.now();
                match &e {
                    Event::Joined(j) => {
                        log.tick_hz = j.tick_hz;
                        log.broadcast_hz = j.broadcast_hz;
                        log.entity = j.entity;
                        log.entities.push(j.entity);
                    }
                    Event::Negotiated { session_id, .. } => log.session_ids.push(*session_id),
                    Event::Frame { tick, .. } => log.frames.push((now - base, *tick)),
                    Event::Pong { rtt_s } => log.rtts_ms.push(rtt_s * 1000.0),
                    Event::EntityEntered(c) | Event::EntityUpdated(c) => {
                        tiers.insert(c.entity(), c.tier);
                        if let Some(d) = samples.as_mut() {
                            // FELT_SAMPLES=path: every record a frame delivered (local arrival
                            // s, entity, pose tick, tier, x, z, vx, vz), for looking into a run.
                            use std::io::Write as _;
                            let p = c.record.pose.to_pose();
                            let _ = writeln!(
                                d,
                                "{},{},{},{},{},{},{},{}",
                                now - base,
                                c.entity(),
                                c.pose_tick,
                                c.tier,
                                p.position[0],
                                p.position[2],
                                p.velocity[0],
                                p.velocity[2],
                            );
                        }
                    }
                    Event::Closed { .. } => {
                        cut_seen = true;
                        bound_before_cut = dir
                            .iter()
                            .filter_map(|r| Some((r.entity, r.binding?)))
                            .collect();
                    }
                    _ => {}
                }
                dir.handle_event(&e, now);
                // The renderer: spawn what has no binding, despawn what was removed.
                let unbound: Vec<u32> = dir.unbound_entries().collect();
                for id in unbound {
                    handles += 1;
                    let _ = dir.bind(id, handles);
                    if cut_seen && bound_before_cut.contains_key(&id) {
                        log.rebound_after_cut += 1;
                    }
                }
                dir.drain_unbound().for_each(drop);
            }
            Polled::Ended => anyhow::bail!("observer: connection ended"),
            Polled::Deadline => {
                let now = c.now();
                if Instant::now() >= next_render {
                    next_render += frame;
                    if next_render < Instant::now() {
                        next_render = Instant::now() + frame;
                    }
                    dir.advance(now);
                    for r in dir.iter().filter(|r| r.kind == 0) {
                        let (Some(p), Some(rd)) = (r.position(), r.rendered()) else {
                            continue;
                        };
                        log.shown.push(Shown {
                            local_s: now - base,
                            render_t: rd.render_t,
                            entity: r.entity,
                            position: p,
                            snaps: r.smoothing().snaps,
                            cooling: rd.phase == plaza_client::Phase::Cooldown,
                            extrapolating: rd.phase == plaza_client::Phase::Extrapolating,
                            tier: tiers.get(&r.entity).copied().unwrap_or(0),
                            interval_s: r.smoother().interval_s(),
                            link_s: r.smoother().link_s() - base,
                        });
                    }
                }
            }
        }
    }
    let st = c.connection().stats();
    log.inserted = dir.stats().inserted;
    log.kept_across_resume = dir.stats().kept_across_resume;
    log.reconnects = c.connects.saturating_sub(1);
    log.resumes = st.resumes;
    log.resyncs = st.resyncs;
    log.frame_failures = st.chain_breaks + st.check_mismatches + st.decode_errors;
    c.close().await;
    Ok(log)
}
