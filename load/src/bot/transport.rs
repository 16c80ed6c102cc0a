//! The bot's transport: connect, the handshake until `Joined`, the session's read loop (one
//! `select!` over the WebSocket, the client frame timer and the run's stop), and writing out
//! what the connection queued.

use super::*;

impl Bot {
    // === Handshake ===

    pub(super) async fn connect_and_join(
        &mut self,
        resuming: bool,
        deadline: Instant,
    ) -> Result<Ws, ConnectError> {
        let cfg = &self.shared.cfg;
        let hs_deadline =
            (Instant::now() + cfg.connect_timeout).min(deadline + Duration::from_secs(1));
        // Small buffers: thousands of bots share one process (the default read buffer alone is
        // 128 KiB per connection); every send is written out at once (no Nagle, no batching).
        // Tungstenite zero-fills the free part of the read buffer before every read: at 8 KiB
        // that fill was the largest single cost of a received frame (docs/BENCHMARKS.md,
        // "plaza-load CPU per bot-frame"); frames are a few hundred bytes, and a larger message
        // is still read whole (the buffer grows to its length).
        let ws_cfg = WebSocketConfig::default()
            .read_buffer_size(READ_BUFFER)
            .write_buffer_size(0)
            .max_write_buffer_size(1 << 20);
        let connector = self
            .shared
            .tls
            .clone()
            .map(tokio_tungstenite::Connector::Rustls);
        let connect = tokio_tungstenite::connect_async_tls_with_config(
            cfg.gateway_url(self.gateway_idx),
            Some(ws_cfg),
            true,
            connector,
        );
        let (mut ws, _resp) = tokio::time::timeout_at(hs_deadline.into(), connect)
            .await
            .map_err(|_| ConnectError::Timeout)??;
        if !resuming {
            self.conn.forget_session();
        }
        let now = Instant::now();
        self.conn.set_wall_clock_ms(unix_ms());
        self.conn.connected(self.secs(now));
        match self.handshake(&mut ws, hs_deadline).await {
            Ok(()) => Ok(ws),
            Err(e) => {
                if !matches!(e, ConnectError::Closed(_)) {
                    // The bot drops this transport; the connection keeps its resume token.
                    self.transport_closed(None);
                }
                Err(e)
            }
        }
    }

    /// Reads until the connection reports `Joined` (negotiated, and joined or resumed into the
    /// room), before `until`.
    pub(super) async fn handshake(
        &mut self,
        ws: &mut Ws,
        until: Instant,
    ) -> Result<(), ConnectError> {
        self.flush(ws).await?;
        loop {
            let msg = tokio::time::timeout_at(until.into(), ws.next())
                .await
                .map_err(|_| ConnectError::Timeout)?;
            let b = match msg {
                None => {
                    self.transport_closed(None);
                    return Err(ConnectError::Closed(None));
                }
                Some(Err(e)) => return Err(e.into()),
                Some(Ok(Message::Binary(b))) => b,
                Some(Ok(Message::Close(frame))) => {
                    let code = frame.map(|f| u16::from(f.code));
                    self.count_close(code);
                    self.transport_closed(code);
                    return Err(ConnectError::Closed(code));
                }
                Some(Ok(Message::Text(_))) => {
                    self.count_decode_error("text_message");
                    continue;
                }
                Some(Ok(_)) => continue,
            };
            let now = Instant::now();
            let len = b.len();
            if let Err(e) = self.input(b, now) {
                return Err(ConnectError::Decode(e.to_string()));
            }
            let mut joined = false;
            while let Some(ev) = self.conn.poll_event() {
                match ev {
                    Event::Joined(info) => {
                        self.on_joined(&info, now);
                        joined = true;
                    }
                    // A resumed session that the gateway already put back in its room.
                    Event::Error(e) if e.code == ErrorCode::AlreadyJoined => {
                        self.phase = Phase::Joined;
                        joined = true;
                    }
                    Event::Error(e) => return Err(refused(&e)),
                    Event::Negotiated { .. } => {
                        // A resumed session out of any room (it had left): join again.
                        if self.conn.state() == plaza_client::State::Ready {
                            self.conn.join(&self.spec.room);
                        }
                    }
                    other => self.on_event(other, now, len),
                }
            }
            self.flush(ws).await?;
            if joined {
                return Ok(());
            }
        }
    }

    // === Session ===

    pub(super) async fn session(&mut self, ws: &mut Ws, deadline: Instant) -> SessionEnd {
        let mut tick = tokio::time::interval(self.client_frame());
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let stop = tokio::time::sleep_until(deadline.into());
        tokio::pin!(stop);
        // One wait on the run's stop flag for the whole session: a fresh `wait_for` per loop
        // turn registered and removed a waiter in the watch channel that every bot shares (a
        // contended lock per received frame).
        let mut stop_rx = self.stop.clone();
        let stopped_early = async move { stopped(&mut stop_rx).await };
        tokio::pin!(stopped_early);
        loop {
            let step = tokio::select! {
                msg = ws.next() => self.on_ws(msg),
                _ = tick.tick() => {
                    self.on_client_frame();
                    Ok(())
                }
                _ = &mut stop => Err(SessionEnd::Deadline),
                _ = &mut stopped_early => Err(SessionEnd::Deadline),
            };
            let step = match step {
                Ok(()) => self.flush(ws).await.map_err(|_| SessionEnd::Abrupt),
                Err(e) => Err(e),
            };
            match step {
                Ok(()) => {}
                Err(SessionEnd::Deadline) => {
                    self.close_normally(ws).await;
                    return SessionEnd::Deadline;
                }
                Err(SessionEnd::Abrupt) => {
                    self.transport_closed(None);
                    return SessionEnd::Abrupt;
                }
                Err(end) => return end,
            }
        }
    }

    pub(super) async fn close_normally(&mut self, ws: &mut Ws) {
        self.transport_closed(Some(1000));
        let frame = CloseFrame {
            code: CloseCode::Normal,
            reason: "run over".into(),
        };
        if ws.send(Message::Close(Some(frame))).await.is_err() {
            return;
        }
        // Drain until the server's close answer (frames still in flight are not counted).
        let _ = tokio::time::timeout(Duration::from_secs(1), async {
            while let Some(Ok(_)) = ws.next().await {}
        })
        .await;
    }

    pub(super) fn on_ws(
        &mut self,
        msg: Option<Result<Message, tungstenite::Error>>,
    ) -> Result<(), SessionEnd> {
        match msg {
            None => {
                self.count_close(None);
                Err(SessionEnd::Abrupt)
            }
            Some(Err(e)) => {
                tracing::debug!(bot = self.spec.index, error = %e, "connection failed");
                self.count_close(None);
                Err(SessionEnd::Abrupt)
            }
            Some(Ok(Message::Binary(b))) => {
                let now = Instant::now();
                let len = b.len();
                // A message that is not an envelope is counted (and skipped) by `input`.
                let _ = self.input(b, now);
                while let Some(ev) = self.conn.poll_event() {
                    self.on_session_event(ev, now, len);
                }
                Ok(())
            }
            Some(Ok(Message::Close(frame))) => {
                let code = frame.map(|f| u16::from(f.code));
                self.count_close(code);
                self.transport_closed(code);
                Err(SessionEnd::Closed(code))
            }
            Some(Ok(Message::Text(_))) => {
                // The protocol is binary only.
                self.count_decode_error("text_message");
                Ok(())
            }
            Some(Ok(_)) => Ok(()),
        }
    }

    /// Hands one binary message to the connection and counts what it did (bytes, frames and
    /// their intervals, resyncs, frames dropped while a keyframe was awaited).
    pub(super) fn input(&mut self, b: Bytes, now: Instant) -> Result<(), plaza_client::InputError> {
        self.samples.down_bytes += b.len() as u64;
        let frames_before = self.conn.stats().frames_received;
        let r = self.conn.handle_input_bytes(b, self.secs(now));
        if let Err(plaza_client::InputError::Decode(_)) = &r {
            self.count_decode_error("envelope");
        }
        if self.conn.stats().frames_received != frames_before {
            self.samples.frames += 1;
            if let Some(prev) = self.last_frame_at {
                self.samples.snapshot_interval.push(micros(now - prev));
            }
            self.last_frame_at = Some(now);
        }
        self.count_connection_stats();
        r
    }

    /// Folds the connection's resync and awaiting-keyframe counters into the run's.
    pub(super) fn count_connection_stats(&mut self) {
        let s = self.conn.stats();
        let (resyncs, dropped) = (s.resyncs, s.dropped_awaiting_keyframe);
        let counters = &self.shared.stats.counters;
        if resyncs != self.counted_resyncs {
            Counters::add(
                &counters.keyframes_requested,
                resyncs.saturating_sub(self.counted_resyncs),
            );
            self.counted_resyncs = resyncs;
            self.resync_pending = true;
        }
        if dropped != self.counted_dropped {
            // Deltas that were in flight behind the broken one: expected until the keyframe.
            Counters::add(
                &counters.frames_awaiting_keyframe,
                dropped.saturating_sub(self.counted_dropped),
            );
            self.counted_dropped = dropped;
        }
    }

    /// Tells the connection its transport is gone (it keeps or forgets its resume token by the
    /// close code) and drops what that reports.
    pub(super) fn transport_closed(&mut self, code: Option<u16>) {
        self.conn.handle_close(code);
        while self.conn.poll_event().is_some() {}
    }

    /// Writes what the connection queued, one WebSocket message per envelope.
    pub(super) async fn flush(&mut self, ws: &mut Ws) -> Result<(), tungstenite::Error> {
        while let Some(bytes) = self.conn.poll_transmit() {
            self.samples.up_bytes += bytes.len() as u64;
            ws.send(Message::Binary(bytes.into())).await?;
        }
        Ok(())
    }
}
