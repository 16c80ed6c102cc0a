//! The seed's adaptive movement send rate ("Send System & Adaptive Rate"), sans I/O.
//!
//! [`SendRate`] decides, once per client frame, whether a bot sends a movement message:
//! 10 Hz while anything changed, decaying ×2 per idle send to 1 Hz, a hard cap of 10 messages per
//! one-second window, and a bypass for the first message (still counted against the cap).
//! It reads no clock: every call takes `now`. It does not build or send messages.

use std::time::{Duration, Instant};

/// Settings of the adaptive rate; defaults are the seed's.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SendRateConfig {
    /// Fastest interval between ordinary sends, used while moving (seed: 0.1 s).
    pub move_interval: Duration,
    /// Slowest interval, reached after idle decay (seed: 1 s).
    pub stand_interval: Duration,
    /// Hard cap of messages per one-second window, bypasses included (seed: 10).
    pub max_per_second: u32,
    /// Slack subtracted from the interval gate so that a client frame that arrives a few
    /// milliseconds early (timer jitter) does not skip a whole frame.
    pub jitter_slack: Duration,
}

impl Default for SendRateConfig {
    fn default() -> Self {
        Self {
            move_interval: Duration::from_millis(100),
            stand_interval: Duration::from_secs(1),
            max_per_second: 10,
            jitter_slack: Duration::from_millis(5),
        }
    }
}

/// Why [`SendRate::poll`] said to send, or not.
#[derive(Clone, Copy, Debug, Eq, PartialEq)]
pub enum SendDecision {
    /// Send now: the interval elapsed.
    Send,
    /// Send now: a bypass (first message, teleport, grounded edge) skipped the interval.
    SendBypass,
    /// Not yet: the current interval has not elapsed.
    Wait,
    /// The per-second cap is exhausted.
    Capped,
}

impl SendDecision {
    /// Whether the caller should send a message now.
    pub fn should_send(self) -> bool {
        matches!(self, Self::Send | Self::SendBypass)
    }
}

/// The adaptive send-rate state machine of one client.
///
/// Invariant: `move_interval <= interval <= stand_interval`, and at most `max_per_second`
/// sends are granted per window.
#[derive(Clone, Debug)]
pub struct SendRate {
    cfg: SendRateConfig,
    /// Current minimum interval between ordinary sends.
    interval: Duration,
    last_sent: Option<Instant>,
    window_start: Option<Instant>,
    sent_in_window: u32,
}

impl SendRate {
    /// A fresh state: interval at the moving rate, nothing sent yet.
    pub fn new(cfg: SendRateConfig) -> Self {
        Self {
            cfg,
            interval: cfg.move_interval,
            last_sent: None,
            window_start: None,
            sent_in_window: 0,
        }
    }

    /// The current minimum interval between ordinary sends.
    pub fn interval(&self) -> Duration {
        self.interval
    }

    /// Decides for one client frame at `now`. `changed` says whether anything moved since the
    /// last sent message; `bypass` forces a send (first message and discrete edges) unless the
    /// cap is exhausted. A returned send is recorded as done.
    pub fn poll(&mut self, now: Instant, changed: bool, bypass: bool) -> SendDecision {
        // The per-second window resets every second.
        match self.window_start {
            Some(start) if now.saturating_duration_since(start) < Duration::from_secs(1) => {}
            _ => {
                self.window_start = Some(now);
                self.sent_in_window = 0;
            }
        }
        if self.sent_in_window >= self.cfg.max_per_second {
            return SendDecision::Capped;
        }
        // Any motion instantly restores the fast rate.
        if changed && self.interval > self.cfg.move_interval {
            self.interval = self.cfg.move_interval;
        }
        let first = self.last_sent.is_none();
        let decision = if bypass || first {
            SendDecision::SendBypass
        } else {
            let elapsed = self
                .last_sent
                .map_or(Duration::MAX, |t| now.saturating_duration_since(t));
            if elapsed + self.cfg.jitter_slack >= self.interval {
                SendDecision::Send
            } else {
                SendDecision::Wait
            }
        };
        if decision.should_send() {
            self.last_sent = Some(now);
            self.sent_in_window += 1;
            // Exponential decay while idle: 0.1 → 0.2 → 0.4 → 0.8 → 1.0 s.
            if !changed && self.interval < self.cfg.stand_interval {
                self.interval = (self.interval * 2).min(self.cfg.stand_interval);
            }
        }
        decision
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    /// Runs client frames every `frame` for `total`, returns the send instants (ms offsets).
    fn simulate(
        rate: &mut SendRate,
        t0: Instant,
        frame: u64,
        total: u64,
        changed: bool,
    ) -> Vec<u64> {
        let mut sent = Vec::new();
        let mut t = 0;
        while t < total {
            if rate.poll(t0 + ms(t), changed, false).should_send() {
                sent.push(t);
            }
            t += frame;
        }
        sent
    }

    #[test]
    fn first_message_bypasses_and_moving_sends_at_10hz() {
        let mut rate = SendRate::new(SendRateConfig::default());
        let t0 = Instant::now();
        assert_eq!(rate.poll(t0, true, false), SendDecision::SendBypass);
        assert_eq!(rate.poll(t0 + ms(50), true, false), SendDecision::Wait);
        assert_eq!(rate.poll(t0 + ms(100), true, false), SendDecision::Send);
        // Moving for 2 s with 20 ms client frames: one send per 100 ms.
        let sent = simulate(&mut rate, t0 + ms(120), 20, 2000, true);
        assert_eq!(sent.len(), 20, "{sent:?}");
        assert_eq!(rate.interval(), ms(100));
    }

    #[test]
    fn idle_decays_by_doubling_to_one_hertz() {
        let mut rate = SendRate::new(SendRateConfig::default());
        let t0 = Instant::now();
        let sent = simulate(&mut rate, t0, 10, 5000, false);
        // Gaps: 0.2, 0.4, 0.8, 1.0, 1.0 ... (first send bypasses; the first ordinary gap is the
        // doubled interval because the bypass send itself was idle).
        let gaps: Vec<u64> = sent.windows(2).map(|w| w[1] - w[0]).collect();
        assert_eq!(&gaps[..4], &[200, 400, 800, 1000], "{gaps:?}");
        assert!(gaps[4..].iter().all(|g| *g == 1000), "{gaps:?}");
        assert_eq!(rate.interval(), ms(1000));
    }

    #[test]
    fn motion_restores_fast_rate_at_once() {
        let mut rate = SendRate::new(SendRateConfig::default());
        let t0 = Instant::now();
        simulate(&mut rate, t0, 10, 5000, false);
        assert_eq!(rate.interval(), ms(1000));
        // Idle sends were at 0, 0.2, 0.6, 1.4, 2.4, 3.4 and 4.4 s; moving again at 4.45 s restores
        // the 100 ms interval, so the next send is due at 4.5 s, not 5.4 s.
        assert_eq!(rate.poll(t0 + ms(4450), true, false), SendDecision::Wait);
        assert_eq!(rate.interval(), ms(100));
        assert_eq!(rate.poll(t0 + ms(4500), true, false), SendDecision::Send);
    }

    #[test]
    fn hard_cap_limits_bypasses_per_second() {
        let mut rate = SendRate::new(SendRateConfig::default());
        let t0 = Instant::now();
        let granted = (0..30)
            .filter(|i| rate.poll(t0 + ms(i * 10), true, true).should_send())
            .count();
        assert_eq!(granted, 10);
        assert_eq!(rate.poll(t0 + ms(400), true, true), SendDecision::Capped);
        // A new window opens after one second.
        assert_eq!(
            rate.poll(t0 + ms(1000), true, true),
            SendDecision::SendBypass
        );
    }

    #[test]
    fn jitter_slack_keeps_10hz_with_slightly_early_frames() {
        let mut rate = SendRate::new(SendRateConfig::default());
        let t0 = Instant::now();
        // 100 ms client frames that arrive 2 ms early every time still send every frame.
        let mut t = 0;
        let mut sends = 0;
        for _ in 0..10 {
            if rate.poll(t0 + ms(t), true, false).should_send() {
                sends += 1;
            }
            t += 98;
        }
        assert_eq!(sends, 10);
    }
}
