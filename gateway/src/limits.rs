//! Per-session limits: frame size, input rates, outbound queue, handshake deadline, idle time
//! out of a room. The per-socket and per-address limits are in [`crate::edge`].

use std::time::Duration;

use tokio::time::Instant;

/// The limits the gateway enforces on every session.
#[derive(Clone, Debug)]
pub struct Limits {
    /// Largest client frame accepted, bytes; a larger one closes with 1009.
    pub max_frame_bytes: usize,
    /// Movement messages per second.
    pub movement_hz: u32,
    /// Expression messages per second (their own bucket; burst the same).
    pub expression_hz: u32,
    /// Other messages (join, leave, resync, ping, interactions...) per second.
    pub events_per_s: u32,
    /// Burst allowance of the event bucket.
    pub events_burst: u32,
    /// Time from the socket's accept to a valid negotiate (TLS handshake, WebSocket upgrade
    /// and negotiate all count; fixed at accept, so nothing the client sends extends it).
    pub handshake_deadline: Duration,
    /// How long a negotiated session may stay in no room (never joined, or left) before it is
    /// closed (4000, `idle_timeout`).
    pub unjoined_idle: Duration,
    /// Frames queued towards one client before frames are dropped.
    pub outbound_queue: usize,
    /// Overflows of the outbound queue within `slow_window` that disconnect the client.
    pub slow_strikes: u32,
    /// Window over which overflows are counted.
    pub slow_window: Duration,
    /// How long the gateway keeps trying to re-attach a session whose room stream broke.
    pub resume_deadline: Duration,
    /// How long a room stream may stay silent before the session re-attaches (a room sends
    /// every member a frame per broadcast period, so silence means a stalled node).
    pub node_silence: Duration,
    /// On shutdown (a gateway roll), clients are told to reconnect after a delay drawn
    /// uniformly from `0..reconnect_window`, so their reconnects spread over it.
    pub reconnect_window: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_frame_bytes: 16 * 1024,
            movement_hz: 20,
            expression_hz: 20,
            events_per_s: 5,
            events_burst: 10,
            handshake_deadline: Duration::from_secs(5),
            unjoined_idle: Duration::from_secs(30),
            outbound_queue: 64,
            slow_strikes: 3,
            slow_window: Duration::from_secs(10),
            resume_deadline: Duration::from_secs(30),
            node_silence: Duration::from_secs(3),
            reconnect_window: Duration::from_secs(10),
        }
    }
}

/// Token bucket: `rate` tokens per second, at most `burst` saved.
#[derive(Debug)]
pub struct TokenBucket {
    rate: f64,
    burst: f64,
    tokens: f64,
    last: Instant,
    /// Messages refused in the current one-second window.
    refused_window: u32,
    window_start: Instant,
}

/// What a bucket says about one message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Within the rate.
    Allow,
    /// Over the rate: drop this message.
    Drop,
    /// Far over the rate (more refused than the rate allows in one second): disconnect.
    Flood,
}

impl TokenBucket {
    /// A full bucket.
    pub fn new(rate: u32, burst: u32, now: Instant) -> Self {
        Self {
            rate: f64::from(rate.max(1)),
            burst: f64::from(burst.max(1)),
            tokens: f64::from(burst.max(1)),
            last: now,
            refused_window: 0,
            window_start: now,
        }
    }

    /// Takes a token for a message arriving at `now`.
    pub fn check(&mut self, now: Instant) -> Verdict {
        let dt = now.saturating_duration_since(self.last).as_secs_f64();
        self.last = now;
        self.tokens = (self.tokens + dt * self.rate).min(self.burst);
        if now.saturating_duration_since(self.window_start) >= Duration::from_secs(1) {
            self.window_start = now;
            self.refused_window = 0;
        }
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            return Verdict::Allow;
        }
        self.refused_window += 1;
        if f64::from(self.refused_window) > self.rate {
            Verdict::Flood
        } else {
            Verdict::Drop
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn steady_rate_is_allowed() {
        let t0 = Instant::now();
        let mut b = TokenBucket::new(20, 20, t0);
        for i in 0..200u64 {
            assert_eq!(b.check(t0 + Duration::from_millis(50 * i)), Verdict::Allow);
        }
    }

    #[test]
    fn a_flood_is_detected() {
        let t0 = Instant::now();
        let mut b = TokenBucket::new(20, 20, t0);
        let mut verdicts = Vec::new();
        for i in 0..100u64 {
            verdicts.push(b.check(t0 + Duration::from_millis(i)));
        }
        assert_eq!(verdicts[..20], [Verdict::Allow; 20]);
        assert_eq!(verdicts[20], Verdict::Drop);
        assert!(verdicts.contains(&Verdict::Flood));
    }
}
